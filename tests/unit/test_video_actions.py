"""Action quantisation (docs/reference.md#action-quantisation): golden bins, and properties
without golden."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rlvr_world.video.actions import ActionQuantizer
from tests.helpers.shared import read_jsonl


def _records(shared: Path, kind: str) -> list[dict[str, Any]]:
    rows = read_jsonl(shared / "golden" / "golden_grpo_video.jsonl")
    return [r for r in rows if r["kind"] == kind]


def _frac_quantizer(shared: Path) -> ActionQuantizer:
    (rec,) = _records(shared, "action_ranges")
    return ActionQuantizer(np.array(rec["ranges"]), bins=256)


def test_golden_ranges_are_13_dims(shared: Path) -> None:
    q = _frac_quantizer(shared)
    assert q.dims == 13
    assert q.bins == 256


def test_golden_discretization_records(shared: Path) -> None:
    q = _frac_quantizer(shared)
    records = _records(shared, "action_discretization")
    assert len(records) == 2
    for rec in records:
        got = q.tokens(np.array(rec["actions"], dtype=np.float32))
        np.testing.assert_array_equal(got, np.array(rec["tokens_before_offset"]))


def test_golden_narrow_range_midpoint_is_127(shared: Path) -> None:
    q = _frac_quantizer(shared)
    (rec,) = [r for r in _records(shared, "action_discretization") if "description" in r]
    mid = np.array(rec["actions"][2], dtype=np.float32)
    toks = q.tokens(mid)
    assert toks[1] == 127  # the narrow range [-0.0096, 0.0037]: the 1e-8 survives in float32
    assert toks[3] == 128  # [-1, 1]: the 1e-8 vanishes beside a width of 2


def test_float64_input_gives_the_float32_result(shared: Path) -> None:
    q = _frac_quantizer(shared)
    (rec,) = [r for r in _records(shared, "action_discretization") if "description" in r]
    acts64 = np.array(rec["actions"], dtype=np.float64)
    np.testing.assert_array_equal(q.tokens(acts64), np.array(rec["tokens_before_offset"]))


def test_batch_shape_is_kept() -> None:
    q = ActionQuantizer(np.array([[0.0, 512.0], [0.0, 512.0]]))
    acts = np.random.default_rng(0).uniform(0, 512, size=(3, 4, 2))
    toks = q.tokens(acts)
    assert toks.shape == (3, 4, 2)
    assert toks.dtype == np.int64


@settings(max_examples=60, deadline=None)
@given(
    lo=st.floats(-1e3, 1e3),
    width=st.floats(1e-3, 1e3),
    xs=st.lists(st.floats(-3e3, 3e3), min_size=2, max_size=20),
)
def test_tokens_monotone_and_in_range(lo: float, width: float, xs: list[float]) -> None:
    q = ActionQuantizer(np.array([[lo, lo + width]]), bins=256)
    a = np.sort(np.array(xs, dtype=np.float64))[:, None]
    toks = q.tokens(a)[:, 0]
    assert toks.min() >= 0
    assert toks.max() <= 255
    assert np.all(np.diff(toks) >= 0)


def test_ends_and_outside_clip() -> None:
    q = ActionQuantizer(np.array([[-1.0, 1.0]]), bins=16)
    toks = q.tokens(np.array([[-5.0], [-1.0], [1.0], [5.0]]))[:, 0]
    assert toks.tolist() == [0, 0, 15, 15]


def test_from_actions_uses_dataset_min_max() -> None:
    acts = np.array([[0.0, 10.0], [2.0, -4.0], [1.0, 3.0]])
    q = ActionQuantizer.from_actions(acts, bins=8)
    np.testing.assert_array_equal(q.ranges, [[0.0, 2.0], [-4.0, 10.0]])
    toks = q.tokens(acts)
    assert toks[:, 0].tolist() == [0, 7, 4]


def test_centers_round_trip_to_same_bin() -> None:
    q = ActionQuantizer(np.array([[0.0, 512.0], [-1.0, 1.0]]))
    toks = np.array([[0, 255], [17, 128], [255, 0]])
    np.testing.assert_array_equal(q.tokens(q.centers(toks)), toks)


def test_save_load_round_trip(tmp_path: Path) -> None:
    q = ActionQuantizer(np.array([[0.0, 512.0], [-0.25, 0.75]]), bins=64)
    q.save(tmp_path / "q.json")
    assert ActionQuantizer.load(tmp_path / "q.json") == q
    assert ActionQuantizer.from_dict(q.to_dict()) == q


def test_zero_dim_actions() -> None:
    q = ActionQuantizer(np.zeros((0, 2)))
    assert q.tokens(np.zeros((5, 0))).shape == (5, 0)


@pytest.mark.parametrize(
    ("ranges", "field"),
    [
        (np.zeros((3,)), "ranges"),
        (np.zeros((2, 3)), "ranges"),
        (np.array([[1.0, 0.0]]), "ranges"),
        (np.array([[0.0, np.nan]]), "ranges"),
    ],
)
def test_bad_ranges_raise(ranges: np.ndarray, field: str) -> None:
    with pytest.raises(ValueError, match=field):
        ActionQuantizer(ranges)


@pytest.mark.parametrize("bins", [0, -1, True])
def test_bad_bins_raise(bins: int) -> None:
    with pytest.raises(ValueError, match="bins"):
        ActionQuantizer(np.array([[0.0, 1.0]]), bins=bins)


@pytest.mark.parametrize(
    "actions",
    [
        np.array([[0.5, np.nan]]),
        np.array([[np.inf, 0.0]]),
        np.zeros((4, 3)),
        np.float64(0.5),
        np.array([["a", "b"]]),
    ],
)
def test_bad_actions_raise(actions: np.ndarray) -> None:
    q = ActionQuantizer(np.array([[0.0, 1.0], [0.0, 1.0]]))
    with pytest.raises(ValueError, match="actions"):
        q.tokens(actions)


def test_from_actions_rejects_nan_and_empty() -> None:
    with pytest.raises(ValueError, match="actions"):
        ActionQuantizer.from_actions(np.array([[np.nan]]))
    with pytest.raises(ValueError, match="actions"):
        ActionQuantizer.from_actions(np.zeros((0, 2)))


def test_centers_rejects_out_of_range_tokens() -> None:
    q = ActionQuantizer(np.array([[0.0, 1.0]]), bins=4)
    with pytest.raises(ValueError, match="tokens"):
        q.centers(np.array([[4]]))
