"""The block rules and the colour segmentation against gym-pusht's own renders and coverage."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

pytest.importorskip("gym_pusht", reason="gym-pusht is in the video extra")

from rlvr_world.mpc.sim import (
    PushTSim,
    SimulatorError,
    block_centroid,
    coverage,
    pose_error,
    segment,
)

STATES = [
    ((100.0, 100.0), (300.0, 350.0, 0.3)),
    ((400.0, 120.0), (200.0, 260.0, -2.0)),
    ((256.0, 450.0), (256.0, 256.0, np.pi / 4)),
    ((450.0, 450.0), (150.0, 150.0, 2.5)),
]


@pytest.fixture(scope="module")
def sim() -> Iterator[PushTSim]:
    with PushTSim() as s:
        yield s


@pytest.mark.parametrize(("agent", "block"), STATES)
def test_set_pose_puts_the_scene_where_asked(sim: PushTSim, agent: tuple, block: tuple) -> None:
    sim.set_pose(np.array(agent), np.array(block))
    np.testing.assert_allclose(sim.block_pose(), block, atol=1e-9)
    np.testing.assert_allclose(sim.agent_pos(), agent, atol=1e-9)


@pytest.mark.parametrize(("agent", "block"), STATES)
def test_coverage_matches_the_environments_own(sim: PushTSim, agent: tuple, block: tuple) -> None:
    sim.set_pose(np.array(agent), np.array(block))
    expected = sim.env._get_coverage()  # coverage of the block over the env's goal pose
    assert coverage(sim.block_pose(), sim.env.goal_pose) == pytest.approx(expected, abs=1e-9)


def test_coverage_and_pose_error_of_known_poses() -> None:
    goal = np.array([256.0, 256.0, 0.0])
    assert coverage(goal, goal) == pytest.approx(1.0)
    assert coverage(np.array([456.0, 256.0, 0.0]), goal) == 0.0  # 200 px away: no overlap
    # shifted 15 px along the stem: the bar keeps half its rows, its other half lies on the
    # goal's stem (30 px wide), the stem keeps 75 of its 90 px
    shifted = coverage(np.array([256.0, 271.0, 0.0]), goal)
    assert shifted == pytest.approx((120 * 15 + 30 * 15 + 30 * 75) / (120 * 30 + 30 * 90))
    dist, turn = pose_error(np.array([3.0, 4.0, np.pi - 0.1]), np.array([0.0, 0.0, -np.pi + 0.1]))
    assert dist == pytest.approx(5.0)
    assert turn == pytest.approx(0.2)  # wrapped across +-pi


@pytest.mark.parametrize(("agent", "block"), STATES)
def test_segmentation_finds_agent_and_block_in_a_render(
    sim: PushTSim, agent: tuple, block: tuple
) -> None:
    sim.set_pose(np.array(agent), np.array(block))
    found = segment(sim.frame())
    assert found.agent is not None and found.block is not None
    # one pixel of the 64x64 frame is 8 arena pixels; the T's blended edges bias its centre
    # by up to about 2.5 pixels
    assert np.linalg.norm(found.agent - np.array(agent)) < 12.0
    assert np.linalg.norm(found.block - block_centroid(np.array(block))) < 20.0


def test_segmentation_of_an_empty_frame_finds_nothing() -> None:
    found = segment(np.full((64, 64, 3), 255, dtype=np.uint8))
    assert found.agent is None and found.block is None
    float_frame = segment(np.ones((64, 64, 3), dtype=np.float32))
    assert float_frame.agent is None and float_frame.block is None
    with pytest.raises(ValueError, match=r"expected \(H, W, 3\)"):
        segment(np.zeros((64, 64), dtype=np.uint8))


def test_restore_replays_a_step(sim: PushTSim) -> None:
    sim.set_pose(np.array([200.0, 300.0]), np.array([260.0, 260.0, 0.5]))
    for _ in range(3):  # build up velocities
        sim.step(np.array([260.0, 200.0]))
    snap = sim.snapshot()
    sim.step(np.array([300.0, 250.0]))
    first, pose = sim.frame(), sim.block_pose()
    sim.restore(snap)
    sim.step(np.array([300.0, 250.0]))
    np.testing.assert_array_equal(sim.frame(), first)
    # pymunk keeps cached contact impulses that a snapshot does not hold: 1e-2 px, not exact
    np.testing.assert_allclose(sim.block_pose(), pose, atol=0.02)


def test_bad_actions_and_poses_are_simulator_errors(sim: PushTSim) -> None:
    with pytest.raises(SimulatorError, match="action must be 2 finite numbers"):
        sim.step(np.array([np.nan, 3.0]))
    with pytest.raises(ValueError, match="block_pose: expected 3 finite numbers"):
        sim.set_pose(np.zeros(2), np.array([1.0, 2.0]))


def test_an_exception_inside_the_environment_becomes_a_simulator_error(
    sim: PushTSim, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(action: np.ndarray) -> None:
        raise ZeroDivisionError("physics blew up")

    monkeypatch.setattr(sim.env, "step", broken)
    with pytest.raises(SimulatorError, match="step: ZeroDivisionError: physics blew up"):
        sim.step(np.array([10.0, 10.0]))


# --------------------------------------------------------------------------- frame-skip models


def test_one_action_of_a_frame_skip_space_is_k_simulator_steps(sim: PushTSim) -> None:
    from rlvr_world.mpc.dynamics import Context, OracleDynamics
    from rlvr_world.mpc.space import ActionSpace

    space = ActionSpace(frame_skip=4, relative=True, bound=128.0)
    start = (np.array([200.0, 200.0]), np.array([300.0, 300.0, 0.5]))
    sim.set_pose(*start)
    moves = np.array([[40.0, -20.0], [0.0, 30.0]])
    by_hand = []
    for move in moves:  # the target is fixed at the step's start, then held 4 steps
        target = sim.agent_pos() + move
        for _ in range(4):
            sim.step(target)
        by_hand.append(sim.frame())
    with PushTSim() as planning:
        oracle = OracleDynamics(planning, space=space)
        sim.set_pose(*start)
        frames = oracle.rollout(Context(sim.frame(), sim.snapshot()), moves[None])
    for got, want in zip(frames[0], by_hand, strict=True):
        assert np.abs(got - want.astype(np.float32) / 255.0).mean() < 1e-3
    sim.set_pose(*start)
    for move in moves:
        space.execute(sim, move)
    assert np.abs(sim.frame().astype(int) - by_hand[-1].astype(int)).mean() < 0.5


def test_an_action_space_says_what_a_step_is() -> None:
    from rlvr_world.mpc.space import ActionSpace

    agent = np.array([100.0, 400.0])
    rel = ActionSpace(frame_skip=4, relative=True, bound=128.0)
    assert (rel.low, rel.high) == (-128.0, 128.0)
    np.testing.assert_array_equal(rel.target(np.array([10.0, -5.0]), agent), [110.0, 395.0])
    np.testing.assert_array_equal(rel.model_action(np.array([300.0, 395.0]), agent), [128.0, -5.0])
    np.testing.assert_array_equal(rel.start_mean(agent, 3), np.zeros((3, 2)))
    absolute = ActionSpace()
    assert (absolute.low, absolute.high, absolute.frame_skip) == (0.0, 512.0, 1)
    np.testing.assert_array_equal(absolute.start_mean(agent, 2), [agent, agent])
    np.testing.assert_array_equal(absolute.model_action(np.array([600.0, 5.0]), agent), [512, 5])
    assert rel.to_dict() == {"frame_skip": 4, "actions": "agent_relative", "low": -128.0,
                             "high": 128.0}  # fmt: skip
    with pytest.raises(ValueError, match="frame_skip: must be >= 1"):
        ActionSpace(frame_skip=0)


def test_the_space_of_a_model_comes_from_its_video_json() -> None:
    from rlvr_world.mpc.space import ActionSpace, space_of
    from rlvr_world.video.layout import SingleStepVocab
    from rlvr_world.video.world_model import WorldModelSpec

    def spec(**extra: object) -> WorldModelSpec:
        quantizer = {"ranges": [[-96.0, 96.0], [-96.0, 96.0]], "bins": 64}
        return WorldModelSpec(SingleStepVocab(visual_codes=8, action_bins=64), 4, 1, quantizer,
                              dict(extra))  # fmt: skip

    assert space_of(spec()) == ActionSpace()  # an older model: absolute, one step
    assert space_of(spec(), frame_skip=4) == ActionSpace(frame_skip=4)  # the config says 4
    skip = spec(actions="agent_relative", frame_skip=4)
    assert space_of(skip) == ActionSpace(frame_skip=4, relative=True, bound=96.0)
    with pytest.raises(ValueError, match="trained at frame_skip 4"):
        space_of(skip, frame_skip=2)
    with pytest.raises(ValueError, match="actions 'polar'"):
        space_of(spec(actions="polar"))


def test_goals_lie_goal_steps_model_steps_away(sim: PushTSim) -> None:
    from rlvr_world.mpc.episode import make_tasks
    from rlvr_world.video.pusht import generate_pusht

    tasks = make_tasks(sim, 2, goal_steps=2, min_move=10.0, record_steps=20, seed=7, frame_skip=4)
    recs = generate_pusht(6, 20, 7)
    for task in tasks:  # the goal is the recorded pose 2 x 4 simulator steps after the start
        found = [
            (rec, int(t))
            for rec in recs
            for t in np.flatnonzero(
                (rec.block_pose == task.start_block).all(axis=1)
                & (rec.agent_pos == task.start_agent).all(axis=1)
            )
        ]
        assert len(found) == 1
        rec, t0 = found[0]
        np.testing.assert_array_equal(task.goal_block, rec.block_pose[t0 + 8])
    with pytest.raises(ValueError, match=r"goal_steps x frame_skip \(5 x 4\) < record_steps"):
        make_tasks(sim, 1, goal_steps=5, min_move=10.0, record_steps=20, seed=7, frame_skip=4)


def test_the_shipped_pusht_configs_load() -> None:
    from pathlib import Path

    from rlvr_world.apps.mpc.config import load_mpc_config, load_policy_eval_config

    root = Path(__file__).resolve().parents[2] / "configs" / "mpc"
    for path in sorted(root.glob("*pusht*.yaml")):
        load = load_policy_eval_config if "policy_eval" in path.name else load_mpc_config
        cfg = load(path)
        assert cfg.models.base.name == "mle" or cfg.models.build_tiny, path
    skip = load_mpc_config(root / "pusht_skip.yaml")
    assert skip.tasks.goal_steps == 4 and skip.models.frame_skip is None  # from video.json
