"""The whole video run at toy size: PushT recorded with gym-pusht, tokenizer, MLE, GRPO through
real services (reward with ST-LPIPS, decoder with the frame tokenizer, rollout with the world
model, the queue-fed trainer), continued MLE for the same wall time, three evaluations, report.

Sizes are far too small to learn anything; this checks that every phase runs and hands the right
things to the next, that no prompt is lost, and that GRPO really changed the weights.
"""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from PIL import Image

from rlvr_world.apps.orchestrator.ledger import read_ledger
from rlvr_world.apps.video.config import VideoPipelineConfig, load_video_config
from rlvr_world.apps.video.pipeline import run_video_pipeline
from rlvr_world.queue.server import REDIS_URL_ENV

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(1200)]

REPO = Path(__file__).resolve().parents[2]


def test_video_run_end_to_end_at_toy_size(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import torch
    from safetensors.torch import load_file

    monkeypatch.delenv(REDIS_URL_ENV, raising=False)
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    monkeypatch.setenv("SDL_VIDEODRIVER", "dummy")
    cfg = load_video_config(
        REPO / "configs" / "video" / "smoke.yaml", {"run.run_dir": str(tmp_path)}
    )
    summary = run_video_pipeline(cfg, "smoke.yaml")

    assert summary["rl"]["trainer_exit"] == 0
    rl = summary["rl"]["by_seed"]["0"]
    assert rl["trainer_exit"] == 0
    assert rl["pushed"] >= cfg.rl.steps * cfg.rl.groups_per_step
    events = read_ledger(tmp_path / "seed0" / "ledger.jsonl")
    started = {e["key"] for e in events if e["event"] == "start"}
    ended = {e["key"] for e in events if e["event"] in ("pushed", "failed")}
    assert started == ended  # every request ends pushed or failed with a reason
    assert all(e.get("reason") for e in events if e["event"] == "failed")
    pushed = [e for e in events if e["event"] == "pushed"]
    assert all(s == "ok" for e in pushed for s in e["statuses"])  # every frame scored

    mle = load_file(str(tmp_path / "model" / "mle" / "model.safetensors"))
    final = load_file(str(Path(rl["checkpoint"]) / "model.safetensors"))
    assert Path(rl["checkpoint"]).name.endswith(f"{cfg.rl.steps:08d}")
    assert any(not torch.equal(mle[k], final[k]) for k in mle)  # GRPO moved the weights

    models = {"mle", "rlvr", "mle_continued"}
    assert set(summary["eval"]) == models | {f"{m}_shuffled_actions" for m in models}
    for report in summary["eval"].values():
        assert report["n_clips"] == cfg.eval.clips
        for key in ("reward", "l1", "mse", "psnr", "ssim", "stlpips", "repetition_rate"):
            assert math.isfinite(report[key]), key
    control = summary["baseline"]["by_seed"]["0"]
    assert control["budget_s"] == pytest.approx(rl["seconds"])
    assert control["seconds"] >= 0.9 * rl["seconds"]
    head = summary["headline"]
    assert head["n"] == cfg.eval.clips and head["seeds"] == [0, 1]
    assert set(summary["rl"]["by_seed"]) == set(summary["baseline"]["by_seed"]) == {"0", "1"}
    assert head["start"] == pytest.approx(summary["eval"]["mle"]["reward"])
    assert head["rlvr"] == pytest.approx(summary["eval"]["rlvr"]["reward"])
    assert head["copy_last_frame"] == pytest.approx(summary["eval"]["mle"]["copy_reward"])
    low, high = head["ci95"]
    assert low <= head["ci_mean"] <= high
    assert set(summary["headline_terms"]) == {"stlpips", "l1", "mse", "psnr", "ssim"}
    _check_action_reading(tmp_path, cfg, summary)
    _check_files(tmp_path, cfg, summary)


def _check_action_reading(
    tmp_path: Path, cfg: VideoPipelineConfig, summary: dict[str, Any]
) -> None:
    """The IDM trained on the train episodes, the reward service scoring the idm and state terms
    at weight 0 (every pushed status ok above needs the items' actions and states), and the
    action-reading headline of every model."""
    idm = summary["idm"]
    assert idm["trained"] and idm["path"] == str(tmp_path / "idm")
    assert idm["data"]["held_out_episodes"] == cfg.data.held_out  # the run's test episodes
    assert (tmp_path / "idm" / "report.json").is_file()
    assert "IDM /" in (tmp_path / "seed0" / "logs" / "reward.log").read_text()
    found = summary["headline"]["action_reading"]
    assert found == summary["action_reading"] and found["n"] == cfg.eval.clips
    assert set(found["models"]) == {"start", "control", "rlvr"}
    for entry in found["models"].values():
        for key in ("reward_shuffle_gap", "agent_error_px_shuffle_gap", "idm_acc", "idm_mae"):
            low, high = entry[key]["ci95"]
            assert low <= entry[key]["mean"] <= high, key
    assert found["models"]["rlvr"]["seeds"] == 2
    start = found["models"]["start"]["reward"]["mean"]
    assert start == pytest.approx(summary["headline"]["start"])
    assert {"true_frames", "copy_last_frame", "tokenizer_ceiling"} <= set(found["baselines"])
    assert found["baselines"]["true_frames"]["agent_error_px"] < 10.0  # the state check's floor
    assert "reward_shuffle_gap" in found["rlvr_minus_control"]
    per_clip = json.loads(
        (tmp_path / "seed1" / "eval" / "rlvr_shuffled_actions" / "eval.json").read_text()
    )
    assert len(per_clip["per_clip"]["agent_error_px"]) == cfg.eval.clips
    assert "## Does the model read its actions?" in (tmp_path / "report.md").read_text()


def _check_files(tmp_path: Path, cfg: VideoPipelineConfig, summary: dict[str, Any]) -> None:
    """The report, the pictures, summary.json and each seed's per-clip evaluations."""
    head = summary["headline"]
    report = (tmp_path / "report.md").read_text()
    assert "| reward -(L1 + ST-LPIPS) (higher is better) |" in report
    assert "![compare](compare.png)" in report and "tokenizer/recon.png" in report
    with Image.open(tmp_path / "compare.png") as img:
        # 3 rows of 32x32 frames at scale 2: context x2, three models, true = 6 columns
        assert img.size == (6 * (64 + 4) + 4, 16 + 3 * (64 + 4))
    assert (tmp_path / "curves.png").stat().st_size > 0
    saved = json.loads((tmp_path / "summary.json").read_text())
    assert saved["rl"]["trainer_exit"] == 0 and saved["headline"] == head
    assert "per_clip" not in saved["eval"]["mle"]  # the summary keeps means; eval.json every clip
    for seed in (0, 1):
        folder = tmp_path / f"seed{seed}"
        per_clip = json.loads((folder / "eval" / "rlvr" / "eval.json").read_text())["per_clip"]
        assert len(per_clip["reward"]) == cfg.eval.clips
        assert (folder / "model" / "mle_continued" / "model.safetensors").is_file()
    # the sampling was tuned on the validation clips, then used everywhere
    tuned = json.loads((tmp_path / "eval" / "validation.json").read_text())
    assert len(tuned["candidates"]) == len(cfg.eval.candidates)
    assert summary["sampling"]["used"] == tuned["chosen"]
    assert summary["eval"]["rlvr"]["sampling"]["temperature"] == tuned["chosen"]["temperature"]
    assert summary["eval"]["mle_shuffled_actions"]["n_clips"] == cfg.eval.clips
    assert "## Headline: RLVR against continued MLE" in report


def test_video_run_with_context_anchored_frames(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The smoke run with ``model.anchor_dilate: 0``: the RL reward scores anchored frames (the
    orchestrator decodes each group's context tokens with it and anchors before scoring), every
    evaluation is anchored, and copying the last frame's tokens is then its pixels exactly."""
    monkeypatch.delenv(REDIS_URL_ENV, raising=False)
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    monkeypatch.setenv("SDL_VIDEODRIVER", "dummy")
    overrides = {
        "run.run_dir": str(tmp_path),
        "run.seeds": 1,
        "model.anchor_dilate": 0,
        "rl.balance_prompts": 2,  # balanced on anchored samples, as the reward sees them
        "data.validation": 0,
        "eval.candidates": [],
        "eval.temperature": 0.0,
        "eval.shuffled_actions": False,
    }
    cfg = load_video_config(REPO / "configs" / "video" / "smoke.yaml", overrides)
    summary = run_video_pipeline(cfg, "smoke.yaml")

    rl = summary["rl"]["by_seed"]["0"]
    assert summary["rl"]["trainer_exit"] == 0
    events = read_ledger(tmp_path / "seed0" / "ledger.jsonl")
    # no prompt failed but those still in flight when the run stopped
    failed = [e["reason"] for e in events if e["event"] == "failed"]
    assert len(failed) == rl["failed"] and all(r.startswith("cancelled") for r in failed), failed
    pushed = [e for e in events if e["event"] == "pushed"]
    assert len(pushed) >= cfg.rl.steps * cfg.rl.groups_per_step
    assert all(s == "ok" for e in pushed for s in e["statuses"])  # anchored and scored
    for report in summary["eval"].values():
        assert report["anchor_dilate"] == 0
    mle = summary["eval"]["mle"]
    for key in ("reward", "l1", "psnr"):
        assert mle[f"copy_{key}"] == pytest.approx(mle[f"raw_copy_{key}"]), key
    head = summary["headline"]
    assert head["baselines"]["copy_last_frame"] == pytest.approx(
        head["baselines"]["copy_last_frame_pixels"]
    )
    _check_best_of_k(tmp_path, cfg)
    _check_sweep(tmp_path)


def _check_best_of_k(run_dir: Path, cfg: VideoPipelineConfig) -> None:
    """``task: video_best_of_k`` (the smoke version of configs/experiments/video_best_of_k.yaml)
    through the command line on the finished run: the run's saved config.json is what it
    rebuilds, both models sample 4 frames per clip, the nested curves are monotone, the files
    are written; the sampled metrics are the run's anchored ones."""
    from rlvr_world.apps.cli import main

    saved = VideoPipelineConfig.model_validate_json((run_dir / "config.json").read_text())
    assert saved == cfg
    out = run_dir / "best_of_k"
    argv = [
        "run",
        str(REPO / "configs" / "experiments" / "video_best_of_k.yaml"),
        "--set",
        f"source.run_dir={run_dir}",
        "--set",
        "best_of_k.ks=[1, 2, 4]",
        "--set",
        "best_of_k.clips=3",
        "--set",
        f"run.run_dir={out}",
    ]
    assert main(argv) == 0
    summary = json.loads((out / "summary.json").read_text())
    head = summary["headline"]
    assert head["n"] == 3 and head["ks"] == [1, 2, 4] and summary["anchor_dilate"] == 0
    assert set(summary["curves"]) == {"reward", "l1", "mse", "psnr", "ssim", "stlpips"}
    for curve in summary["curves"].values():
        sign = 1 if curve["higher_is_better"] else -1
        for name in ("base", "rlvr"):
            assert all(sign * (b - a) >= 0 for a, b in itertools.pairwise(curve[name]))
    samples = json.loads((out / "samples.json").read_text())
    assert np.asarray(samples["rlvr"]["reward"]).shape == (4, 3)
    assert head["base"][0] == pytest.approx(np.mean(samples["base"]["reward"][0]))
    assert "| k | base | RLVR | RLVR - base (95% CI) |" in (out / "report.md").read_text()
    with Image.open(out / "best_of_k.png") as img:
        assert img.size[0] > 0


def _check_sweep(run_dir: Path) -> None:
    """``task: video_sweep`` (the smoke version of configs/experiments/video_metric_rewards.yaml:
    two arms, 2 GRPO steps) on the finished run: each arm starts from the run's MLE model and
    tokenizer (nothing retrained), evaluates on the same clips, and the report compares them."""
    from rlvr_world.apps.cli import main

    out = run_dir / "sweep"
    shipped = yaml.safe_load(
        (REPO / "configs" / "experiments" / "video_metric_rewards.yaml").read_text()
    )
    smoke = {
        **shipped,
        "source": {"run_dir": str(run_dir)},
        "common": {"rl.steps": 2},
        "arms": {k: shipped["arms"][k] for k in ("mse", "ssim")},
        "run": {"run_dir": str(out)},
    }
    config = run_dir / "sweep.yaml"
    config.write_text(yaml.safe_dump(smoke))
    assert main(["run", str(config)]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert list(summary["arms"]) == ["mse", "ssim"]
    start = json.loads((run_dir / "eval" / "mle" / "eval.json").read_text())["per_clip"]
    assert summary["start"]["reward"] == pytest.approx(np.mean(start["reward"]))  # same start
    for name, arm in summary["arms"].items():
        arm_summary = json.loads((out / name / "summary.json").read_text())
        assert arm_summary["mle"] == {"path": str(run_dir / "model" / "mle"), "trained": False}
        assert arm_summary["tokenizer"]["trained"] is False
        assert arm_summary["rl"]["by_seed"]["0"]["weights"] == shipped["arms"][name]["rl.weights"]
        assert len(arm["train_reward"]) == 2
        assert 0.0 <= arm["repetition_rate"] <= 1.0
        for metric in summary["metrics"]:
            lo, hi = arm["metrics"][metric]["ci95"]
            assert lo <= arm["metrics"][metric]["minus_start"] <= hi
        assert (out / name / "data").resolve() == (run_dir / "data").resolve()  # not re-recorded
    assert "| start (MLE) |" in (out / "report.md").read_text()
    assert (out / "sweep.png").stat().st_size > 0
