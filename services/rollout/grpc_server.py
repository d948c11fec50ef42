"""gRPC transport of the rollout service: ``RolloutService`` (Generate, LoadWeights, Info), the
standard health service and server reflection.

``create_server(settings, engine, executor)`` builds and binds a ``grpc.aio`` server (port 0 picks
a free one) and returns it with the bound port and its health servicer. Engine calls run in
``executor`` threads so the event loop stays free. Status codes:

- ``INVALID_ARGUMENT``: empty prompt, ``n`` or ``max_tokens`` out of range, token ids outside the
  vocabulary (the message names the first bad id), bad sampling values, a checkpoint that does not
  fit the model;
- ``FAILED_PRECONDITION``: ``min_policy_version`` newer than the served weights (retry after the
  next weight load; not ``UNAVAILABLE``, because the server itself is healthy);
- ``NOT_FOUND``: ``LoadWeights`` with a path that holds no checkpoint;
- ``INTERNAL``: a checkpoint that exists but cannot be read.
After any of these the previous weights stay in service and health stays SERVING.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from concurrent.futures import Executor
from typing import Any, TypeVar

import grpc
from grpc_health.v1 import health

from rlvr_world import grpc_common
from rlvr_world.v1 import rollout_pb2, rollout_pb2_grpc
from services.rollout.convert import (
    generation_to_proto,
    info_to_proto,
    params_from_proto,
    prompt_from_proto,
)
from services.rollout.engine import GenerationEngine, InvalidRequest, WeightsNotFound
from services.rollout.settings import RolloutSettings

log = logging.getLogger(__name__)
SERVICE_NAME = rollout_pb2.DESCRIPTOR.services_by_name["RolloutService"].full_name
T = TypeVar("T")


class RolloutServicer(rollout_pb2_grpc.RolloutServiceServicer):
    """Validates requests and runs them on the engine in worker threads."""

    def __init__(
        self, engine: GenerationEngine, settings: RolloutSettings, executor: Executor
    ) -> None:
        self.engine = engine
        self.settings = settings
        self.executor = executor

    async def _run(self, fn: Callable[[], T]) -> T:
        return await asyncio.get_running_loop().run_in_executor(self.executor, fn)

    async def Generate(  # noqa: N802 (gRPC method name)
        self, request: rollout_pb2.GenerateRequest, context: grpc.aio.ServicerContext
    ) -> rollout_pb2.GenerateResponse:
        served = self.engine.policy_version
        if request.min_policy_version > served:
            await context.abort(
                grpc.StatusCode.FAILED_PRECONDITION,
                f"min_policy_version {request.min_policy_version} is newer than the served "
                f"weights (version {served}); retry after the next weight load",
            )
        try:
            params = params_from_proto(
                request.sampling,
                self.settings.max_n,
                self.settings.max_tokens,
                request.inserts,
            )
            prompt = prompt_from_proto(request)
            gen = await self._run(lambda: self.engine.generate(prompt, params))
        except InvalidRequest as exc:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        if gen.policy_version < request.min_policy_version:  # weights moved back meanwhile
            await context.abort(
                grpc.StatusCode.FAILED_PRECONDITION,
                f"generated with version {gen.policy_version} < min_policy_version "
                f"{request.min_policy_version}",
            )
        return generation_to_proto(request.request_id, gen)

    async def LoadWeights(  # noqa: N802 (gRPC method name)
        self, request: rollout_pb2.LoadWeightsRequest, context: grpc.aio.ServicerContext
    ) -> rollout_pb2.LoadWeightsResponse:
        if request.version < 0:
            await context.abort(
                grpc.StatusCode.INVALID_ARGUMENT, f"version = {request.version}: must be >= 0"
            )
        if not request.path:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "path is empty")
        try:
            seconds = await self._run(
                lambda: self.engine.load_weights(request.version, request.path)
            )
        except WeightsNotFound as exc:
            await context.abort(grpc.StatusCode.NOT_FOUND, str(exc))
        except InvalidRequest as exc:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        except (OSError, ValueError, RuntimeError) as exc:  # torn or unreadable checkpoint
            log.exception("loading weights from %s failed", request.path)
            await context.abort(
                grpc.StatusCode.INTERNAL, f"reading checkpoint {request.path!r} failed: {exc}"
            )
        return rollout_pb2.LoadWeightsResponse(version=request.version, seconds=seconds)

    async def Info(  # noqa: N802 (gRPC method name)
        self, request: rollout_pb2.EngineInfoRequest, context: grpc.aio.ServicerContext
    ) -> rollout_pb2.EngineInfoResponse:
        return info_to_proto(self.engine.info())


def create_server(
    settings: RolloutSettings,
    engine: GenerationEngine,
    executor: Executor,
    interceptors: tuple[Any, ...] = (),
) -> tuple[grpc.aio.Server, int, health.aio.HealthServicer]:
    """Build and bind the gRPC server (not started); returns it, the bound port and its health."""
    server = grpc_common.new_server(settings.max_payload_bytes, interceptors)
    rollout_pb2_grpc.add_RolloutServiceServicer_to_server(  # type: ignore[no-untyped-call]
        RolloutServicer(engine, settings, executor), server
    )
    health_servicer = grpc_common.add_health_and_reflection(server, SERVICE_NAME)
    port = grpc_common.bind(server, settings.host, settings.grpc_port)
    return server, port, health_servicer


async def set_serving(health_servicer: health.aio.HealthServicer, serving: bool) -> None:
    await grpc_common.set_serving(health_servicer, SERVICE_NAME, serving)
