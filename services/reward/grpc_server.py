"""gRPC transport of the reward service: ``RewardService`` (Score, ScoreBatch, ScoreStream), on the
service scaffold (``rlvr_world.scaffold``: token / TLS / mTLS, drain, health, reflection).

``create_server(settings, engine, metrics)`` builds and binds the server and returns its
``GrpcEndpoint`` (port 0 picks a free one), so tests and ``services.reward.server`` control its
lifetime. Bad requests are refused with ``INVALID_ARGUMENT`` and a message naming the field
(``requests[3].frames.shape: ...``); malformed request bytes too (``request: malformed
ScoreRequest message``), never ``UNKNOWN``. A missing or wrong bearer token gets
``UNAUTHENTICATED`` before the request is parsed. ``ScoreBatch`` is served on its wire bytes:
the pool parses, checks, scores and encodes its text requests (``services.reward.rawbatch``).
For ``Score`` and ``ScoreStream`` a text request's ``extra_info_json`` and options are checked
by the scoring process (``convert.RawTextJob``), whose ``convert.Rejected`` is refused the same
way (one whose deadline passes before it is checked gets status ``timeout``). Oversized messages
get ``RESOURCE_EXHAUSTED`` from gRPC itself.
ScoreStream is pipelined: up to ``STREAM_WINDOW`` requests per stream are scored concurrently and
answered as they finish (match them by ``request_id``); a malformed message on a stream gets a
response with status ``REWARD_STATUS_INVALID_INPUT`` instead of ending the stream (its messages
are parsed here, one by one, for that reason).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager

import grpc

from rlvr_world.rewards.types import InvalidInput, RewardResult, Status, failed
from rlvr_world.scaffold.grpc_server import GrpcEndpoint, build_grpc
from rlvr_world.v1 import reward_pb2, reward_pb2_grpc
from services.reward.convert import Job, Rejected, job_from_proto, result_to_proto
from services.reward.engine import RewardEngine
from services.reward.metrics import RewardMetrics
from services.reward.rawbatch import split_requests
from services.reward.settings import RewardSettings

log = logging.getLogger(__name__)
SERVICE_NAME = reward_pb2.DESCRIPTOR.services_by_name["RewardService"].full_name
#: Requests of one stream scored at the same time (backpressure beyond that).
STREAM_WINDOW = 256


class RewardServicer(reward_pb2_grpc.RewardServiceServicer):
    """Validates, scores through the engine, counts."""

    def __init__(self, engine: RewardEngine, metrics: RewardMetrics, settings: RewardSettings):
        self.engine = engine
        self.metrics = metrics
        self.settings = settings

    @contextmanager
    def _call(self, method: str) -> Iterator[None]:
        gauge = self.metrics.in_flight.labels("grpc")
        gauge.inc()
        t0 = time.perf_counter()
        try:
            yield
        finally:
            gauge.dec()
            self.metrics.latency.labels(method, "grpc").observe(time.perf_counter() - t0)

    def _count(self, jobs: list[Job], results: list[RewardResult]) -> None:
        """One ``inc(n)`` per (task, status) seen, not one per request."""
        counts = Counter(zip([j.task for j in jobs], [r.status for r in results], strict=True))
        for (task, status), n in counts.items():
            self.metrics.requests.labels(task, status.value, "grpc").inc(n)

    async def _reject(self, context: grpc.aio.ServicerContext, reason: str, message: str) -> None:
        self.metrics.rejected.labels(reason, "grpc").inc()
        await context.abort(grpc.StatusCode.INVALID_ARGUMENT, message)

    async def Score(  # noqa: N802 (gRPC method name)
        self, request: reward_pb2.ScoreRequest, context: grpc.aio.ServicerContext
    ) -> reward_pb2.ScoreResponse:
        """One request scored; INVALID_ARGUMENT for a malformed or invalid one."""
        with self._call("Score"):
            try:
                job = job_from_proto(request, self.engine.idm_config)
            except InvalidInput as exc:
                await self._reject(context, "invalid_input", str(exc))
                raise  # unreachable: abort raises
            results = await self.engine.score([job], context.time_remaining())
            if isinstance(results[0], Rejected):  # checked in the pool
                await self._reject(context, "invalid_input", results[0].message)
            self._count([job], results)
            return result_to_proto(request.request_id, results[0])

    async def ScoreBatch(  # noqa: N802 (gRPC method name)
        self, request: bytes, context: grpc.aio.ServicerContext
    ) -> bytes:
        """Serialized ``ScoreBatchRequest`` in, serialized ``ScoreBatchResponse`` out: the text
        requests are parsed, checked and encoded by the pool (``services.reward.rawbatch``).
        Refuses the whole call at its first invalid request, in request order."""
        with self._call("ScoreBatch"):
            try:
                entries = split_requests(request)
            except InvalidInput as exc:
                await self._reject(context, "invalid_input", str(exc))
            n = len(entries)
            if n == 0:
                await self._reject(
                    context, "empty_batch", "requests: empty batch; send at least one"
                )
            if n > self.settings.max_batch:
                await self._reject(
                    context,
                    "batch_too_large",
                    f"requests: {n} requests exceed max_batch={self.settings.max_batch}",
                )
            self.metrics.batch_size.labels("grpc").observe(n)
            outcome = await self.engine.score_raw(request, entries, context.time_remaining())
            if outcome.rejected is not None:
                at, msg = outcome.rejected
                await self._reject(context, "invalid_input", f"requests[{at}].{msg}")
            for (task, status), count in outcome.counts.items():
                self.metrics.requests.labels(task, status, "grpc").inc(count)
            return outcome.reply

    async def _score_streamed(self, raw: bytes) -> reward_pb2.ScoreResponse:
        t0 = time.perf_counter()
        try:
            req = reward_pb2.ScoreRequest.FromString(raw)
        except Exception as exc:  # DecodeError: answered on the stream, which goes on
            self.metrics.rejected.labels("invalid_input", "grpc").inc()
            msg = f"request: malformed ScoreRequest message ({type(exc).__name__})"
            return result_to_proto("", failed(Status.INVALID_INPUT, msg))
        try:
            job = job_from_proto(req, self.engine.idm_config)
        except InvalidInput as exc:
            self.metrics.rejected.labels("invalid_input", "grpc").inc()
            return result_to_proto(req.request_id, failed(Status.INVALID_INPUT, str(exc)))
        results = await self.engine.score([job])
        if isinstance(results[0], Rejected):  # checked in the pool: answered like the above
            self.metrics.rejected.labels("invalid_input", "grpc").inc()
            return result_to_proto(req.request_id, results[0])
        self._count([job], results)
        self.metrics.latency.labels("ScoreStream.item", "grpc").observe(time.perf_counter() - t0)
        return result_to_proto(req.request_id, results[0])

    async def ScoreStream(  # noqa: N802 (gRPC method name)
        self,
        request_iterator: AsyncIterator[bytes],
        context: grpc.aio.ServicerContext,
    ) -> AsyncIterator[reward_pb2.ScoreResponse]:
        """A response per request, in completion order (up to ``STREAM_WINDOW`` in flight); a
        malformed or invalid request is answered ``invalid_input`` and the stream goes on."""
        out: asyncio.Queue[reward_pb2.ScoreResponse | None] = asyncio.Queue()
        window = asyncio.Semaphore(STREAM_WINDOW)

        async def one(req: bytes) -> None:
            try:
                await out.put(await self._score_streamed(req))
            finally:
                window.release()

        async def read() -> None:
            tasks = set()
            try:
                async for req in request_iterator:
                    await window.acquire()
                    task = asyncio.create_task(one(req))
                    tasks.add(task)
                    task.add_done_callback(tasks.discard)
                if tasks:
                    await asyncio.gather(*tasks)
            finally:
                await out.put(None)

        with self._call("ScoreStream"):
            reader = asyncio.create_task(read())
            try:
                while (resp := await out.get()) is not None:
                    yield resp
                await reader
            finally:
                reader.cancel()


# ---------------------------------------------------------------- server


def add_servicer(servicer: RewardServicer, server: grpc.aio.Server) -> None:
    """``reward_pb2_grpc.add_RewardServiceServicer_to_server``, except that ``ScoreBatch`` takes
    and returns serialized bytes (``services.reward.rawbatch``) and ``ScoreStream`` takes
    serialized requests; the wire format is unchanged. ``Score`` is parsed by the scaffold."""
    score_req, score_resp = reward_pb2.ScoreRequest, reward_pb2.ScoreResponse
    handlers = {
        "Score": grpc.unary_unary_rpc_method_handler(
            servicer.Score,
            request_deserializer=score_req.FromString,
            response_serializer=score_resp.SerializeToString,
        ),
        "ScoreBatch": grpc.unary_unary_rpc_method_handler(servicer.ScoreBatch),
        "ScoreStream": grpc.stream_stream_rpc_method_handler(
            servicer.ScoreStream, response_serializer=score_resp.SerializeToString
        ),
    }
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE_NAME, handlers),))
    server.add_registered_method_handlers(SERVICE_NAME, handlers)


def create_server(
    settings: RewardSettings, engine: RewardEngine, metrics: RewardMetrics
) -> GrpcEndpoint:
    """Build and bind the gRPC server (not started)."""
    servicer = RewardServicer(engine, metrics, settings)

    def rejected(reason: str) -> None:
        metrics.rejected.labels(reason, "grpc").inc()

    return build_grpc(
        settings,
        SERVICE_NAME,
        lambda server: add_servicer(servicer, server),
        on_reject=rejected,
        options=settings.grpc_server_options(),
    )
