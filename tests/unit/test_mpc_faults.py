"""What each bad input to an MPC episode gets: a fault with its reason, and the run goes on.

Real pieces throughout: the gym-pusht simulator, model folders on disk (missing, corrupt, of
the wrong layout), a tiny random world model built and saved by the project's own code.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("gym_pusht", reason="gym-pusht is in the video extra")

from rlvr_world.apps.mpc.config import ModelsSection
from rlvr_world.apps.mpc.tiny import ensure_tiny_models
from rlvr_world.mpc.dynamics import (
    ModelUnavailable,
    OracleDynamics,
    load_world_model_dynamics,
    resolve_checkpoint,
)
from rlvr_world.mpc.episode import EpisodeSettings, Task, make_tasks, run_episode
from rlvr_world.mpc.planner import PlannerConfig
from rlvr_world.mpc.sim import PushTSim

SETTINGS = EpisodeSettings(
    PlannerConfig(candidates=4, horizon=2, iterations=1, elites=2), execute=2, replans=1
)


@pytest.fixture(scope="module")
def sim() -> Iterator[PushTSim]:
    with PushTSim() as s:
        yield s


@pytest.fixture(scope="module")
def task(sim: PushTSim) -> Task:
    return make_tasks(sim, 1, goal_steps=3, min_move=10.0, record_steps=15, seed=1000)[0]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> ModelsSection:
    root = tmp_path_factory.mktemp("models")
    m = ModelsSection(
        base=root / "base",
        rlvr=root / "rlvr" / "checkpoints" / "latest",
        spec=root / "base",
        tokenizer=root / "tokenizer",
        build_tiny=True,
    )
    ensure_tiny_models(m)
    return m


def test_a_good_episode_is_ok(sim: PushTSim, task: Task) -> None:
    with PushTSim() as planning:
        result = run_episode(task, "oracle", OracleDynamics(planning), sim, SETTINGS)
    assert result.status == "ok" and result.reason == ""
    assert 0.0 <= result.coverage <= 1.0
    assert len(result.real) == len(result.predicted) == 2


def test_a_missing_model_folder_is_model_unavailable(tmp_path: Path) -> None:
    with pytest.raises(ModelUnavailable, match=r"no world model at .*nowhere"):
        load_world_model_dynamics("base", tmp_path / "nowhere")


def test_a_corrupt_model_folder_is_model_unavailable(tmp_path: Path, tiny: ModelsSection) -> None:
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "config.json").write_text("{not json")
    (bad / "video.json").write_text((tiny.base / "video.json").read_text())
    with pytest.raises(ModelUnavailable, match=r"base: .*bad: "):
        load_world_model_dynamics("base", bad)


def test_a_checkpoint_without_video_json_needs_a_spec(tiny: ModelsSection) -> None:
    with pytest.raises(ModelUnavailable, match="not a world-model directory"):
        load_world_model_dynamics("rlvr", tiny.rlvr)  # trainer layout, no spec given
    loaded = load_world_model_dynamics("rlvr", tiny.rlvr, spec_path=tiny.spec)
    assert loaded.name == "rlvr"
    assert resolve_checkpoint(tiny.rlvr).name == "step_00000001"


def test_a_multi_frame_context_model_is_refused(tmp_path: Path, tiny: ModelsSection) -> None:
    spec = json.loads((tiny.base / "video.json").read_text())
    spec["context_length"] = 2
    (tmp_path / "video.json").write_text(json.dumps(spec))
    with pytest.raises(ModelUnavailable, match="single-step model with context 1"):
        load_world_model_dynamics("base", tiny.base, spec_path=tmp_path)


def test_an_unavailable_model_makes_each_episode_a_fault(sim: PushTSim, task: Task) -> None:
    missing = ModelUnavailable("base: no world model at /nowhere (no config.json)")
    result = run_episode(task, "base", missing, sim, SETTINGS)
    assert result.status == "fault"
    assert result.reason == "model_unavailable: base: no world model at /nowhere (no config.json)"
    assert not result.success and result.plan_seconds == []
    record = result.record()
    assert record["position_error"] is None  # JSON-able, no NaN


def test_a_simulator_error_inside_step_is_a_fault_and_the_next_episode_runs(
    sim: PushTSim, task: Task, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = {"n": 0}
    real_step = sim.env.step

    def flaky(action: np.ndarray) -> object:
        calls["n"] += 1
        if calls["n"] == 2:
            raise RuntimeError("pymunk: space locked")
        return real_step(action)

    monkeypatch.setattr(sim.env, "step", flaky)
    broken = run_episode(task, "random", None, sim, SETTINGS)
    assert broken.status == "fault"
    assert broken.reason == "simulator_error: step: RuntimeError: pymunk: space locked"
    after = run_episode(task, "random", None, sim, SETTINGS)  # the run goes on
    assert after.status == "ok"


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"goal_frame": np.zeros((32, 32, 3), np.uint8)}, "expected uint8 (64, 64, 3)"),
        ({"goal_frame": np.zeros((64, 64, 3), np.float32)}, "got float32"),
        ({"goal_frame": "goal.png"}, "got str"),
        ({"goal_block": np.array([1.0, np.nan, 0.0])}, "goal pose: expected 3 finite"),
        ({"goal_block": np.array([1.0, 2.0])}, "goal pose: expected 3 finite"),
        ({"start_block": np.array([np.inf, 2.0, 0.0])}, "start pose: expected 3 finite"),
    ],
)
def test_a_malformed_goal_is_a_fault(
    sim: PushTSim, task: Task, change: dict[str, object], reason: str
) -> None:
    bad = dataclasses.replace(task, **change)  # type: ignore[arg-type]
    result = run_episode(bad, "random", None, sim, SETTINGS)
    assert result.status == "fault"
    assert result.reason.startswith("malformed_goal: ")
    assert reason in result.reason


def test_world_model_rollout_shapes_and_anchoring(sim: PushTSim, tiny: ModelsSection) -> None:
    from rlvr_world.mpc.dynamics import Context

    model = load_world_model_dynamics("base", tiny.base, anchor_dilate=0)
    sim.set_pose(np.array([100.0, 100.0]), np.array([256.0, 256.0, 0.5]))
    context = Context(sim.frame(), sim.snapshot())
    actions = np.tile(np.array([300.0, 200.0]), (3, 2, 1))
    frames = model.rollout(context, actions)
    assert frames.shape == (3, 2, 64, 64, 3)
    assert frames.min() >= 0.0 and frames.max() <= 1.0
    # greedy decoding: the same actions give the same tokens; the decoded pixels of two rows of
    # one batch may differ in float32 rounding (1e-6 measured in a clean-clone CI run)
    np.testing.assert_allclose(frames[0], frames[1], atol=1e-5)
    assert model.frame_predictions == 6
    with pytest.raises(ValueError, match=r"actions: expected finite \(N, H, 2\)"):
        model.rollout(context, np.zeros((3, 2)))
