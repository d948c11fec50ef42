"""Micro-batching of the video models (LPIPS / ST-LPIPS, the IDM) across concurrent requests.

Video requests are scored in threads of the service process; each calls a ``BatchedPerceptual``
(or ``BatchedIdm``) as if it were the plain scorer (or IDM). Calls queue up, and one background
thread per model runs it on up to ``max_batch`` frame pairs at once, waiting at most
``max_wait_s`` after the first pair for the batch to fill, so a GPU sees full batches (the video
requests of one ``ScoreBatch`` are scored concurrently, so their frames share forward passes).
Pairs of different frame sizes or dtypes go in separate forward passes. Calls of
``patch_distances`` (per-patch credit) are batched the same way, apart from plain calls and from
other grids, and only where the wrapped scorer has it. What it does not do: reorder work across
models, or bound the queue (the service's payload and batch limits do).
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Hashable
from concurrent.futures import Future
from dataclasses import dataclass

import numpy as np

from rlvr_world.rewards.video import PerceptualScorer
from rlvr_world.rewards.video_action import ActionReader, ReaderConfig

log = logging.getLogger(__name__)


@dataclass
class _Item:
    """One call: frame pairs ``(first[i], second[i])``, and the future its caller waits on."""

    first: np.ndarray
    second: np.ndarray
    future: Future[tuple[np.ndarray, ...]]
    #: The patch grid of a ``patch_distances`` call; None for a plain call.
    grid: tuple[int, int] | None = None


class _MicroBatcher(ABC):
    """The queue and the background thread: ``_submit`` blocks its caller until the batch that
    holds its pairs has run ``_forward``."""

    def __init__(
        self, name: str, max_batch: int, max_wait_s: float, on_batch: Callable[[int], None] | None
    ) -> None:
        self._max_batch = max_batch
        self._max_wait_s = max_wait_s
        self._on_batch = on_batch
        self._queue: queue.Queue[_Item | None] = queue.Queue()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _submit(self, item: _Item) -> tuple[np.ndarray, ...]:
        self._queue.put(item)
        return item.future.result()

    def close(self) -> None:
        self._queue.put(None)
        self._thread.join(timeout=5)

    def _collect(self, first: _Item) -> tuple[list[_Item], bool]:
        items, pairs = [first], len(first.first)
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
            pairs += len(nxt.first)
        return items, False

    def _run(self) -> None:
        stop = False
        while not stop:
            first = self._queue.get()
            if first is None:
                return
            items, stop = self._collect(first)
            groups: dict[Hashable, list[_Item]] = {}
            for item in items:
                key = (item.first.shape[1:], item.first.dtype.str, item.grid)
                groups.setdefault(key, []).append(item)
            for group in groups.values():
                self._run_group(group)

    def _run_group(self, group: list[_Item]) -> None:
        try:
            first = np.concatenate([i.first for i in group])
            second = np.concatenate([i.second for i in group])
            if self._on_batch is not None:
                self._on_batch(len(first))
            parts = self._forward(first, second, group[0].grid)
        except Exception as exc:  # the callers get the model's exception, the thread lives on
            log.exception("%s: batch of %d items failed", self._thread.name, len(group))
            for item in group:
                item.future.set_exception(exc)
            return
        start = 0
        for item in group:
            n = len(item.first)
            item.future.set_result(tuple(p[start : start + n] for p in parts))
            start += n

    @abstractmethod
    def _forward(
        self, first: np.ndarray, second: np.ndarray, grid: tuple[int, int] | None
    ) -> tuple[np.ndarray, ...]:
        """Run the model on a batch; each returned array has one row per pair."""


class BatchedPerceptual(_MicroBatcher):
    """A ``PerceptualScorer`` that groups concurrent calls into batched forward passes."""

    def __init__(
        self,
        scorer: PerceptualScorer,
        max_batch: int,
        max_wait_s: float,
        on_batch: Callable[[int], None] | None = None,
    ) -> None:
        self._scorer = scorer
        if hasattr(scorer, "patch_distances"):
            # Offered only when the wrapped scorer has it: score_video looks for the attribute.
            self.patch_distances = self._patch_distances
        super().__init__(
            f"perceptual-{scorer.metric}-{scorer.net}", max_batch, max_wait_s, on_batch
        )

    @property
    def metric(self) -> str:
        """The wrapped scorer's metric (``lpips`` or ``stlpips``)."""
        return self._scorer.metric

    @property
    def net(self) -> str:
        """The wrapped scorer's backbone network."""
        return self._scorer.net

    def __call__(self, pred: np.ndarray, target: np.ndarray) -> np.ndarray:
        (dist,) = self._submit(_Item(pred, target, Future()))
        return np.asarray(dist)

    def _patch_distances(
        self, pred: np.ndarray, target: np.ndarray, grid: tuple[int, int]
    ) -> tuple[np.ndarray, np.ndarray]:
        dist, cells = self._submit(_Item(pred, target, Future(), (int(grid[0]), int(grid[1]))))
        return dist, cells

    def _forward(
        self, first: np.ndarray, second: np.ndarray, grid: tuple[int, int] | None
    ) -> tuple[np.ndarray, ...]:
        if grid is None:
            return (np.asarray(self._scorer(first, second)),)
        # only reached where the scorer has patch_distances (the hasattr in __init__)
        dist, cells = self._scorer.patch_distances(first, second, grid)  # type: ignore[attr-defined]
        return np.asarray(dist), np.asarray(cells)


class BatchedIdm(_MicroBatcher):
    """An ``ActionReader`` (the service's IDM) that reads the steps of concurrent calls in
    batched forward passes."""

    def __init__(
        self,
        reader: ActionReader,
        max_batch: int,
        max_wait_s: float,
        on_batch: Callable[[int], None] | None = None,
    ) -> None:
        self._reader = reader
        super().__init__("idm", max_batch, max_wait_s, on_batch)

    @property
    def config(self) -> ReaderConfig:
        """The wrapped reader's config (image size, action space)."""
        return self._reader.config

    def predict(self, prev: np.ndarray, nxt: np.ndarray) -> np.ndarray:
        """``ActionReader.predict``, batched with concurrent calls; blocks until its batch ran."""
        (read,) = self._submit(_Item(prev, nxt, Future()))
        return np.asarray(read)

    def _forward(
        self, first: np.ndarray, second: np.ndarray, grid: tuple[int, int] | None
    ) -> tuple[np.ndarray, ...]:
        return (np.asarray(self._reader.predict(first, second)),)
