"""Micro-batching of perceptual distances (LPIPS / ST-LPIPS) across concurrent video requests.

Video requests are scored in threads of the service process; each calls a ``BatchedPerceptual``
as if it were the plain scorer. Calls queue up, and one background thread runs the network on up to
``max_batch`` frame pairs at once, waiting at most ``max_wait_s`` after the first pair for the
batch to fill, so a GPU sees full batches. Pairs of different frame sizes go in separate forward
passes. Calls of ``patch_distances`` (per-patch credit) are batched the same way, apart from plain
calls and from other grids, and only where the wrapped scorer has it. What it does not do: reorder
work across metrics, or bound the queue (the service's payload and batch limits do).
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

import numpy as np

from rlvr_world.rewards.video import PerceptualScorer

log = logging.getLogger(__name__)


@dataclass
class _Item:
    pred: np.ndarray
    target: np.ndarray
    future: Future[Any]
    #: The patch grid of a ``patch_distances`` call; None for a plain call.
    grid: tuple[int, int] | None = None


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
        if hasattr(scorer, "patch_distances"):
            # Offered only when the wrapped scorer has it: score_video looks for the attribute.
            self.patch_distances = self._patch_distances
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

    def _patch_distances(
        self, pred: np.ndarray, target: np.ndarray, grid: tuple[int, int]
    ) -> tuple[np.ndarray, np.ndarray]:
        fut: Future[tuple[np.ndarray, np.ndarray]] = Future()
        self._queue.put(_Item(pred, target, fut, (int(grid[0]), int(grid[1]))))
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
            groups: dict[tuple[tuple[int, ...], str, tuple[int, int] | None], list[_Item]] = {}
            for item in items:
                key = (item.pred.shape[1:], item.pred.dtype.str, item.grid)
                groups.setdefault(key, []).append(item)
            for group in groups.values():
                self._forward(group)

    def _forward(self, group: list[_Item]) -> None:
        try:
            pred = np.concatenate([i.pred for i in group])
            target = np.concatenate([i.target for i in group])
            if self._on_batch is not None:
                self._on_batch(len(pred))
            grid = group[0].grid
            if grid is None:
                out, cells = np.asarray(self._scorer(pred, target)), None
            else:
                dist, by_cell = self._scorer.patch_distances(pred, target, grid)  # type: ignore[attr-defined]
                out, cells = np.asarray(dist), np.asarray(by_cell)
        except Exception as exc:  # the callers get the scorer's exception, the thread lives on
            log.exception("perceptual batch of %d items failed", len(group))
            for item in group:
                item.future.set_exception(exc)
            return
        start = 0
        for item in group:
            n = len(item.pred)
            part = out[start : start + n]
            item.future.set_result(part if cells is None else (part, cells[start : start + n]))
            start += n
