"""Paired bootstrap intervals and the run headline, on hand-made score tables."""

from __future__ import annotations

import numpy as np
import pytest

from rlvr_world.stats import build_headline, describe, paired_bootstrap


def test_identical_models_give_a_zero_interval() -> None:
    a = [1.0, 0.0, 1.0, 1.0, 0.0]
    ci = paired_bootstrap(a, a)
    assert (ci.mean, ci.low, ci.high, ci.n) == (0.0, 0.0, 0.0, 5)
    assert not ci.excludes_zero


def test_a_constant_gain_is_exact_and_excludes_zero() -> None:
    ci = paired_bootstrap([1.0, 1.0, 0.5], [0.0, 0.0, -0.5])
    assert ci.mean == pytest.approx(1.0) and ci.low == pytest.approx(1.0)
    assert ci.excludes_zero


def test_interval_covers_the_mean_and_is_reproducible() -> None:
    rng = np.random.default_rng(3)
    a = rng.integers(0, 2, 300).astype(float)
    b = rng.integers(0, 2, 300).astype(float)
    ci = paired_bootstrap(a, b, seed=7)
    assert ci.low <= ci.mean <= ci.high
    assert paired_bootstrap(a, b, seed=7) == ci
    # the normal-approximation half-width of a paired mean difference, within 15%
    half = 1.96 * (a - b).std(ddof=1) / np.sqrt(a.size)
    assert (ci.high - ci.low) / 2 == pytest.approx(half, rel=0.15)


def test_seed_rows_are_averaged_per_item_before_resampling() -> None:
    a = [[1.0, 0.0], [0.0, 0.0]]  # two seeds, two items: item means 0.5, 0.0
    b = [[0.0, 0.0], [0.0, 0.0]]
    ci = paired_bootstrap(a, b)
    assert ci.n == 2 and ci.mean == pytest.approx(0.25)


@pytest.mark.parametrize(
    ("a", "b", "message"),
    [
        ([1.0, 0.0], [1.0], "differ in shape"),
        ([], [], "no items"),
        ([1.0, float("nan")], [0.0, 0.0], "finite"),
        ([[[1.0]]], [[[1.0]]], "shape"),
    ],
)
def test_bad_tables_are_refused_with_a_reason(a: list, b: list, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        paired_bootstrap(a, b)


def test_confidence_must_be_a_probability() -> None:
    with pytest.raises(ValueError, match="confidence"):
        paired_bootstrap([1.0], [0.0], confidence=1.0)


def test_headline_has_every_field_and_splits() -> None:
    start = [0.0, 0.0, 1.0, 0.0]
    control = [0.0, 1.0, 1.0, 0.0]
    rlvr = [1.0, 1.0, 1.0, 1.0]
    h = build_headline(
        "exact_match",
        [0],
        {"start": start, "control": control, "rlvr": rlvr},
        split_of=["changed", "unchanged", "changed", "unchanged"],
        baselines={"copy": 0.1},
        control_budget="samples",
    )
    d = h.to_dict()
    for key in ("metric", "n", "seeds", "start", "control", "rlvr", "ci95", "higher_is_better"):
        assert key in d
    assert (h.n, h.start, h.control, h.rlvr) == (4, 0.25, 0.5, 1.0)
    assert h.rlvr_minus_start == pytest.approx(0.75)
    assert h.splits["changed"]["rlvr_minus_control"] == pytest.approx(0.5)
    assert h.splits["unchanged"]["n"] == 2
    assert d["baselines"] == {"copy": 0.1}
    assert "RLVR - control +0.500" in describe(h)


def test_describe_says_when_the_interval_includes_zero() -> None:
    h = build_headline(
        "f1", [0, 1], {"start": [0.5, 0.5], "control": [0.4, 0.6], "rlvr": [0.6, 0.4]}
    )
    assert "includes 0" in describe(h)


def test_describe_names_a_baseline_rlvr_does_not_beat() -> None:
    scores = {"start": [0.0, 1.0], "control": [0.0, 0.0], "rlvr": [0.0, 1.0]}
    collapsed = build_headline("exact_match", [0], scores, baselines={"always_no_change": 0.5})
    assert describe(collapsed).endswith(
        "baselines: always_no_change 0.500 (RLVR does not beat always_no_change)"
    )
    better = build_headline("exact_match", [0], scores, baselines={"always_no_change": 0.25})
    assert describe(better).endswith("baselines: always_no_change 0.250")
    lower = build_headline(
        "l1", [0], scores, higher_is_better=False, baselines={"copy_last_frame": 0.75}
    )
    assert describe(lower).endswith("copy_last_frame 0.750")  # 0.5 < 0.75: beaten


def test_headline_refuses_missing_models_and_bad_split_labels() -> None:
    with pytest.raises(ValueError, match="control"):
        build_headline("m", [0], {"start": [1.0], "rlvr": [1.0]})
    with pytest.raises(ValueError, match="labels"):
        build_headline("m", [0], {k: [1.0] for k in ("start", "control", "rlvr")}, split_of=[])
