"""Micro-batching of perceptual distances (LPIPS / ST-LPIPS) across concurrent video requests.

Video requests are scored in threads of the service process; each calls a ``BatchedPerceptual``
as if it were the plain scorer. Calls queue up, and one background thread runs the network on up to
``max_batch`` frame pairs at once, waiting at most ``max_wait_s`` after the first pair for the
batch to fill, so a GPU sees full batches. Pairs of different frame sizes go in separate forward
passes. What it does not do: reorder work across metrics, or bound the queue (the service's
payload and batch limits do).
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass

import numpy as np

from rlvr_world.rewards.video import PerceptualScorer

log = logging.getLogger(__name__)


@dataclass
class _Item:
    pred: np.ndarray
    target: np.ndarray
    future: Future[np.ndarray]


class BatchedPerceptual:
    """A ``PerceptualScorer`` that groups concurrent calls into batched forward passes."""

    def __init__(
        self,
        scorer: PerceptualScorer,
        max_batch: int,
        max_wait_s: float,
        on_batch: Callable[[int], None] | None = None,
    ) -> None:
        self._scorer = scorer
        self._max_batch = max_batch
        self._max_wait_s = max_wait_s
        self._on_batch = on_batch
        self._queue: queue.Queue[_Item | None] = queue.Queue()
        self._thread = threading.Thread(
            target=self._run, name=f"perceptual-{scorer.metric}-{scorer.net}", daemon=True
        )
        self._thread.start()

    @property
    def metric(self) -> str:
        return self._scorer.metric

    @property
    def net(self) -> str:
        return self._scorer.net

    def __call__(self, pred: np.ndarray, target: np.ndarray) -> np.ndarray:
        fut: Future[np.ndarray] = Future()
        self._queue.put(_Item(pred, target, fut))
        return fut.result()

    def close(self) -> None:
        self._queue.put(None)
        self._thread.join(timeout=5)

    def _collect(self, first: _Item) -> tuple[list[_Item], bool]:
        items, pairs = [first], len(first.pred)
        deadline = time.monotonic() + self._max_wait_s
        while pairs < self._max_batch:
            left = deadline - time.monotonic()
            try:
                nxt = self._queue.get(timeout=left) if left > 0 else self._queue.get_nowait()
            except queue.Empty:
                break
            if nxt is None:
                return items, True
            items.append(nxt)
            pairs += len(nxt.pred)
        return items, False

    def _run(self) -> None:
        stop = False
        while not stop:
            first = self._queue.get()
            if first is None:
                return
            items, stop = self._collect(first)
            groups: dict[tuple[tuple[int, ...], str], list[_Item]] = {}
            for item in items:
                groups.setdefault((item.pred.shape[1:], item.pred.dtype.str), []).append(item)
            for group in groups.values():
                self._forward(group)

    def _forward(self, group: list[_Item]) -> None:
        try:
            pred = np.concatenate([i.pred for i in group])
            target = np.concatenate([i.target for i in group])
            if self._on_batch is not None:
                self._on_batch(len(pred))
            out = np.asarray(self._scorer(pred, target))
        except Exception as exc:  # the callers get the scorer's exception, the thread lives on
            log.exception("perceptual batch of %d items failed", len(group))
            for item in group:
                item.future.set_exception(exc)
            return
        start = 0
        for item in group:
            n = len(item.pred)
            item.future.set_result(out[start : start + n])
            start += n
