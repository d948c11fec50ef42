"""Micro-batching of perceptual distances: concurrent calls share forward passes, results align."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from services.reward.batching import BatchedIdm, BatchedPerceptual


class MeanAbs:
    """A real (numpy) batched distance standing in for LPIPS: records its batch sizes."""

    metric = "stlpips"
    net = "alex"

    def __init__(self) -> None:
        self.batches: list[int] = []
        self.lock = threading.Lock()

    def __call__(self, pred: np.ndarray, target: np.ndarray) -> np.ndarray:
        with self.lock:
            self.batches.append(len(pred))
        if np.isnan(pred).any():
            raise ValueError("nan in batch")
        return np.abs(pred - target).mean(axis=(1, 2, 3))


def test_concurrent_calls_are_batched_and_answers_match() -> None:
    scorer = MeanAbs()
    batcher = BatchedPerceptual(scorer, max_batch=16, max_wait_s=0.05)
    rng = np.random.default_rng(0)
    pairs = [(rng.random((2, 4, 4, 3)), rng.random((2, 4, 4, 3))) for _ in range(16)]
    pairs.append((rng.random((1, 8, 8, 3)), rng.random((1, 8, 8, 3))))  # another frame size
    with ThreadPoolExecutor(len(pairs)) as pool:
        outs = list(pool.map(lambda p: batcher(*p), pairs))
    batcher.close()
    for (a, b), out in zip(pairs, outs, strict=True):
        np.testing.assert_allclose(out, np.abs(a - b).mean(axis=(1, 2, 3)))
    assert sum(scorer.batches) == 33
    assert max(scorer.batches) > 2  # at least two callers shared one pass
    assert (batcher.metric, batcher.net) == ("stlpips", "alex")


def test_a_failing_batch_raises_in_its_callers_and_the_batcher_survives() -> None:
    scorer = MeanAbs()
    batcher = BatchedPerceptual(scorer, max_batch=4, max_wait_s=0.0)
    bad = np.full((1, 2, 2, 3), np.nan)
    with pytest.raises(ValueError, match="nan in batch"):
        batcher(bad, bad)
    ok = np.zeros((1, 2, 2, 3))
    assert batcher(ok, ok).tolist() == [0.0]
    batcher.close()


class MeanAbsWithCells(MeanAbs):
    """``MeanAbs`` with a spatial map: each cell's mean absolute difference."""

    def patch_distances(
        self, pred: np.ndarray, target: np.ndarray, grid: tuple[int, int]
    ) -> tuple[np.ndarray, np.ndarray]:
        with self.lock:
            self.batches.append(len(pred))
        n, h, w, c = pred.shape
        cells = np.abs(pred - target).reshape(n, grid[0], h // grid[0], grid[1], w // grid[1], c)
        return np.abs(pred - target).mean(axis=(1, 2, 3)), cells.mean(axis=(2, 4, 5))


def test_patch_calls_are_batched_apart_from_plain_calls_and_other_grids() -> None:
    scorer = MeanAbsWithCells()
    batcher = BatchedPerceptual(scorer, max_batch=64, max_wait_s=0.05)
    rng = np.random.default_rng(1)
    pairs = [(rng.random((2, 4, 4, 3)), rng.random((2, 4, 4, 3))) for _ in range(12)]
    grids = [None, (2, 2), (4, 1)] * 4
    with ThreadPoolExecutor(len(pairs)) as pool:
        outs = list(
            pool.map(
                lambda i: (
                    batcher(*pairs[i])
                    if grids[i] is None
                    else batcher.patch_distances(*pairs[i], grids[i])
                ),
                range(len(pairs)),
            )
        )
    batcher.close()
    for (a, b), grid, out in zip(pairs, grids, outs, strict=True):
        if grid is None:
            np.testing.assert_allclose(out, np.abs(a - b).mean(axis=(1, 2, 3)))
            continue
        dist, cells = out
        want_dist, want_cells = scorer.patch_distances(a, b, grid)
        np.testing.assert_allclose(dist, want_dist)
        np.testing.assert_allclose(cells, want_cells)
    assert sum(scorer.batches) == 24 + 8 * 2  # the 8 checks above also count
    assert max(scorer.batches) <= 8  # no pass mixed plain calls or grids (4 callers x 2 pairs)


def test_patch_distances_is_offered_only_where_the_scorer_has_it() -> None:
    plain = BatchedPerceptual(MeanAbs(), max_batch=4, max_wait_s=0.0)
    assert not hasattr(plain, "patch_distances")
    plain.close()
    with_cells = BatchedPerceptual(MeanAbsWithCells(), max_batch=4, max_wait_s=0.0)
    bad = np.zeros((1, 4, 4, 3))
    with pytest.raises(ValueError, match="cannot reshape"):  # the scorer's error reaches the caller
        with_cells.patch_distances(bad, bad, (3, 3))
    dist, cells = with_cells.patch_distances(bad, bad, (2, 2))
    assert dist.tolist() == [0.0] and cells.shape == (1, 2, 2)
    with_cells.close()


class MeanShift:
    """A real (numpy) batched reader standing in for the IDM: the mean of (next - previous)
    over pixels and channels, and its negative, as the two action axes; records its batches."""

    config = object()  # handed through untouched

    def __init__(self) -> None:
        self.batches: list[int] = []
        self.lock = threading.Lock()

    def predict(self, prev: np.ndarray, nxt: np.ndarray) -> np.ndarray:
        with self.lock:
            self.batches.append(len(prev))
        if np.isnan(nxt).any():
            raise ValueError("nan in batch")
        shift = (nxt - prev).mean(axis=(1, 2, 3))
        return np.stack([shift, -shift], axis=1)


def test_idm_reads_of_concurrent_calls_share_passes_and_come_back_aligned() -> None:
    reader = MeanShift()
    batcher = BatchedIdm(reader, max_batch=32, max_wait_s=0.5)  # type: ignore[arg-type]
    assert batcher.config is reader.config
    rng = np.random.default_rng(2)
    steps = [rng.integers(1, 4) for _ in range(12)]
    pairs = [(rng.random((n, 4, 4, 3)), rng.random((n, 4, 4, 3))) for n in steps]
    pairs.append((rng.random((2, 8, 8, 3)), rng.random((2, 8, 8, 3))))  # another frame size
    with ThreadPoolExecutor(len(pairs)) as pool:
        outs = list(pool.map(lambda p: batcher.predict(*p), pairs))
    batches = list(reader.batches)
    assert sum(batches) == sum(steps) + 2
    assert max(batches) > 3  # at least two callers shared one pass
    for (a, b), out in zip(pairs, outs, strict=True):
        np.testing.assert_allclose(out, reader.predict(a, b))
    bad = np.full((1, 4, 4, 3), np.nan)
    with pytest.raises(ValueError, match="nan in batch"):  # the reader's error reaches the caller
        batcher.predict(bad, bad)
    ok = np.zeros((1, 4, 4, 3))
    assert batcher.predict(ok, ok).tolist() == [[0.0, 0.0]]  # the batcher lives on
    batcher.close()
