"""The PushT state check (rlvr_world.rewards.pusht_state): the T's centre by hand and against
shapely, the colour segmentation on drawn frames, the reward's formula, every bad input, and the
check on gym-pusht's own renders at 64x64 (true frames near 0, a copied frame worse)."""

from __future__ import annotations

import math
import re
import subprocess
import sys

import numpy as np
import pytest

from rlvr_world.rewards.pusht_state import (
    ARENA,
    ARENA_DIAGONAL,
    T_CENTROID,
    StateCheckConfig,
    block_centre,
    score_state,
    segment,
    state_errors,
)
from rlvr_world.rewards.types import InvalidInput, Status

#: Colours of gym-pusht's renderer: background, agent (RoyalBlue), block (LightSlateGray).
WHITE = (255, 255, 255)
ROYAL_BLUE = (65, 105, 225)
SLATE_GRAY = (119, 136, 153)
#: One pixel of a 64x64 frame in arena pixels.
PX = ARENA / 64
CFG = StateCheckConfig()


def drawn_frame(
    agent: tuple[int, int] | None, block: tuple[int, int] | None, side: int = 64
) -> np.ndarray:
    """A white frame with a 3x3 agent square centred on pixel ``agent`` (col, row) and a 5x5
    block square centred on pixel ``block``: their colour centres are those pixels' centres."""
    frame = np.full((side, side, 3), WHITE, dtype=np.uint8)
    if block is not None:
        c, r = block
        frame[r - 2 : r + 3, c - 2 : c + 3] = SLATE_GRAY
    if agent is not None:
        c, r = agent
        frame[r - 1 : r + 2, c - 1 : c + 2] = ROYAL_BLUE
    return frame


def arena(pixel: tuple[int, int]) -> np.ndarray:
    """The arena position of a 64x64 pixel's centre."""
    return (np.asarray(pixel, dtype=np.float64) + 0.5) * PX


def test_the_t_centroid_by_hand() -> None:
    # bar 120 x 30 (area 3600, centre y 15), stem 30 x 90 (area 2700, centre y 75)
    np.testing.assert_allclose(T_CENTROID, (0.0, (3600 * 15 + 2700 * 75) / 6300))
    np.testing.assert_allclose(block_centre(np.array([100.0, 200.0, 0.0])), [100.0, 240.7142857])
    # a quarter turn maps the block's +y axis onto the arena's -x axis
    np.testing.assert_allclose(
        block_centre(np.array([100.0, 200.0, math.pi / 2])), [100.0 - 40.7142857, 200.0]
    )


def test_block_centre_is_shapelys_area_centroid_and_vectorises() -> None:
    pytest.importorskip("shapely", reason="shapely is in the video extra")
    from rlvr_world.mpc.sim import block_polygon

    rng = np.random.default_rng(0)
    poses = np.column_stack([rng.uniform(50, 460, (8, 2)), rng.uniform(-7, 7, 8)])
    centres = block_centre(poses)
    assert centres.shape == (8, 2)
    for pose, centre in zip(poses, centres, strict=True):
        point = block_polygon(pose).centroid
        np.testing.assert_allclose(centre, [point.x, point.y], atol=1e-9)
        np.testing.assert_allclose(block_centre(pose), centre)
    with pytest.raises(ValueError, match=r"shape \(3,\) or \(N, 3\)"):
        block_centre(np.zeros(2))
    with pytest.raises(ValueError, match="finite"):
        block_centre(np.array([1.0, np.nan, 0.0]))


def test_the_arena_is_the_recorders() -> None:
    from rlvr_world.video.pusht import ARENA as RECORDER_ARENA

    assert ARENA == RECORDER_ARENA


