"""Scoring engine of one reward worker: a process pool for text, threads + micro-batching for video.

Both transports (gRPC and HTTP) call ``RewardEngine.score`` with jobs from
``services.reward.convert``: validated ones, or gRPC's ``RawTextJob`` whose parsing and validation
run in the pool process (so the event loop does not pay for them; a bad one comes back
``Rejected``). Text jobs (CPU-bound, pure Python) go to a ``spawn`` process pool of
``settings.workers`` processes (``services.reward.pool``, fed from the event loop), in chunks so
that inter-process overhead is paid per chunk, not per request. Video jobs run in a thread pool of
this process; their LPIPS / ST-LPIPS distances go through one ``BatchedPerceptual`` per
(metric, net), so concurrent requests share forward passes.

Deadlines: every call has one (``settings.deadline_s`` or the caller's, whichever is shorter); a job
not done by then (its result handled by the event loop before the deadline) is answered with status
``timeout`` (never a silent 0). What it does not do: stop a chunk that already runs in a pool
process (it finishes and its result is dropped; a chunk still waiting for a process is dropped).
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from rlvr_world.rewards.dispatch import TextScoreRequest, score_text
from rlvr_world.rewards.types import InvalidInput, RewardResult, Status, failed
from rlvr_world.rewards.video import PERCEPTUAL_METRICS, PerceptualScorer, score_video
from services.reward.batching import BatchedPerceptual
from services.reward.convert import Job, RawTextJob, TextJob, VideoJob, rejected
from services.reward.metrics import RewardMetrics
from services.reward.pool import ProcessDied, ScoringPool
from services.reward.settings import RewardSettings

log = logging.getLogger(__name__)
#: Largest number of requests sent to a pool process in one message.
MAX_CHUNK = 64


def _worker_init() -> None:
    """Pool process start-up: one thread per library, scorers imported once."""
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ.setdefault(var, "1")
    from rlvr_world.rewards import dispatch

    for scorer in ("text_game", "web"):
        try:
            dispatch.TEXT_SCORERS[scorer](
                TextScoreRequest(data_source=scorer, solution_str="", ground_truth="{}")
            )
        except Exception:  # warm-up only; a real request reports its own error
            log.debug("warm-up of %s failed", scorer, exc_info=True)


#: One text request for the pool, a tuple (pickles several times faster than the model):
#: ``(True, *fields of a validated TextScoreRequest)``, or ``(False, *RawTextJob)`` for a request
#: the pool process parses and validates itself (``RawTextJob.checked``).
TextRow = tuple[Any, ...]
_FIELDS = ("data_source", "solution_str", "ground_truth", "extra_info", "variant", "reward_type")


def text_row(job: TextJob | RawTextJob) -> TextRow:
    if isinstance(job, RawTextJob):
        return (False, *job)
    req = job.request
    return (
        True,
        req.data_source,
        req.solution_str,
        req.ground_truth,
        req.extra_info,
        req.variant,
        req.reward_type,
    )


def score_text_chunk(rows: Sequence[TextRow]) -> list[RewardResult]:
    """Score requests one by one (pool side). A raw request that fails its checks gets
    ``Rejected``; a scorer exception becomes status ``error``; neither affects its neighbours."""
    out: list[RewardResult] = []
    for checked, *fields in rows:
        if checked:
            req = TextScoreRequest.model_construct(**dict(zip(_FIELDS, fields, strict=True)))
        else:
            try:
                req = RawTextJob(*fields).checked().request
            except InvalidInput as exc:
                out.append(rejected(str(exc)))
                continue
        try:
            out.append(score_text(req))
        except Exception as exc:  # a scorer bug must not fail its neighbours
            log.exception("scorer raised on a %s request", req.data_source)
            out.append(failed(Status.ERROR, f"scorer raised {type(exc).__name__}: {exc}"))
    return out


def chunks(n: int, workers: int, per_worker: int = 4) -> list[range]:
    """Split ``n`` items into about ``per_worker`` chunks per worker, each at most ``MAX_CHUNK``
    long. Four, even when the pool is already busy, although each chunk costs the event loop a
    wake-up and a pickle: with one big chunk per process a call is answered only when its slowest
    process is done, and a process can run dry between calls (``bench/reward_service.py``, medians
    of 5 rounds, noisy: one chunk per process when busy gave 0.79 / 1.49 for 1 / 2 processes,
    four gave 0.91 / 1.59)."""
    if n == 0:
        return []
    size = max(1, min(MAX_CHUNK, math.ceil(n / (workers * per_worker))))
    return [range(i, min(n, i + size)) for i in range(0, n, size)]


class RewardEngine:
    """Owns the process pool, the video threads and the perceptual batchers of one worker."""

    def __init__(self, settings: RewardSettings, metrics: RewardMetrics) -> None:
        self.settings = settings
        self.metrics = metrics
        self._pool: ScoringPool | None = None
        self._tracked = (-1, -1)  # last (busy, outstanding) written to the gauges
        self._threads = ThreadPoolExecutor(settings.video_threads, thread_name_prefix="video")
        self._perceptual: dict[tuple[str, str], BatchedPerceptual] = {}
        self._perceptual_lock = threading.Lock()
        self.ready = False

    # ------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        """Start the pool and wait until every process answers; build preloaded scorers."""
        self._pool = ScoringPool(
            self.settings.workers, score_text_chunk, _worker_init, on_change=self._track
        )
        loop = asyncio.get_running_loop()
        t0 = time.perf_counter()
        await self._pool.start()
        self.metrics.pool_workers.set(self.settings.workers)
        for spec in self.settings.preload_perceptual:
            metric, _, net = spec.partition(":")
            await loop.run_in_executor(self._threads, self.perceptual, metric, net or "alex")
        log.info(
            "scoring pool ready: %d processes in %.2fs",
            self.settings.workers,
            time.perf_counter() - t0,
        )
        self.ready = True

    def close(self) -> None:
        self.ready = False
        if self._pool is not None:
            self._pool.close()
            self._pool = None
        self._threads.shutdown(wait=True, cancel_futures=True)
        for batcher in self._perceptual.values():
            batcher.close()

    # ------------------------------------------------------------ perceptual

    def perceptual(self, metric: str, net: str) -> BatchedPerceptual:
        """The batched scorer for (metric, net), built on first use."""
        key = (metric, net)
        with self._perceptual_lock:
            if key not in self._perceptual:
                import torch

                from rlvr_world.rewards.perceptual import make_perceptual

                torch.set_num_threads(self.settings.torch_threads)
                weights = self.settings.lpips_weights if metric == "lpips" else None
                scorer: PerceptualScorer = make_perceptual(
                    metric,
                    net,
                    self.settings.perceptual_device,
                    weights,
                    batch_size=self.settings.perceptual_max_batch,
                )
                self._perceptual[key] = BatchedPerceptual(
                    scorer,
                    self.settings.perceptual_max_batch,
                    self.settings.perceptual_max_wait_ms / 1000.0,
                    on_batch=self.metrics.perceptual_batch.observe,
                )
                log.info("perceptual scorer %s/%s ready", metric, net)
            return self._perceptual[key]

    def _score_video(self, job: VideoJob) -> RewardResult:
        t0 = time.perf_counter()
        try:
            scorers = {
                m: self.perceptual(m, job.config.lpips_net)
                for m in job.config.active()
                if m in PERCEPTUAL_METRICS
            }
            result = score_video(
                job.pred,
                job.target,
                job.config,
                previous_frame=job.previous_frame,
                perceptual=scorers,
            )
        except Exception as exc:  # e.g. LPIPS weights missing: a clear error status, not a crash
            log.exception("video scoring failed")
            result = failed(Status.ERROR, f"video scoring failed: {type(exc).__name__}: {exc}")
        self.metrics.score_seconds.labels("video").observe(time.perf_counter() - t0)
        return result

    # ------------------------------------------------------------ scoring

    def _submit_text(self, rows: list[TextRow]) -> asyncio.Future[list[RewardResult]]:
        if self._pool is None:
            raise RuntimeError("engine not started")
        return self._pool.submit(rows)

    def _track(self, busy: int, outstanding: int) -> None:
        if (busy, outstanding) == self._tracked:
            return
        self._tracked = (busy, outstanding)
        self.metrics.pool_queued.set(outstanding)
        self.metrics.pool_busy.set(busy)
        self.metrics.pool_utilisation.set(busy / self.settings.workers)

    async def score(
        self, jobs: Sequence[Job], timeout_s: float | None = None
    ) -> list[RewardResult]:
        """Score jobs within the deadline; results in request order. A ``RawTextJob`` that fails
        its checks in the pool gets ``Rejected`` (unless its deadline passes first: ``timeout``)."""
        timeout = (
            self.settings.deadline_s
            if timeout_s is None
            else min(timeout_s, self.settings.deadline_s)
        )
        loop = asyncio.get_running_loop()
        results: list[RewardResult | None] = [None] * len(jobs)
        waiting: dict[asyncio.Future[Any], list[int]] = {}
        text_idx: list[int] = []
        rows: list[TextRow] = []
        for i, job in enumerate(jobs):
            if isinstance(job, VideoJob):
                fut: asyncio.Future[Any] = loop.run_in_executor(
                    self._threads, self._score_video, job
                )
                waiting[fut] = [i]
            else:
                text_idx.append(i)
                rows.append(text_row(job))
        for part in chunks(len(text_idx), self.settings.workers):
            waiting[self._submit_text(rows[part.start : part.stop])] = text_idx[
                part.start : part.stop
            ]
        # When each future's result reached this loop: one that came in the same loop iteration
        # as the deadline, or later, is a timeout (a fast pool can answer before the loop looks).
        finished: dict[asyncio.Future[Any], float] = {}
        for fut in waiting:
            fut.add_done_callback(lambda f: finished.setdefault(f, loop.time()))
        t0 = time.perf_counter()
        deadline = loop.time() + max(timeout, 0.0)
        done, pending = (
            await asyncio.wait(waiting, timeout=max(timeout, 0.0)) if waiting else (set(), set())
        )
        for fut in done:
            if finished.get(fut, math.inf) < deadline:
                self._collect(fut, waiting[fut], results)
        for fut in pending:
            fut.cancel()
        elapsed = time.perf_counter() - t0
        if text_idx:
            self.metrics.score_seconds.labels("text").observe(elapsed)
        msg = f"not scored within the {timeout:.3g}s deadline"
        return [r if r is not None else failed(Status.TIMEOUT, msg) for r in results]

    def _collect(
        self, fut: asyncio.Future[Any], idx: list[int], results: list[RewardResult | None]
    ) -> None:
        try:
            value = fut.result()
        except ProcessDied as exc:
            value = [failed(Status.ERROR, str(exc))] * len(idx)
        except Exception as exc:
            log.exception("scoring failed")
            value = [failed(Status.ERROR, f"{type(exc).__name__}: {exc}")] * len(idx)
        values = value if isinstance(value, list) else [value]
        for i, res in zip(idx, values, strict=True):
            results[i] = res
