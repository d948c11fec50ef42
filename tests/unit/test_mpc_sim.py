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
