"""The MPC headline from episode records: rates, intervals, faults apart, paired RLVR - base."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from rlvr_world.apps.mpc.report import mpc_headline, mpc_report


def record(task: int, planner: str, success: bool, cov: float, fault: str = "") -> dict[str, Any]:
    return {
        "task": task,
        "planner": planner,
        "status": "fault" if fault else "ok",
        "reason": fault,
        "success": success,
        "coverage": cov,
        "plan_seconds": [] if fault else [2.0, 4.0],
    }


def test_headline_counts_faults_apart_and_pairs_the_world_models() -> None:
    rows = [record(t, "base", t % 2 == 0, 0.5) for t in range(6)]
    rows += [record(t, "rlvr", True, 0.75) for t in range(5)]
    rows.append(record(5, "rlvr", False, 0.0, "simulator_error: step: RuntimeError: boom"))
    head = mpc_headline(rows, ["base", "rlvr"], execute=2, resamples=500, seed=0)
    base, rlvr = head["base"], head["rlvr"]
    assert base["success_rate"]["value"] == pytest.approx(0.5) and base["success_rate"]["n"] == 6
    assert rlvr["success_rate"]["n"] == 5 and rlvr["faults"] == 1
    assert rlvr["fault_reasons"] == {"simulator_error": 1}
    assert rlvr["plan_seconds_per_call"] == pytest.approx(3.0)
    assert rlvr["plan_seconds_per_action"] == pytest.approx(1.5)
    diff = head["rlvr_minus_base"]
    assert diff["success_rate"]["n"] == 5  # the faulted task is left out of the pair
    assert diff["success_rate"]["value"] == pytest.approx(np.mean([0, 1, 0, 1, 0]))
    assert diff["final_coverage"]["value"] == pytest.approx(0.25)
    assert diff["final_coverage"]["ci95"] == pytest.approx([0.25, 0.25])
    assert diff["final_coverage"]["ci95_excludes_zero"] is True


def test_a_planner_with_only_faults_has_no_value() -> None:
    rows = [record(t, "base", False, 0.0, "model_unavailable: base: gone") for t in range(3)]
    head = mpc_headline(rows, ["base"], execute=3, resamples=100, seed=0)
    assert head["base"]["success_rate"] == {
        "metric": "success rate",
        "n": 0,
        "value": None,
        "ci95": None,
    }
    assert head["base"]["plan_seconds_per_call"] is None
    assert head["base"]["fault_reasons"] == {"model_unavailable": 3}
    text = mpc_report(
        {
            "headline": head,
            "name": "x",
            "n_tasks": 3,
            "goal_steps": 6,
            "planner": {},
            "frame_side": 64,
            "success": {"position": 15.0, "angle": 0.3},
            "planners": ["base"],
            "wall_s": 1.0,
        }
    )
    assert "| base | n/a | n/a | 0 | 3 {'model_unavailable': 3} | n/a | n/a |" in text
