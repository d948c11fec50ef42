"""Paired bootstrap and the run headline (``rlvr_world.stats``), checked by hand-computed values."""

from __future__ import annotations

import numpy as np
import pytest

from rlvr_world.stats import Interval, build_headline, paired_bootstrap, per_item


def test_identical_sides_give_a_zero_interval() -> None:
    a = [0.1, 0.5, 0.9]
    assert paired_bootstrap(a, a, resamples=200) == Interval(0.0, 0.0, 0.0, 3)


def test_a_constant_difference_is_exact() -> None:
    b = np.linspace(0.0, 1.0, 50)
    out = paired_bootstrap(b + 0.25, b, resamples=500, seed=3)
    assert out.mean == pytest.approx(0.25)
    assert out.low == pytest.approx(0.25) and out.high == pytest.approx(0.25)
    assert out.n == 50


def test_interval_brackets_the_mean_and_matches_the_normal_approximation() -> None:
    rng = np.random.default_rng(0)
    diff = rng.normal(0.1, 1.0, size=400)
    out = paired_bootstrap(diff, np.zeros(400), resamples=4000, seed=1)
    half = 1.96 * diff.std(ddof=1) / np.sqrt(400)  # about 0.098
    assert out.low < out.mean < out.high
    assert out.mean == pytest.approx(diff.mean())
    assert out.high - out.low == pytest.approx(2 * half, rel=0.1)


def test_the_same_seed_gives_the_same_interval() -> None:
    a, b = np.arange(10.0), np.arange(10.0)[::-1]
    assert paired_bootstrap(a, b, 300, 0.9, 7) == paired_bootstrap(a, b, 300, 0.9, 7)


def test_a_seeds_by_items_table_is_averaged_per_item_first() -> None:
    table = np.array([[1.0, 2.0, 3.0], [3.0, 4.0, 5.0]])
    np.testing.assert_allclose(per_item(table), [2.0, 3.0, 4.0])
    out = paired_bootstrap(table, np.array([2.0, 3.0, 4.0]), resamples=100)
    assert out == Interval(0.0, 0.0, 0.0, 3)


@pytest.mark.parametrize(
    ("a", "b", "message"),
    [
        ([1.0, 2.0], [1.0], "same"),
        ([], [], "no items"),
        ([1.0, float("nan")], [1.0, 2.0], "NaN"),
        (np.zeros((2, 2, 2)), np.zeros((2, 2, 2)), "shape"),
        (np.zeros((0, 3)), np.zeros((0, 3)), "at least one seed"),
    ],
)
def test_bad_scores_are_refused(a: object, b: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        paired_bootstrap(a, b, resamples=10)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [({"resamples": 0}, "resamples"), ({"confidence": 1.0}, "confidence")],
)
def test_bad_settings_are_refused(kwargs: dict[str, float], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        paired_bootstrap([1.0], [0.0], **kwargs)  # type: ignore[arg-type]


def test_headline_of_a_higher_is_better_metric() -> None:
    control = np.array([[0.1, 0.2, 0.3, 0.4]] * 3)
    scores = {
        "start": [0.0, 0.1, 0.2, 0.3],
        "control": control,
        "rlvr": control + 0.05,
        "copy_last_frame": [0.0, 0.0, 0.0, 0.0],
    }
    head = build_headline("reward", scores, seeds=[0, 1, 2], higher_is_better=True, resamples=50)
    assert head["metric"] == "reward" and head["n"] == 4 and head["seeds"] == [0, 1, 2]
    assert head["start"] == pytest.approx(0.15) and head["control"] == pytest.approx(0.25)
    assert head["rlvr"] == pytest.approx(0.30) and head["copy_last_frame"] == 0.0
    assert head["ci95"] == pytest.approx([0.05, 0.05])
    assert head["higher_is_better"] is True


def test_headline_of_a_lower_is_better_metric_is_positive_when_rlvr_is_lower() -> None:
    scores = {"start": [2.0, 2.0], "control": [1.0, 1.0], "rlvr": [0.5, 0.5]}
    scores["copy_last_frame"] = [3.0, 3.0]
    head = build_headline("l1", scores, seeds=[0], higher_is_better=False, resamples=20)
    assert head["ci95"] == pytest.approx([0.5, 0.5]) and head["ci_mean"] == pytest.approx(0.5)


def test_headline_refuses_missing_or_mismatched_entries() -> None:
    with pytest.raises(ValueError, match="missing copy_last_frame"):
        build_headline(
            "l1", {"start": [1], "control": [1], "rlvr": [1]}, seeds=[0], higher_is_better=False
        )
    scores = {"start": [1.0], "control": [1.0], "rlvr": [1.0, 2.0], "copy_last_frame": [1.0]}
    with pytest.raises(ValueError, match="same items"):
        build_headline("l1", scores, seeds=[0], higher_is_better=False)
    scores["rlvr"] = [1.0]
    with pytest.raises(ValueError, match="seeds"):
        build_headline("l1", scores, seeds=[], higher_is_better=False)
