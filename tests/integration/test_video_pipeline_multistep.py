"""The multi-step video run at toy size (``configs/video/smoke_multistep.yaml``): PushT recorded,
tokenizer, MLE on ``ctx [d1 a1] .. [dS aS]`` sequences, GRPO through real services with the true
actions inserted by the rollout between generated frames, continued MLE, three multi-step
evaluations, report.

Sizes are far too small to learn anything; this checks that every phase runs with the multi-step
layout, that no prompt is lost, that every pushed sample's loss mask is 0 exactly on the inserted
action tokens, and that GRPO changed the weights. Run twice: with the per-frame tokenizer, and with
the compressive one (``tokenizer.kind: compressive``: 64 context tokens, 16 dynamics tokens per
frame; every RL group is decoded by the decoder service against its prompt's context tokens,
which it refuses to do without them, so an "ok" status on every sample shows they travelled).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from PIL import Image

from rlvr_world.apps.orchestrator.ledger import read_ledger
from rlvr_world.apps.video.config import load_video_config
from rlvr_world.apps.video.pipeline import run_video_pipeline
from rlvr_world.queue.server import REDIS_URL_ENV

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(1200)]

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("kind", "per_frame", "context"), [("frame", 64, 64), ("compressive", 16, 64)]
)
def test_multistep_video_run_end_to_end_at_toy_size(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str, per_frame: int, context: int
) -> None:
    import torch
    from safetensors.torch import load_file

    monkeypatch.delenv(REDIS_URL_ENV, raising=False)
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    monkeypatch.setenv("SDL_VIDEODRIVER", "dummy")
    cfg = load_video_config(
        REPO / "configs" / "video" / "smoke_multistep.yaml",
        {"run.run_dir": str(tmp_path), "tokenizer.kind": kind},
    )
    assert cfg.model.layout == "multi_step" and cfg.model.context_range == 3
    summary = run_video_pipeline(cfg, "smoke_multistep.yaml")
    model = summary["model"]
    assert (model["tokenizer"], model["tokens_per_frame"], model["context_tokens"]) == (
        kind,
        per_frame,
        context,
    )

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
    assert all(s == "ok" for e in pushed for s in e["statuses"])  # every rollout scored

    # every pushed sample: S - 1 blocks of (frame, actions), loss mask 0 exactly on the actions
    per = int(summary["model"]["tokens_per_frame"])
    dims = int(summary["model"]["action_dims"])
    steps = cfg.model.segment_frames - 1
    expected = [s * (per + dims) + per + d for s in range(steps) for d in range(dims)]
    for entry in pushed:
        assert entry["masked"] == [expected] * cfg.rl.group_size, entry["key"]

    mle = load_file(str(tmp_path / "model" / "mle" / "model.safetensors"))
    final = load_file(str(Path(rl["checkpoint"]) / "model.safetensors"))
    assert Path(rl["checkpoint"]).name.endswith(f"{cfg.rl.steps:08d}")
    assert any(not torch.equal(mle[k], final[k]) for k in mle)  # GRPO moved the weights

    assert set(summary["eval"]) == {"mle", "rlvr", "mle_continued"}
    for report in summary["eval"].values():
        assert report["n_clips"] == cfg.eval.clips and report["layout"] == "multi_step"
        assert report["predicted_frames"] == steps and len(report["reward_per_step"]) == steps
        for key in ("reward", "l1", "mse", "psnr", "ssim", "stlpips", "repetition_rate"):
            assert math.isfinite(report[key]), key
        assert all(math.isfinite(r) for r in report["reward_per_step"])
        assert report["reward"] == pytest.approx(sum(report["reward_per_step"]) / steps)
    # both "nothing moves" baselines: d1's tokens decoded, and d1's own pixels
    baselines = summary["headline"]["baselines"]
    assert set(baselines) == {"copy_last_frame", "copy_last_frame_pixels"}
    assert baselines["copy_last_frame_pixels"] == pytest.approx(
        summary["eval"]["mle"]["raw_copy_reward"]
    )
    saved = json.loads((tmp_path / "seed0" / "eval" / "rlvr" / "eval.json").read_text())
    assert saved["reward_per_step"] == summary["eval"]["rlvr"]["reward_per_step"]
    assert summary["model"]["clip_frames"] == cfg.model.segment_frames + 2

    report = (tmp_path / "report.md").read_text()
    assert "| reward -(L1 + ST-LPIPS) (higher is better) |" in report
    with Image.open(tmp_path / "compare.png") as img:
        # 3 rows of 32x32 frames at scale 2: ctx, d1, three models, true dS = 6 columns
        assert img.size == (6 * (64 + 4) + 4, 16 + 3 * (64 + 4))
    assert (tmp_path / "curves.png").stat().st_size > 0
