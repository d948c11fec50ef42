"""The control's budget on any hardware (``control.budget``, ``baseline.budget``): ``steps``
(GRPO's optimizer steps), ``samples`` (GRPO's trained sequences) and ``wall_time``, for the text
pipeline's continued SFT and the video run's continued MLE."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from rlvr_world.apps.pipeline.config import load_pipeline_config
from rlvr_world.apps.video.config import load_video_config
from rlvr_world.apps.video.control import control_budget
from rlvr_world.apps.video.report import _control_budget

REPO = Path(__file__).resolve().parents[2]
SMOKE = REPO / "configs" / "pipeline" / "smoke.yaml"
VIDEO = REPO / "configs" / "video" / "smoke.yaml"


def test_text_control_budgets() -> None:
    for kind, expected in (("steps", {"max_steps": 7}), ("samples", {"max_steps": 13})):
        cfg = load_pipeline_config(SMOKE, {"control.budget": kind, "sft.batch_size": 8})
        budget = cfg.control.sft_budget(cfg.sft, grpo_s=99.0, trained=100, steps=7)
        assert {k: budget[k] for k in expected} == expected and "max_seconds" not in budget
        assert budget["schedule"] == "constant" and budget["lr"] == cfg.sft.lr
    timed = load_pipeline_config(SMOKE, {"control.budget": "wall_time"})
    budget = timed.control.sft_budget(timed.sft, grpo_s=99.0, trained=100, steps=7)
    assert budget["max_seconds"] == 99.0 and "max_steps" not in budget
    zero = load_pipeline_config(SMOKE, {"control.budget": "steps"})
    assert zero.control.sft_budget(zero.sft, 1.0, 0, 0)["max_steps"] == 1  # at least one step
    with pytest.raises(ValidationError, match="'samples', 'steps' or 'wall_time'"):
        load_pipeline_config(SMOKE, {"control.budget": "flops"})


def _trainer_log(path: Path, trained: list[int]) -> Path:
    rows = [{"event": "start", "step": 0}]
    rows += [{"event": "step", "step": i + 1, "samples_trained": n} for i, n in enumerate(trained)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_video_control_budgets_read_the_trainer_log(tmp_path: Path) -> None:
    log = _trainer_log(tmp_path / "train_log.jsonl", [16, 16, 15])
    wall = control_budget(load_video_config(VIDEO), log, 21.5)
    assert wall == {
        "kind": "wall_time",
        "budget_s": 21.5,
        "grpo_steps": 3,
        "trained_sequences": 47,
        "max_steps": None,
    }
    steps = control_budget(load_video_config(VIDEO, {"baseline.budget": "steps"}), log, 21.5)
    assert steps["max_steps"] == 3
    cfg = load_video_config(VIDEO, {"baseline.budget": "samples", "mle.batch_size": 8})
    assert control_budget(cfg, log, 21.5)["max_steps"] == 6  # ceil(47 / 8)
    assert _control_budget(wall) == "the same 22 s"
    assert _control_budget(steps) == "3 steps for GRPO's steps (steps)"
    with pytest.raises(ValidationError, match="'wall_time', 'samples' or 'steps'"):
        load_video_config(VIDEO, {"baseline.budget": "flops"})
