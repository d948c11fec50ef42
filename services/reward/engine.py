"""Scoring engine of one reward worker: a process pool for text, threads + micro-batching for video.

Both transports (gRPC and HTTP) call ``RewardEngine.score`` with jobs from
``services.reward.convert`` (video ones checked against ``idm_config``, what the service's IDM
reads): validated ones, or gRPC's ``RawTextJob`` whose parsing and validation run in the pool
process (so the event loop does not pay for them; a bad one comes back ``Rejected``). Text jobs
(CPU-bound, pure Python) go to a ``spawn`` process pool of ``settings.workers`` processes
(``services.reward.pool``, fed from the event loop), in chunks so that inter-process overhead is
paid per chunk, not per request. Video jobs run in a thread pool of this process
(``services.reward.models``: LPIPS / ST-LPIPS and the IDM behind micro-batchers, so concurrent
requests share forward passes). The IDM (``idm_path``) is loaded before the pool starts; a bad one
stops ``start`` with ``models.IdmUnavailable``.

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
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from rlvr_world.rewards.dispatch import TextScoreRequest, score_text
from rlvr_world.rewards.types import InvalidInput, RewardResult, Status, failed
from rlvr_world.rewards.video_action import ReaderConfig
from rlvr_world.v1 import common_pb2
from services.reward.convert import (
    Job,
    RawTextJob,
    TextJob,
    VideoJob,
    job_from_proto,
    rejected,
    result_to_proto,
)
from services.reward.metrics import RewardMetrics
from services.reward.models import VideoModels
from services.reward.pool import ChunkFailed, ProcessDied, ScoringPool
from services.reward.rawbatch import (
    Entry,
    RawAnswer,
    RawChunk,
    chunk_bytes,
    encode_entry,
    parse_entry,
    peek_task,
    score_raw_chunk,
)
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
    """The ``TextRow`` of ``job``, as the pool processes read it."""
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


def run_chunk(work: RawChunk | Sequence[TextRow]) -> RawAnswer | list[RewardResult]:
    """The pool's function: a ``ScoreBatch`` chunk as wire bytes, or rows of text jobs."""
    if isinstance(work, RawChunk):
        return score_raw_chunk(work)
    return score_text_chunk(work)


@dataclass
class RawOutcome:
    """``RewardEngine.score_raw``'s answer: the encoded ``ScoreBatchResponse``, the requests per
    (task, status), or the batch's first invalid request (index, message) when there is one."""

    reply: bytes
    counts: Counter[tuple[str, str]]
    rejected: tuple[int, str] | None = None


@dataclass
class _VideoCall:
    """Video requests of a ``ScoreBatch`` (request indices and ids) being scored by ``task``, or
    those that failed their checks (then none is scored)."""

    index: list[int]
    ids: list[str]
    rejections: list[tuple[int, str]]
    task: asyncio.Future[list[RewardResult]] | None = None

    async def results(self) -> list[RewardResult]:
        return [] if self.task is None else await self.task

    def cancel(self) -> None:
        if self.task is not None:
            self.task.cancel()


@dataclass
class _Gathered:
    """What the pool answered for a ``ScoreBatch``: encoded entries as (request index, bytes) in
    any order, counts per (task, status), invalid requests (index, message), and the video
    requests it handed back."""

    data: bytes
    entries: list[Entry]
    idm: ReaderConfig | None
    pieces: list[tuple[int, bytes]] = field(default_factory=list)
    counts: Counter[tuple[str, str]] = field(default_factory=Counter)
    rejections: list[tuple[int, str]] = field(default_factory=list)
    late: list[int] = field(default_factory=list)

    def add(self, idx: list[int], answer: RawAnswer) -> None:
        """A chunk's answer; ``idx``: the request index of each of its requests."""
        self.counts.update(answer.counts)
        if isinstance(answer.entries, bytes):
            self.pieces.append((idx[0], answer.entries))  # adjacent requests, joined
        else:
            for i, entry in zip(idx, answer.entries, strict=False):
                if entry is None:
                    self.late.append(i)
                else:
                    self.pieces.append((i, entry))
        if answer.rejected is not None:
            self.rejections.append((idx[answer.rejected[0]], answer.rejected[1]))

    def unscored(self, idx: list[int], result: RewardResult) -> None:
        """``result`` for each request of a chunk that was not scored (deadline, dead process),
        after the checks the event loop made before they moved to the pool (task, frames)."""
        for i in idx:
            try:
                req = parse_entry(self.data, self.entries[i])
                task = job_from_proto(req, self.idm).task
            except InvalidInput as exc:
                self.rejections.append((i, str(exc)))
                continue
            self.counts[task, result.status.value] += 1
            self.pieces.append((i, encode_entry(result_to_proto(req.request_id, result))))


