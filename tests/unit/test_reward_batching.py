"""Micro-batching of perceptual distances: concurrent calls share forward passes, results align."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from services.reward.batching import BatchedPerceptual


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
