"""The smoke MPC and policy-evaluation runs end to end through ``rlvr-world run``'s code path:
tiny random models built on disk, gym-pusht, summary.json, report.md and the trajectory PNG; and
a run whose base model is missing, which counts that planner's faults and finishes the rest."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

pytest.importorskip("gym_pusht", reason="gym-pusht is in the video extra")

from rlvr_world.apps.commands import main

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(900)]

REPO = Path(__file__).resolve().parents[2]


def _models(tmp: Path) -> list[str]:
    m = tmp / "models"
    return [
        "--set", f"models.base={m / 'base'}",
        "--set", f"models.rlvr={m / 'rlvr' / 'checkpoints' / 'latest'}",
        "--set", f"models.spec={m / 'base'}",
        "--set", f"models.tokenizer={m / 'tokenizer'}",
    ]  # fmt: skip


def _run(config: str, tmp: Path, name: str, *extra: str) -> dict[str, Any]:
    run_dir = tmp / name
    code = main([str(REPO / "configs" / "mpc" / config), *_models(tmp),
                 "--set", f"run.run_dir={run_dir}", *extra])  # fmt: skip
    assert code == 0
    summary: dict[str, Any] = json.loads((run_dir / "summary.json").read_text())
    assert (run_dir / "report.md").read_text().startswith("# PushT")
    return summary


def _check_metric(m: dict[str, Any], n: int) -> None:
    assert m["n"] == n
    low, high = m["ci95"]
    assert low <= m["value"] <= high


def test_smoke_mpc_end_to_end(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SDL_VIDEODRIVER", "dummy")
    summary = _run("smoke_pusht.yaml", tmp_path, "mpc")
    head = summary["headline"]
    n = summary["n_tasks"]
    assert n == 3 and summary["planners"] == ["oracle", "random", "base", "rlvr"]
    for planner in summary["planners"]:
        assert head[planner]["faults"] == 0
        _check_metric(head[planner]["success_rate"], n)
        _check_metric(head[planner]["final_coverage"], n)
        if planner != "random":
            per_call = head[planner]["plan_seconds_per_call"]
            assert per_call > 0.0
            assert head[planner]["plan_seconds_per_action"] == pytest.approx(per_call / 2)
    diff = head["rlvr_minus_base"]
    assert diff["success_rate"]["n"] == n
    low, high = diff["final_coverage"]["ci95"]
    assert low <= diff["final_coverage"]["value"] <= high
    assert len(summary["episodes"]) == 4 * n
    lines = (tmp_path / "mpc" / "episodes.jsonl").read_text().splitlines()
    assert len(lines) == 4 * n
    png = Image.open(tmp_path / "mpc" / "trajectory.png")
    assert png.size[0] > 4 * 64 and png.size[1] > 2 * 64  # start, 4 steps, goal; two rows
    assert "trajectory.png" in (tmp_path / "mpc" / "report.md").read_text()

    # the same episodes summarised again from episodes.jsonl give the same headline
    again = _run("smoke_pusht.yaml", tmp_path, "mpc", "--set", "run.summarize_only=true")
    assert again["headline"] == head
    assert again["partial"] is False

    # a shard of the last task alone plans it the same way; its lines appended to the full
    # run's file are repeats, which the summary ignores
    shard = _run("smoke_pusht.yaml", tmp_path, "shard", "--set", "tasks.start=2")
    assert shard["n_tasks"] == 1 and {e["task"] for e in shard["episodes"]} == {2}
    full = {(e["task"], e["planner"]): e for e in summary["episodes"]}
    for e in shard["episodes"]:
        mine = full[(2, e["planner"])]
        # pymunk keeps contact caches a state snapshot does not hold, so a task planned in a
        # fresh process replays to ~0.01 px, not bit for bit (measured: coverage 0.8382 vs 0.8387)
        assert e["success"] == mine["success"]
        assert e["coverage"] == pytest.approx(mine["coverage"], abs=0.01)
    with (tmp_path / "mpc" / "episodes.jsonl").open("a") as out:
        out.write((tmp_path / "shard" / "episodes.jsonl").read_text())
    merged = _run("smoke_pusht.yaml", tmp_path, "mpc", "--set", "run.summarize_only=true")
    assert merged["headline"] == head


def test_smoke_mpc_with_a_missing_model_counts_its_faults(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SDL_VIDEODRIVER", "dummy")
    summary = _run(
        "smoke_pusht.yaml", tmp_path, "mpc", "--set", f"models.base={tmp_path / 'absent'}",
        "--set", "models.build_tiny=false", "--set", 'run.planners=["random", "base"]',
    )  # fmt: skip
    head = summary["headline"]
    assert head["base"]["faults"] == 3
    assert head["base"]["fault_reasons"] == {"model_unavailable": 3}
    assert head["base"]["success_rate"]["n"] == 0
    assert head["random"]["faults"] == 0 and head["random"]["success_rate"]["n"] == 3
    reasons = {e["reason"] for e in summary["episodes"] if e["planner"] == "base"}
    assert len(reasons) == 1 and "no world model at" in reasons.pop()


def test_smoke_policy_eval_end_to_end(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SDL_VIDEODRIVER", "dummy")
    summary = _run("smoke_policy_eval_pusht.yaml", tmp_path, "pe")
    head = summary["headline"]
    n_policies, episodes = len(summary["policies"]), summary["episodes"]
    assert n_policies == 4 and episodes == 3
    assert len(head["simulator"]["value"]) == n_policies
    for name in ("base", "rlvr"):
        _check_metric(head[name], n_policies * episodes)
        assert len(summary["model_success"][name]) == n_policies
    assert set(head["rlvr_minus_base"]) >= {"metric", "n", "value", "ci95"}
    assert summary["faults"] == {}


def test_frame_skip_models_plan_and_evaluate_one_model_step_at_a_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The smoke video run at pusht_skip's step form (frame_skip 4, agent_relative moves), then
    MPC and policy evaluation with its MLE model and RLVR checkpoint: every planner plans moves
    from the agent, each executed for 4 simulator steps, and the frames are the models' 32x32."""
    from rlvr_world.apps.video.config import load_video_config
    from rlvr_world.apps.video.pipeline import run_video_pipeline
    from rlvr_world.queue.server import REDIS_URL_ENV

    monkeypatch.setenv("SDL_VIDEODRIVER", "dummy")
    monkeypatch.delenv(REDIS_URL_ENV, raising=False)
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    video = tmp_path / "video_smoke_skip"
    cfg = load_video_config(REPO / "configs" / "video" / "smoke_skip.yaml",
                            {"run.run_dir": str(video)})  # fmt: skip
    run_video_pipeline(cfg, "smoke_skip.yaml")
    models = [
        "--set", f"models.base={video / 'model' / 'mle'}",
        "--set", f"models.rlvr={video / 'seed0' / 'trainer' / 'checkpoints' / 'latest'}",
        "--set", f"models.spec={video / 'model' / 'mle'}",
        "--set", f"models.tokenizer={video / 'tokenizer'}",
    ]  # fmt: skip
    space = {"frame_skip": 4, "actions": "agent_relative", "low": -128.0, "high": 128.0}
    for config, name in (
        ("smoke_pusht_skip.yaml", "mpc"),
        ("smoke_policy_eval_pusht_skip.yaml", "pe"),
    ):
        run_dir = tmp_path / name
        code = main([str(REPO / "configs" / "mpc" / config), *models,
                     "--set", f"run.run_dir={run_dir}"])  # fmt: skip
        assert code == 0
        summary = json.loads((run_dir / "summary.json").read_text())
        assert summary["action_space"] == space
        if name == "mpc":
            head = summary["headline"]
            assert summary["frame_side"] == 32 and summary["n_tasks"] == 3
            for planner in ("oracle", "random", "base", "rlvr"):
                assert head[planner]["faults"] == 0
                _check_metric(head[planner]["success_rate"], 3)
            assert head["rlvr_minus_base"]["final_coverage"]["n"] == 3
            with Image.open(run_dir / "trajectory.png") as img:
                assert img.size[0] > 0
        else:
            assert summary["faults"] == {}
            for model in ("base", "rlvr"):
                _check_metric(summary["headline"][model], 4 * 3)
            assert "spearman" in summary["headline"]["rlvr"]
    # a model whose video.json says 4 refuses another frame_skip, as a fault with the reason
    bad = tmp_path / "mpc_bad"
    code = main([str(REPO / "configs" / "mpc" / "smoke_pusht_skip.yaml"), *models,
                 "--set", "models.frame_skip=2", "--set", f"run.run_dir={bad}",
                 "--set", 'run.planners=["base"]'])  # fmt: skip
    assert code == 0
    episodes = json.loads((bad / "summary.json").read_text())["episodes"]
    assert all("trained at frame_skip 4" in e["reason"] for e in episodes)