def chunks(n: int, workers: int, per_worker: int = 4) -> list[range]:
    """Split ``n`` items into about ``per_worker`` chunks per worker, each at most ``MAX_CHUNK``
    long. Four, even when the pool is already busy, although each chunk costs the event loop a
    wake-up and a pickle: with one big chunk per process a call is answered only when its slowest
    process is done, and a process can run dry between calls (``bench/reward_service.py``
    measured both; docs/benchmarks.md)."""
    if n == 0:
        return []
    size = max(1, min(MAX_CHUNK, math.ceil(n / (workers * per_worker))))
    return [range(i, min(n, i + size)) for i in range(0, n, size)]


class RewardEngine:
    """Owns the process pool, the video threads and the video models of one worker."""

    def __init__(self, settings: RewardSettings, metrics: RewardMetrics) -> None:
        self.settings = settings
        self.metrics = metrics
        self._pool: ScoringPool | None = None
        self._tracked = (-1, -1)  # last (busy, outstanding) written to the gauges
        self._threads = ThreadPoolExecutor(settings.video_threads, thread_name_prefix="video")
        self.video = VideoModels(settings, metrics)
        self.ready = False
        #: pool processes ready to score
        self.live = 0
        self._health_listeners: list[Callable[[bool], None]] = []

    # ------------------------------------------------------------ lifecycle

    @property
    def healthy(self) -> bool:
        """Started, and every pool process up (one dead and being replaced: degraded)."""
        return self.ready and self.live >= self.settings.workers

    def health_text(self) -> str:
        """The health in words for readiness answers: not started, or processes up of all."""
        if not self.ready:
            return "not started"
        return f"{self.live} of {self.settings.workers} scoring processes up"

    def on_health(self, listener: Callable[[bool], None]) -> None:
        """Call ``listener(healthy)`` on the event loop each time ``healthy`` changes."""
        self._health_listeners.append(listener)

    def _set_health(self, ready: bool, live: int) -> None:
        before = self.healthy
        self.ready, self.live = ready, live
        self.metrics.pool_live.set(live)
        if self.healthy != before:
            if not self.healthy and self.ready:
                log.warning("scoring pool degraded: %s", self.health_text())
            for listener in self._health_listeners:
                listener(self.healthy)

    @property
    def idm_config(self) -> ReaderConfig | None:
        """What the service's IDM reads; None without one (requests weighing ``idm`` refused)."""
        return self.video.idm_config

    async def start(self) -> None:
        """Load the IDM, start the pool and wait until every process answers; build preloaded
        scorers. ``models.IdmUnavailable`` for a bad ``idm_path`` (nothing started)."""
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(self._threads, self.video.load_idm)
        self._pool = ScoringPool(
            self.settings.workers,
            run_chunk,
            _worker_init,
            on_change=self._track,
            on_live=lambda live: self._set_health(self.ready, live),
        )
        t0 = time.perf_counter()
        await self._pool.start()
        self.metrics.pool_workers.set(self.settings.workers)
        for spec in self.settings.preload_perceptual:
            metric, _, net = spec.partition(":")
            await loop.run_in_executor(self._threads, self.video.perceptual, metric, net or "alex")
        log.info(
            "scoring pool ready: %d processes in %.2fs",
            self.settings.workers,
            time.perf_counter() - t0,
        )
        self._set_health(True, self._pool.live)

    def close(self) -> None:
        """Stop the pool processes, the scoring threads and the video models' batchers."""
        self.ready, self.live = False, 0  # no listener: the servers are already stopped
        if self._pool is not None:
            self._pool.close()
            self._pool = None
        self._threads.shutdown(wait=True, cancel_futures=True)
        self.video.close()

    # ------------------------------------------------------------ scoring

    def _submit(self, work: RawChunk | list[TextRow], size: int) -> asyncio.Future[Any]:
        if self._pool is None:
            raise RuntimeError("engine not started")
        return self._pool.submit(work, size)

    def _track(self, busy: int, outstanding: int) -> None:
        if (busy, outstanding) == self._tracked:
            return
        self._tracked = (busy, outstanding)
        self.metrics.pool_queued.set(outstanding)
        self.metrics.pool_busy.set(busy)
        self.metrics.pool_utilisation.set(busy / self.settings.workers)

    def _timeout(self, timeout_s: float | None) -> float:
        """The call's deadline in seconds: the caller's or ``settings.deadline_s``, the shorter."""
        if timeout_s is None:
            return self.settings.deadline_s
        return max(min(timeout_s, self.settings.deadline_s), 0.0)

    @staticmethod
    async def _wait(futures: Iterable[asyncio.Future[Any]], timeout: float) -> set[Any]:
        """Wait up to ``timeout`` s; the futures whose result reached this loop before the
        deadline (one that came in the same loop iteration as the deadline, or later, is late: a
        fast pool can answer before the loop looks). The others are cancelled."""
        waiting = list(futures)
        if not waiting:
            return set()
        loop = asyncio.get_running_loop()
        finished: dict[asyncio.Future[Any], float] = {}
        for fut in waiting:
            fut.add_done_callback(lambda f: finished.setdefault(f, loop.time()))
        deadline = loop.time() + timeout
        done, pending = await asyncio.wait(waiting, timeout=timeout)
        for fut in pending:
            fut.cancel()
        return {fut for fut in done if finished.get(fut, math.inf) < deadline}

    async def score(
        self, jobs: Sequence[Job], timeout_s: float | None = None
    ) -> list[RewardResult]:
        """Score jobs within the deadline; results in request order. A ``RawTextJob`` that fails
        its checks in the pool gets ``Rejected`` (unless its deadline passes first: ``timeout``)."""
        timeout = self._timeout(timeout_s)
        loop = asyncio.get_running_loop()
        results: list[RewardResult | None] = [None] * len(jobs)
        waiting: dict[asyncio.Future[Any], list[int]] = {}
        text_idx: list[int] = []
        rows: list[TextRow] = []
        for i, job in enumerate(jobs):
            if isinstance(job, VideoJob):
                fut: asyncio.Future[Any] = loop.run_in_executor(
                    self._threads, self.video.score, job
                )
                waiting[fut] = [i]
            else:
                text_idx.append(i)
                rows.append(text_row(job))
        for part in chunks(len(text_idx), self.settings.workers):
            waiting[self._submit(rows[part.start : part.stop], len(part))] = text_idx[
                part.start : part.stop
            ]
        t0 = time.perf_counter()
        for fut in await self._wait(waiting, timeout):
            self._collect(fut, waiting[fut], results)
        if text_idx:
            self.metrics.score_seconds.labels("text").observe(time.perf_counter() - t0)
        msg = f"not scored within the {timeout:.3g}s deadline"
        return [r if r is not None else failed(Status.TIMEOUT, msg) for r in results]

    async def score_raw(
        self, data: bytes, entries: list[Entry], timeout_s: float | None = None
    ) -> RawOutcome:
        """Score a serialized ``ScoreBatchRequest`` (``entries`` from ``rawbatch.split_requests``)
        into a serialized ``ScoreBatchResponse``, without parsing its text requests here.

        Video requests (``rawbatch.peek_task``) are parsed here and scored in threads
        (micro-batched) while chunks of the others go to the pool as bytes; a video request the
        pool hands back (task not peeked) is scored here after it answers, in the time left. A
        chunk not answered by the deadline, or whose process died, is parsed here to answer each
        request ``timeout`` / ``error`` with its id (and to refuse the call if one is invalid)."""
        timeout = self._timeout(timeout_s)
        t0 = time.perf_counter()
        text = [i for i, e in enumerate(entries) if peek_task(data, e) != common_pb2.TASK_VIDEO]
        peeked = sorted(set(range(len(entries))) - set(text))
        video = self._start_video(data, entries, peeked, timeout)
        parts: dict[asyncio.Future[Any], list[int]] = {}
        for p in chunks(len(text), self.settings.workers):
            idx = text[p.start : p.stop]
            work = RawChunk(chunk_bytes(data, [entries[i] for i in idx]), len(text) == len(entries))
            parts[self._submit(work, len(idx))] = idx
        in_time = await self._wait(parts, timeout)
        if text:
            self.metrics.score_seconds.labels("text").observe(time.perf_counter() - t0)
        out = _Gathered(data, entries, self.idm_config)
        deadline_msg = f"not scored within the {timeout:.3g}s deadline"
        for fut, idx in parts.items():
            if fut not in in_time:
                out.unscored(idx, failed(Status.TIMEOUT, deadline_msg))
                continue
            try:
                out.add(idx, fut.result())
            except Exception as exc:  # ProcessDied, or a bug in the chunk function
                log.error("scoring a chunk failed: %s", exc)
                out.unscored(idx, failed(Status.ERROR, str(exc)))
        late = self._start_video(data, entries, out.late, timeout - (time.perf_counter() - t0))
        for call in (video, late):
            out.rejections.extend(call.rejections)
        if out.rejections:
            video.cancel()
            late.cancel()
            return RawOutcome(b"", out.counts, min(out.rejections))
        for call in (video, late):  # each ends by the deadline (``score`` returns timeouts)
            for i, req_id, res in zip(call.index, call.ids, await call.results(), strict=True):
                out.counts["video", res.status.value] += 1
                out.pieces.append((i, encode_entry(result_to_proto(req_id, res))))
        out.pieces.sort(key=lambda piece: piece[0])
        return RawOutcome(b"".join(entry for _, entry in out.pieces), out.counts)

    def _start_video(
        self, data: bytes, entries: list[Entry], index: list[int], timeout: float
    ) -> _VideoCall:
        """Parse and check the video requests ``index`` here and start scoring them (threads)
        within ``timeout`` s; none is scored when one fails its checks."""
        call = _VideoCall([], [], [])
        jobs: list[Job] = []
        for i in index:
            try:
                req = parse_entry(data, entries[i])
                jobs.append(job_from_proto(req, self.idm_config))
            except InvalidInput as exc:
                call.rejections.append((i, str(exc)))
                continue
            call.index.append(i)
            call.ids.append(req.request_id)
        if jobs and not call.rejections:
            call.task = asyncio.ensure_future(self.score(jobs, max(timeout, 0.0)))
        return call

    def _collect(
        self, fut: asyncio.Future[Any], idx: list[int], results: list[RewardResult | None]
    ) -> None:
        try:
            value = fut.result()
        except (ProcessDied, ChunkFailed) as exc:
            value = [failed(Status.ERROR, str(exc))] * len(idx)
        except Exception as exc:
            log.exception("scoring failed")
            value = [failed(Status.ERROR, f"{type(exc).__name__}: {exc}")] * len(idx)
        values = value if isinstance(value, list) else [value]
        for i, res in zip(idx, values, strict=True):
            results[i] = res