def test_the_core_module_imports_no_torch_and_no_gym() -> None:
    code = (
        "import sys, rlvr_world.rewards.pusht_state; "
        "print(sorted(m for m in ('torch', 'gym_pusht', 'pygame', 'shapely', 'PIL') "
        "if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_segment_finds_drawn_parts_at_their_centres() -> None:
    found = segment(drawn_frame((10, 50), (40, 20)))
    assert found.agent is not None and found.block is not None
    np.testing.assert_allclose(found.agent, arena((10, 50)))
    np.testing.assert_allclose(found.block, arena((40, 20)))
    as_float = segment(drawn_frame((10, 50), (40, 20)).astype(np.float32) / 255.0)
    assert as_float.agent is not None
    np.testing.assert_allclose(as_float.agent, found.agent)
    nothing = segment(drawn_frame(None, None))
    assert nothing.agent is None and nothing.block is None


def test_score_state_by_hand() -> None:
    frames = np.stack([drawn_frame((10, 50), (40, 20)), drawn_frame((12, 50), None)])
    # truth: frame 0 exact but the agent 3-4-5 px off; frame 1 agent 8 px off, block missing
    offsets = np.array([[3.0, 4.0], [0.0, 8.0]])
    agents = np.stack([arena((10, 50)), arena((12, 50))]) + offsets
    block_truth = arena((40, 20)) - np.array(T_CENTROID)  # angle 0: centre = pose + centroid
    poses = np.array([[*block_truth, 0.0], [*block_truth, 0.0]])
    cap = 100.0
    result = score_state(frames, agents, poses, StateCheckConfig(max_error_px=cap))
    assert result.status is Status.OK
    e0 = (0.5 * 5.0 + 0.5 * 0.0) / cap
    e1 = (0.5 * 8.0 + 0.5 * cap) / cap
    assert result.reward == pytest.approx(-(e0 + e1) / 2)
    assert result.metrics["agent_error_px"] == pytest.approx(6.5)
    assert result.metrics["block_error_px"] == pytest.approx(cap / 2)
    assert result.metrics["state_missing"] == pytest.approx(0.25)
    assert result.metrics["state_error"] == pytest.approx(-result.reward)
    assert result.metrics["n_frames"] == 2.0
    # the agent alone, and errors beyond the cap clipped to it
    agent_only = StateCheckConfig(max_error_px=4.0, agent_weight=1.0)
    err = state_errors(frames, agents, poses, agent_only)
    np.testing.assert_allclose(err.agent_px, [4.0, 4.0])
    np.testing.assert_allclose(err.normalised, [1.0, 1.0])
    assert err.block_missing.tolist() == [False, True]


def test_one_frame_and_the_default_cap() -> None:
    frame = drawn_frame(None, (40, 20))
    result = score_state(frame, arena((5, 5)), np.array([*arena((40, 20)), 0.0]))
    assert result.ok and result.metrics["n_frames"] == 1.0
    assert result.metrics["agent_error_px"] == pytest.approx(ARENA_DIAGONAL)
    assert result.metrics["state_missing"] == 0.5


BAD_INPUTS = [
    ([[0]], "expected a numpy array"),
    (np.zeros((64, 64), np.uint8), r"expected RGB frames"),
    (np.zeros((1, 64, 64, 1), np.uint8), r"expected RGB frames"),
    (np.zeros((1, 64, 64, 3), np.int32), "unsupported dtype int32"),
    (np.full((1, 64, 64, 3), np.nan, np.float32), "NaN"),
]


@pytest.mark.parametrize(("pred", "message"), BAD_INPUTS)
def test_bad_predictions_are_invalid_input(pred: object, message: str) -> None:
    result = score_state(pred, np.zeros((1, 2)), np.zeros((1, 3)))
    assert result.status is Status.INVALID_INPUT
    assert result.reward == 0.0
    assert result.message.startswith("prediction:")
    assert re.search(message, result.message)


BAD_STATES = [
    (np.zeros((2, 2)), np.zeros((1, 3)), r"agent_pos: expected shape \(1, 2\) for 1 predicted"),
    (np.zeros((1, 3)), np.zeros((1, 3)), r"agent_pos: expected shape \(1, 2\)"),
    (np.zeros((1, 2)), np.zeros((1, 2)), r"block_pose: expected shape \(1, 3\)"),
    (np.full((1, 2), np.inf), np.zeros((1, 3)), "agent_pos: contains NaN or infinite"),
    (np.zeros((1, 2)), [["a", "b", "c"]], "block_pose: expected numbers"),
]


@pytest.mark.parametrize(("agent", "pose", "message"), BAD_STATES)
def test_bad_states_are_invalid_input(agent: object, pose: object, message: str) -> None:
    result = score_state(np.zeros((1, 64, 64, 3), np.uint8), agent, pose)
    assert result.status is Status.INVALID_INPUT
    assert re.search(message, result.message), result.message


def test_bad_configs_raise() -> None:
    with pytest.raises(InvalidInput, match="max_error_px"):
        StateCheckConfig(max_error_px=0.0)
    with pytest.raises(InvalidInput, match="max_error_px"):
        StateCheckConfig(max_error_px=math.inf)
    with pytest.raises(InvalidInput, match="agent_weight"):
        StateCheckConfig(agent_weight=1.5)


def test_true_renders_score_near_zero_and_a_copied_frame_worse() -> None:
    pytest.importorskip("gym_pusht", reason="gym-pusht is in the video extra")
    from rlvr_world.video.data import resize_frames
    from rlvr_world.video.pusht import generate_pusht

    skip = 4  # configs/video/pusht_skip.yaml's model step
    moved = 0
    for rec in generate_pusht(3, 40, seed=11):
        frames = resize_frames(rec.frames, 64)
        truth = score_state(frames, rec.agent_pos, rec.block_pose)
        assert truth.ok
        assert truth.metrics["state_missing"] == 0.0
        assert truth.metrics["agent_error_px"] < 3.0  # measured 1.5 on average
        assert truth.metrics["block_error_px"] < 6.0  # measured 2.4
        assert truth.reward > -0.01
        nxt = np.arange(skip, len(frames), skip)
        agent_moves = np.linalg.norm(rec.agent_pos[nxt] - rec.agent_pos[nxt - skip], axis=1)
        big = nxt[agent_moves > 24.0]
        moved += len(big)
        true_err = state_errors(frames[big], rec.agent_pos[big], rec.block_pose[big], CFG)
        copy_err = state_errors(frames[big - skip], rec.agent_pos[big], rec.block_pose[big], CFG)
        assert (copy_err.agent_px > true_err.agent_px).all()
        assert copy_err.normalised.mean() > true_err.normalised.mean()
    assert moved >= 10  # the check saw enough moves to mean something
