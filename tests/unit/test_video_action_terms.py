"""The action-following terms of the video reward (``idm`` and ``state`` in ``score_video``):
which frames the IDM reads, the losses by hand and mixed with L1, weight 0 (measured, not
rewarded), aggregation, patch rewards, every bad input, the real torch IDM as an
``ActionReader`` (same reward as ``score_with_idm``), and no torch in the core modules."""

from __future__ import annotations

import math
import re
import subprocess
import sys

import numpy as np
import pytest

from rlvr_world.rewards.action import ActionRewardConfig
from rlvr_world.rewards.pusht_state import ARENA, ARENA_DIAGONAL, T_CENTROID
from rlvr_world.rewards.types import InvalidInput, Status
from rlvr_world.rewards.video import VideoRewardConfig, metric_losses, score_video
from rlvr_world.rewards.video_action import ACTION_TERMS, STATE_SIZE

SIDE = 16
RANGES = ((-128.0, 128.0), (-128.0, 128.0))
WHITE, ROYAL_BLUE, SLATE_GRAY = (255, 255, 255), (65, 105, 225), (119, 136, 153)
PX = ARENA / 64


class ReaderConfig:
    """What the recording reader reads: 16x16 frames, 2 axes of +-128."""

    image_size = (SIDE, SIDE)
    action_dims = 2

    def reward_config(self) -> ActionRewardConfig:
        return ActionRewardConfig(ranges=RANGES)


class RecordingReader:
    """An ``ActionReader`` that returns given actions and records the frame pairs it read: the
    unit under test is which pairs ``score_video`` hands over and what it does with the
    answers (the real IDM is tested below and in tests/integration)."""

    config = ReaderConfig()

    def __init__(self, answers: np.ndarray) -> None:
        self.answers = answers
        self.calls: list[tuple[np.ndarray, np.ndarray]] = []

    def predict(self, prev: np.ndarray, nxt: np.ndarray) -> np.ndarray:
        self.calls.append((prev.copy(), nxt.copy()))
        return self.answers


