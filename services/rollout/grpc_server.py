"""gRPC transport of the rollout service: ``RolloutService`` (Generate, LoadWeights, Info), on the
service scaffold (``rlvr_world.scaffold``: token / TLS / mTLS, drain, health, reflection).

``create_server(settings, engine, executor, gate, published)`` builds and binds the server (port
0 picks a free one) and returns its ``GrpcEndpoint``. Engine calls run in ``executor`` threads so
the event loop stays free. Status codes:

- ``INVALID_ARGUMENT``: empty prompt, ``n`` or ``max_tokens`` out of range, token ids outside the
  vocabulary (the message names the first bad id), bad sampling values, malformed request bytes,
  a checkpoint that does not fit the model or whose safetensors header is invalid;
- ``FAILED_PRECONDITION``: ``min_policy_version`` newer than the served weights (retry after the
  next weight load; not ``UNAVAILABLE``, because the server itself is healthy); ``LoadWeights``
  of a version not above the served one, or with no weights roots configured;
- ``PERMISSION_DENIED``: ``LoadWeights`` outside the weights roots, or of a version ahead of the
  trainer's latest published one (``services.rollout.weights``);
- ``NOT_FOUND``: ``LoadWeights`` with a path inside the roots that holds no checkpoint;
- ``INTERNAL``: a checkpoint that cannot be read (details in the service log, not the answer);
- ``UNAUTHENTICATED``: a missing or wrong bearer token (every method but health).
After any of these the previous weights stay in service and health stays SERVING.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from concurrent.futures import Executor
from typing import TypeVar

import grpc

from rlvr_world.scaffold.grpc_server import GrpcEndpoint, build_grpc
from rlvr_world.v1 import rollout_pb2, rollout_pb2_grpc
from services.rollout.convert import (
    generation_to_proto,
    info_to_proto,
    params_from_proto,
    prompt_from_proto,
)
from services.rollout.engine import GenerationEngine, InvalidRequest, WeightsNotFound
from services.rollout.settings import RolloutSettings
from services.rollout.weights import (
    NOT_LOADABLE,
    Published,
    WeightLoads,
    WeightsRefused,
    nothing_published,
)

log = logging.getLogger(__name__)
SERVICE_NAME = rollout_pb2.DESCRIPTOR.services_by_name["RolloutService"].full_name
T = TypeVar("T")


class RolloutServicer(rollout_pb2_grpc.RolloutServiceServicer):
    """Validates requests and runs them on the engine in worker threads."""

    def __init__(
        self,
        engine: GenerationEngine,
        settings: RolloutSettings,
        executor: Executor,
        loads: WeightLoads,
        published: Published = nothing_published,
    ) -> None:
        self.engine = engine
        self.settings = settings
        self.executor = executor
        self.loads = loads
        self.published = published

    async def _run(self, fn: Callable[[], T]) -> T:
        return await asyncio.get_running_loop().run_in_executor(self.executor, fn)

    async def Generate(  # noqa: N802 (gRPC method name)
        self, request: rollout_pb2.GenerateRequest, context: grpc.aio.ServicerContext
    ) -> rollout_pb2.GenerateResponse:
        """Samples and log-probs for one prompt; FAILED_PRECONDITION while the served weights
        are older than ``min_policy_version``, INVALID_ARGUMENT for a bad prompt or sampling."""
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
        """Serve the checkpoint at ``path`` as ``version``; the previous weights stay on any
        refusal (the status codes are ``WeightsGate``'s, NOT_FOUND, INVALID_ARGUMENT, INTERNAL)."""
        try:
            seconds = await self.loads.load(request.version, request.path, self.published)
        except WeightsRefused as exc:
            log.warning("LoadWeights version %d refused: %s", request.version, exc)
            await context.abort(exc.code, str(exc))
        except WeightsNotFound:
            await context.abort(grpc.StatusCode.NOT_FOUND, NOT_LOADABLE)
        except InvalidRequest as exc:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        except Exception:  # torn or unreadable checkpoint: details stay in the log
            log.exception("loading weights version %d failed", request.version)
            await context.abort(grpc.StatusCode.INTERNAL, "the checkpoint could not be read")
        return rollout_pb2.LoadWeightsResponse(version=request.version, seconds=seconds)

    async def Info(  # noqa: N802 (gRPC method name)
        self, request: rollout_pb2.EngineInfoRequest, context: grpc.aio.ServicerContext
    ) -> rollout_pb2.EngineInfoResponse:
        """The engine, model, served policy version and vocabulary size."""
        return info_to_proto(self.engine.info())


def create_server(
    settings: RolloutSettings,
    engine: GenerationEngine,
    executor: Executor,
    loads: WeightLoads,
    *,
    interceptors: tuple[grpc.aio.ServerInterceptor, ...] = (),
    published: Published = nothing_published,
) -> GrpcEndpoint:
    """Build and bind the gRPC server (not started); see the module docstring."""
    servicer = RolloutServicer(engine, settings, executor, loads, published)

    def register(server: grpc.aio.Server) -> None:
        # the generated *_pb2_grpc modules are unannotated (mypy-protobuf stubs cover *_pb2 only)
        rollout_pb2_grpc.add_RolloutServiceServicer_to_server(servicer, server)  # type: ignore[no-untyped-call]

    return build_grpc(settings, SERVICE_NAME, register, interceptors=interceptors)
