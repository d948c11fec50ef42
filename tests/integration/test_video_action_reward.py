"""The action-reward experiment end to end at smoke size: the smoke video run (which trains an
IDM), then ``configs/experiments/smoke_video_action_reward.yaml`` from its MLE model: three RLVR
arms (pixel, pixel + state, pixel + idm) through real services, one continued-MLE control run
with the first arm, every model evaluated with true and shuffled actions, each arm's headline
against the shared control with its action reading. The numbers mean nothing at this size."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rlvr_world.apps.video.config import load_video_config
from rlvr_world.apps.video.pipeline import run_video_pipeline
from rlvr_world.apps.video.sweep import load_sweep_config, run_sweep
from rlvr_world.queue.server import REDIS_URL_ENV

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(1200)]

REPO = Path(__file__).resolve().parents[2]


def test_the_action_reward_arms_share_one_control_and_report_how_they_read_actions(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(REDIS_URL_ENV, raising=False)
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    monkeypatch.setenv("SDL_VIDEODRIVER", "dummy")
    source = tmp_path / "video_smoke"
    video = load_video_config(
        REPO / "configs" / "video" / "smoke.yaml", {"run.run_dir": str(source), "run.seeds": 1}
    )
    run_video_pipeline(video, "smoke.yaml")
    out = tmp_path / "experiment"
    cfg = load_sweep_config(
        REPO / "configs" / "experiments" / "smoke_video_action_reward.yaml",
        {"source.run_dir": str(source), "run.run_dir": str(out)},
    )
    summary = run_sweep(cfg, "smoke_video_action_reward.yaml")

    arms = summary["arms"]
    assert list(arms) == ["pixel", "state", "idm"]
    # one control, run with the first arm only, for GRPO's samples
    assert (out / "pixel" / "seed0" / "model" / "mle_continued").is_dir()
    assert not (out / "state" / "seed0" / "model" / "mle_continued").exists()
    head = summary["headline"]
    assert head["control_budget"] == "samples" and head["seeds"] == [0, 1]
    for name, arm in arms.items():
        arm_head = arm["headline"]
        assert arm_head["control"] == pytest.approx(head["control"])  # the same control
        low, high = arm_head["ci95"]
        assert low <= arm_head["rlvr"] - arm_head["control"] <= high
        reading = arm_head["action_reading"]
        for model in ("start", "control", "rlvr"):
            entry = reading["models"][model]
            for key in ("reward_shuffle_gap", "agent_error_px", "idm_acc"):
                lo, hi = entry[key]["ci95"]
                assert lo <= entry[key]["mean"] <= hi, (name, model, key)
        gist = head["arms"][name]
        assert {"reward_shuffle_gap", "agent_error_px", "ci95", "vs_control"} <= set(gist)
        assert "copy_last_frame" in arm_head
    # the action terms were weighted after measuring them on MLE samples; the pixel arm not
    for name in ("state", "idm"):
        arm_summary = json.loads((out / name / "summary.json").read_text())
        balance = arm_summary["balance"]
        assert balance["mode"] == "action_terms" and name in balance["spread"]
        assert balance["weights"]["l1"] == 1.0 and balance["weights"]["stlpips"] == 1.0
        assert arm_summary["rl"]["by_seed"]["0"]["weights"][name] == balance["weights"][name]
        assert arm_summary["idm"]["path"] == str(source / "idm")  # the source's IDM
    pixel = json.loads((out / "pixel" / "summary.json").read_text())
    assert "balance" not in pixel and pixel["rl"]["by_seed"]["0"]["weights"] == {
        "l1": 1.0,
        "stlpips": 1.0,
    }
    report = (out / "report.md").read_text()
    assert "## Each arm against one continued-MLE control" in report
    assert "| state |" in report and "| control (continued MLE) |" in report