def clip(t: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Predicted frames, target frames and a previous frame (uint8, 16x16)."""
    rng = np.random.default_rng(seed)
    pred = rng.integers(0, 256, (t, SIDE, SIDE, 3), dtype=np.uint8)
    target = rng.integers(0, 256, (t, SIDE, SIDE, 3), dtype=np.uint8)
    return pred, target, rng.integers(0, 256, (SIDE, SIDE, 3), dtype=np.uint8)


TRUE = np.array([[10.0, -20.0], [0.0, 50.0], [-100.0, 100.0]])
#: Read = true + these: per step e = mean |d| / 256 and within 16 px on both axes.
OFFSETS = np.array([[0.0, 0.0], [16.0, 0.0], [64.0, -64.0]])
E = np.array([0.0, 16.0 / 256 / 2, 128.0 / 256 / 2])


def test_the_idm_reads_each_step_from_the_frame_before() -> None:
    pred, target, prev = clip(3)
    reader = RecordingReader(TRUE + OFFSETS)
    config = VideoRewardConfig(weights={"idm": 1.0})
    result = score_video(pred, target, config, previous_frame=prev, actions=TRUE, idm=reader)
    assert result.status is Status.OK, result.message
    [(before, after)] = reader.calls  # one call for the whole clip
    np.testing.assert_allclose(before[0], prev / 255.0)
    np.testing.assert_allclose(before[1:], pred[:-1] / 255.0)
    np.testing.assert_allclose(after, pred / 255.0)
    assert result.reward == pytest.approx(-E.mean())
    assert result.metrics["idm_error"] == pytest.approx(E.mean())
    assert result.metrics["idm_acc"] == pytest.approx(2 / 3)  # 16 px is within 1/16 of 256
    assert result.metrics["idm_mae"] == pytest.approx(np.abs(OFFSETS).mean())
    last = VideoRewardConfig(weights={"idm": 1.0}, aggregation="last")
    result = score_video(pred, target, last, previous_frame=prev, actions=TRUE, idm=reader)
    assert result.reward == pytest.approx(-E[-1])


def test_the_idm_term_mixes_with_l1_by_its_weight() -> None:
    pred, target, prev = clip(3, seed=1)
    l1 = np.abs(pred / 255.0 - target / 255.0).mean(axis=(1, 2, 3))
    reader = RecordingReader(TRUE + OFFSETS)
    config = VideoRewardConfig(weights={"l1": 2.0, "idm": 0.5}, aggregation="discount", gamma=0.5)
    result = score_video(pred, target, config, previous_frame=prev, actions=TRUE, idm=reader)
    w = 0.5 ** np.arange(3)
    assert result.reward == pytest.approx(-(w * (2.0 * l1 + 0.5 * E)).sum() / w.sum())
    assert result.metrics["l1"] == pytest.approx(l1.mean())


def drawn_frame(agent: tuple[int, int], block: tuple[int, int] | None) -> np.ndarray:
    """A 64x64 white frame with a 3x3 agent square and a 5x5 block square centred on the given
    pixels (col, row): their colour centres are those pixels' centres."""
    frame = np.full((64, 64, 3), WHITE, dtype=np.uint8)
    if block is not None:
        c, r = block
        frame[r - 2 : r + 3, c - 2 : c + 3] = SLATE_GRAY
    c, r = agent
    frame[r - 1 : r + 2, c - 1 : c + 2] = ROYAL_BLUE
    return frame


def arena(pixel: tuple[int, int]) -> np.ndarray:
    return (np.asarray(pixel, dtype=np.float64) + 0.5) * PX


def state_of(agent: np.ndarray, block_centre: np.ndarray) -> np.ndarray:
    """A true state row whose block (angle 0) has its T's area centroid at ``block_centre``."""
    return np.array([*agent, *(block_centre - np.array(T_CENTROID)), 0.0])


def test_the_state_term_by_hand() -> None:
    pred = np.stack([drawn_frame((10, 50), (40, 20)), drawn_frame((12, 50), None)])
    states = np.stack(
        [
            state_of(arena((10, 50)) + np.array([3.0, 4.0]), arena((40, 20))),  # agent 5 px off
            state_of(arena((12, 50)), arena((40, 20))),  # exact agent, block missing
        ]
    )
    config = VideoRewardConfig(weights={"l1": 1.0, "state": 2.0})
    result = score_video(pred, pred, config, states=states)
    assert result.status is Status.OK, result.message
    e = np.array([0.5 * 5.0 / ARENA_DIAGONAL, 0.5])  # the missing block costs the whole cap
    assert result.reward == pytest.approx(-(2.0 * e).mean())  # l1 is 0: target = prediction
    assert result.metrics["agent_error_px"] == pytest.approx(2.5)
    assert result.metrics["block_error_px"] == pytest.approx(ARENA_DIAGONAL / 2)
    assert result.metrics["state_missing"] == pytest.approx(0.25)
    assert result.metrics["state_error"] == pytest.approx(e.mean())


def test_weight_zero_measures_a_term_without_rewarding_it() -> None:
    pred, target, prev = clip(3, seed=2)
    reader = RecordingReader(TRUE + OFFSETS)
    plain = score_video(pred, target, VideoRewardConfig(weights={"l1": 1.0}))
    measured = score_video(
        pred,
        target,
        VideoRewardConfig(weights={"l1": 1.0, "idm": 0.0}),
        previous_frame=prev,
        actions=TRUE,
        idm=reader,
    )
    assert measured.reward == plain.reward
    assert measured.metrics["idm_error"] == pytest.approx(E.mean())
    # an unnamed term does not run, even when its inputs are given
    unnamed = score_video(
        pred, target, VideoRewardConfig(weights={"l1": 1.0}), actions=TRUE, idm=reader
    )
    assert "idm_error" not in unnamed.metrics and len(reader.calls) == 1


def test_patches_share_the_frame_level_terms() -> None:
    pred, target, prev = clip(3, seed=3)
    reader = RecordingReader(TRUE + OFFSETS)
    grid = (2, 2)
    l1_only = score_video(pred, target, VideoRewardConfig(weights={"l1": 1.0}, patch_grid=grid))
    both = score_video(
        pred,
        target,
        VideoRewardConfig(weights={"l1": 1.0, "idm": 3.0}, patch_grid=grid),
        previous_frame=prev,
        actions=TRUE,
        idm=reader,
    )
    cells = np.asarray(both.patch_rewards).reshape(3, 4)
    expected = np.asarray(l1_only.patch_rewards).reshape(3, 4) - 3.0 * E[:, None]
    np.testing.assert_allclose(cells, expected)
    assert cells.mean() == pytest.approx(both.reward)


def good_inputs() -> dict[str, object]:
    pred, target, prev = clip(3, seed=4)
    states = np.tile(state_of(arena((10, 10)), arena((40, 40))), (3, 1))
    return {
        "pred": pred,
        "target": target,
        "previous_frame": prev,
        "actions": TRUE,
        "states": states,
    }


BAD = [
    ({"actions": None}, r"^actions: required by the idm term"),
    ({"actions": np.zeros((3, 3))}, r"^actions: expected actions of dimension 2"),
    ({"actions": np.zeros((2, 2))}, r"^actions: 2 actions for 3 predicted frames"),
    ({"actions": np.array([[np.nan, 0.0]] * 3)}, r"^actions: contains NaN"),
    ({"previous_frame": None}, r"^previous_frame: required by the idm term"),
    ({"states": None}, r"^states: required by the state term"),
    ({"states": np.zeros((3, 4))}, r"^states: expected shape \(T, 5\)"),
    ({"states": np.zeros(5)}, r"^states: expected shape \(T, 5\)"),
    ({"states": np.zeros((2, 5))}, r"^states: 2 rows for 3 predicted frames"),
    ({"states": np.full((3, 5), np.inf)}, r"^states: contains NaN or infinite"),
    ({"states": [["a"] * 5] * 3}, r"^states: expected numbers"),
]


@pytest.mark.parametrize(("change", "message"), BAD)
def test_bad_actions_and_states_are_invalid_input(change: dict, message: str) -> None:
    given = {**good_inputs(), **change}
    reader = RecordingReader(TRUE)
    result = score_video(
        given["pred"],
        given["target"],
        VideoRewardConfig(weights={"l1": 1.0, "idm": 1.0, "state": 1.0}),
        previous_frame=given["previous_frame"],
        actions=given["actions"],
        states=given["states"],
        idm=reader,
    )
    assert result.status is Status.INVALID_INPUT
    assert re.search(message, result.message), result.message
    assert result.reward == 0.0 and not result.metrics


def test_grey_frames_cannot_be_segmented() -> None:
    given = good_inputs()
    grey = np.asarray(given["pred"])[..., :1]
    result = score_video(
        grey, grey, VideoRewardConfig(weights={"state": 1.0}), states=given["states"]
    )
    assert result.status is Status.INVALID_INPUT
    assert "expected RGB frames" in result.message


def test_a_reader_that_answers_nonsense_is_an_error() -> None:
    given = good_inputs()
    for answers in (np.full((3, 2), np.nan), np.zeros((2, 2))):
        result = score_video(
            given["pred"],
            given["target"],
            VideoRewardConfig(weights={"idm": 1.0}),
            previous_frame=given["previous_frame"],
            actions=TRUE,
            idm=RecordingReader(answers),
        )
        assert result.status is Status.ERROR
        assert "the IDM returned actions of shape" in result.message


def test_an_idm_weight_without_a_reader_is_a_wiring_error() -> None:
    given = good_inputs()
    with pytest.raises(InvalidInput, match=r"weights\['idm'\] needs an ActionReader"):
        score_video(
            given["pred"],
            given["target"],
            VideoRewardConfig(weights={"idm": 0.0, "l1": 1.0}),
            previous_frame=given["previous_frame"],
            actions=TRUE,
        )


def test_the_terms_are_known_weights_but_not_frame_metrics() -> None:
    assert ACTION_TERMS == ("idm", "state") and STATE_SIZE == 5
    assert VideoRewardConfig(weights={"state": 1.0}).active() == ("state",)
    with pytest.raises(InvalidInput, match="unknown metric 'idms'"):
        VideoRewardConfig(weights={"idms": 1.0})
    with pytest.raises(InvalidInput, match=r"weights\['idm'\]: the idm term needs true actions"):
        metric_losses({"l1": np.zeros(2)}, ("l1", "idm"))


def test_the_torch_idm_is_an_action_reader_and_agrees_with_score_with_idm() -> None:
    torch = pytest.importorskip("torch", reason="the IDM is torch (the video extra)")
    from rlvr_world.video.idm import IdmConfig, InverseDynamicsModel, score_with_idm

    torch.manual_seed(0)
    config = IdmConfig(
        image_size=(SIDE, SIDE),
        action_dims=2,
        action_ranges=RANGES,
        action_form="agent_relative",
        frame_skip=4,
        channels=(8, 16),
        hidden=16,
    )
    idm = InverseDynamicsModel(config).eval()
    pred, target, prev = clip(3, seed=5)
    result = score_video(
        pred,
        target,
        VideoRewardConfig(weights={"idm": 1.0}),
        previous_frame=prev,
        actions=TRUE,
        idm=idm,
    )
    theirs = score_with_idm(idm, prev, pred, TRUE)
    assert result.status is Status.OK and theirs.ok
    assert result.reward == pytest.approx(theirs.reward, abs=1e-6)
    assert result.metrics["idm_acc"] == theirs.metrics["idm_acc"]
    assert math.isfinite(result.metrics["idm_mae"])


def test_the_core_modules_import_no_torch() -> None:
    code = (
        "import sys, rlvr_world.rewards.video, rlvr_world.rewards.video_action; "
        "print('torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
