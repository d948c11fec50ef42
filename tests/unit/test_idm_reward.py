"""The action-following reward (rlvr_world.rewards.action): the formula by hand, clipping to the
action space, the tolerance, R^2, every bad input, and no torch in the core module."""

from __future__ import annotations

import math
import re
import subprocess
import sys

import numpy as np
import pytest

from rlvr_world.rewards.action import (
    ActionRewardConfig,
    action_accuracy,
    action_errors,
    check_actions,
    score_actions,
)
from rlvr_world.rewards.types import InvalidInput, Status

#: configs/video/pusht_skip.yaml's action space: moves of +-128 arena pixels per axis.
PUSHT = ActionRewardConfig(ranges=((-128.0, 128.0), (-128.0, 128.0)))


def test_score_by_hand() -> None:
    true = np.array([[10.0, -20.0], [0.0, 0.0], [100.0, 50.0]])
    read = np.array([[14.0, -20.0], [0.0, 32.0], [100.0, 50.0]])
    result = score_actions(read, true, PUSHT)
    assert result.status is Status.OK
    # per step: mean over axes of |error| / 256
    e = np.array([(4 + 0) / 2 / 256, (0 + 32) / 2 / 256, 0.0])
    assert result.reward == pytest.approx(-e.mean())
    assert result.metrics["idm_error"] == pytest.approx(e.mean())
    # within 16 px on every axis: steps 0 and 2
    assert result.metrics["idm_acc"] == pytest.approx(2 / 3)
    assert result.metrics["idm_mae"] == pytest.approx((4 + 32) / 6)
    assert result.metrics["n_frames"] == 3.0


def test_both_sides_are_clipped_to_the_action_space() -> None:
    # a true move of 300 px is the +128 the world model was given; reading 128 is exact
    result = score_actions(np.array([[128.0, -500.0]]), np.array([[300.0, -128.0]]), PUSHT)
    assert result.reward == 0.0 and result.metrics["idm_acc"] == 1.0
    worst = score_actions(np.array([[-128.0, 128.0]]), np.array([[128.0, -128.0]]), PUSHT)
    assert worst.reward == -1.0


def test_the_tolerance_is_a_share_of_each_axis_range() -> None:
    cfg = ActionRewardConfig(ranges=((0.0, 10.0), (0.0, 1000.0)), tolerance=0.1)
    err = action_errors(np.array([[1.0, 100.0], [1.5, 0.0]]), np.zeros((2, 2)), cfg)
    assert err.within.tolist() == [True, False]  # 1 <= 1 and 100 <= 100; then 1.5 > 1
    np.testing.assert_allclose(err.normalised, [(0.1 + 0.1) / 2, 0.15 / 2])
    np.testing.assert_allclose(err.absolute, [[1.0, 100.0], [1.5, 0.0]])


def test_one_step_may_be_a_flat_vector() -> None:
    result = score_actions(np.array([3.0, 4.0]), [3.0, 4.0], PUSHT)
    assert result.ok and result.reward == 0.0 and result.metrics["n_frames"] == 1.0


def test_action_accuracy_by_hand() -> None:
    true = np.array([[0.0, 5.0], [10.0, 5.0], [20.0, 5.0]])
    read = np.array([[1.0, 5.0], [10.0, 5.0], [17.0, 9.0]])
    acc = action_accuracy(read, true, PUSHT)
    assert acc.mae == pytest.approx((4 / 3, 4 / 3))
    # x: residual 1 + 0 + 9 = 10 over total 100 + 0 + 100; y does not vary: no R^2
    assert acc.r2[0] == pytest.approx(1 - 10 / 200)
    assert acc.r2[1] is None
    assert acc.within == 1.0 and acc.n == 3
    assert acc.to_dict()["r2"] == [pytest.approx(0.95), None]


BAD = [
    (np.zeros((2, 3)), np.zeros((2, 2)), r"predicted actions: expected actions of dimension 2"),
    (np.zeros((2, 2)), np.zeros((2, 3)), r"^actions: expected actions of dimension 2.*\(2, 3\)"),
    (np.zeros((2, 2)), np.zeros(5), r"^actions: expected actions of dimension 2.*\(5,\)"),
    (np.zeros((2, 2)), np.zeros((2, 2, 1)), r"^actions: expected actions of dimension 2"),
    (np.zeros((2, 2)), np.zeros((0, 2)), r"^actions: no actions"),
    (np.zeros((2, 2)), np.zeros((3, 2)), r"2 steps read from the frames but 3 true actions"),
    (np.zeros((1, 2)), np.array([[np.nan, 0.0]]), r"^actions: contains NaN"),
    (np.zeros((1, 2)), [["x", "y"]], r"^actions: expected numbers"),
    (np.zeros((1, 2)), None, r"^actions: expected actions of dimension 2"),
]


@pytest.mark.parametrize(("read", "true", "message"), BAD)
def test_bad_actions_are_invalid_input(read: object, true: object, message: str) -> None:
    result = score_actions(read, true, PUSHT)
    assert result.status is Status.INVALID_INPUT
    assert result.reward == 0.0
    assert re.search(message, result.message), result.message
    with pytest.raises(InvalidInput):
        action_accuracy(read, true, PUSHT)


BAD_CONFIGS = [
    ({"ranges": ()}, "ranges: expected one"),
    ({"ranges": "ab"}, "ranges: expected one"),
    ({"ranges": ((0.0, 1.0, 2.0),)}, r"ranges\[0\]: expected \(low, high\)"),
    ({"ranges": ((1.0, 1.0),)}, r"ranges\[0\]: expected finite low < high"),
    ({"ranges": ((0.0, math.inf),)}, r"ranges\[0\]: expected finite low < high"),
    ({"ranges": ((0.0, True),)}, r"ranges\[0\]: expected two numbers"),
    ({"ranges": ((0.0, 1.0),) * 65}, "at most 64"),
    ({"ranges": ((0.0, 1.0),), "tolerance": 0.0}, "tolerance"),
    ({"ranges": ((0.0, 1.0),), "tolerance": 1.5}, "tolerance"),
]


@pytest.mark.parametrize(("kwargs", "message"), BAD_CONFIGS)
def test_bad_configs_raise(kwargs: dict, message: str) -> None:
    with pytest.raises(InvalidInput, match=message):
        ActionRewardConfig(**kwargs)


def test_check_actions_returns_float64_rows() -> None:
    out = check_actions([1, 2], "actions", 2)
    assert out.dtype == np.float64 and out.shape == (1, 2)


def test_the_core_module_imports_no_torch() -> None:
    code = "import sys, rlvr_world.rewards.action; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
