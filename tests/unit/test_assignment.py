"""``hungarian`` (rlvr_world.rewards.assignment: ``max_assignment`` where scipy is not installed)
against scipy's linear_sum_assignment, and ``max_assignment`` itself."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.optimize import linear_sum_assignment

from rlvr_world.rewards.assignment import hungarian, max_assignment


def check(scores: np.ndarray) -> None:
    rows, cols = hungarian(scores)
    want_rows, want_cols = linear_sum_assignment(scores, maximize=True)
    assert len(rows) == len(want_rows) == min(scores.shape)
    assert len(set(rows.tolist())) == len(rows) and len(set(cols.tolist())) == len(cols)
    assert list(rows) == sorted(rows)
    got, want = scores[rows, cols].sum(), scores[want_rows, want_cols].sum()
    assert got == pytest.approx(want, rel=1e-12, abs=1e-12), (scores.shape, got, want)


@pytest.mark.parametrize("shape", [(1, 1), (1, 7), (7, 1), (5, 5), (3, 9), (9, 3), (40, 40)])
def test_the_best_sum_equals_scipys_on_random_scores(shape: tuple[int, int]) -> None:
    rng = np.random.default_rng(sum(shape))
    for _ in range(20):
        check(rng.random(shape))


def test_ties_and_integer_scores_reach_the_same_optimum() -> None:
    rng = np.random.default_rng(0)
    for _ in range(200):
        shape = tuple(int(x) for x in rng.integers(1, 9, size=2))
        check(rng.integers(0, 3, size=shape).astype(float))  # many ties
    check(np.ones((6, 4)))
    check(np.zeros((4, 6)))


def test_web_sized_similarity_matrices() -> None:
    """The web reward's case: token-F1 similarities in [0, 1], mostly 0, up to 256 items."""
    rng = np.random.default_rng(1)
    for n, m in ((256, 256), (256, 180), (120, 256)):
        scores = np.where(rng.random((n, m)) < 0.05, rng.random((n, m)), 0.0)
        check(scores)


def test_known_pairing() -> None:
    scores = np.array([[0.1, 0.9, 0.0], [0.8, 0.7, 0.0], [0.0, 0.0, 0.2]])
    for pair in (hungarian, max_assignment):
        rows, cols = pair(scores)
        assert rows.tolist() == [0, 1, 2] and cols.tolist() == [1, 0, 2], pair


@pytest.mark.parametrize(
    ("scores", "message"),
    [
        (np.zeros(3), "2-D"),
        (np.zeros((2, 2, 2)), "2-D"),
        (np.array([[0.0, np.nan]]), "finite"),
        (np.array([[np.inf, 0.0]]), "finite"),
    ],
)
def test_bad_matrices_are_refused(scores: np.ndarray, message: str) -> None:
    for pair in (hungarian, max_assignment):
        with pytest.raises(ValueError, match=message):
            pair(scores)


def test_an_empty_matrix_pairs_nothing() -> None:
    for shape in ((0, 0), (0, 4), (4, 0)):
        for pair in (hungarian, max_assignment):
            rows, cols = pair(np.zeros(shape))
            assert rows.size == 0 and cols.size == 0
