"""Run one rollout server: the engine, the gRPC server and (with ``redis_url``) the weights watcher.

``start_service(settings)`` loads the model, binds (port 0 resolved), starts, and returns a
``RunningService``; ``RunningService.stop()`` drains (``rlvr_world.scaffold.grpc_server``): the
watcher stops, health goes NOT_SERVING, new calls get UNAVAILABLE and the ones running get
``settings.grace_s`` to finish. ``serve(settings)`` does this until SIGTERM or SIGINT.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from wsgiref.simple_server import WSGIServer

import grpc

from rlvr_world.scaffold.grpc_server import GrpcEndpoint, ServesGrpc
from rlvr_world.scaffold.metrics import GrpcMetrics
from rlvr_world.scaffold.thread import serve_until_signal
from services.rollout.engine import EngineError, GenerationEngine
from services.rollout.grpc_server import create_server
from services.rollout.metrics import rollout_metrics
from services.rollout.settings import RolloutSettings
from services.rollout.watcher import PublishedUnknown, WeightsWatcher
from services.rollout.weights import (
    Published,
    WeightLoads,
    WeightsGate,
    WeightsRefused,
    nothing_published,
)

log = logging.getLogger(__name__)
#: Threads running engine calls (requests wait on the engine's own lock beyond one).
ENGINE_THREADS = 4


def build_engine(settings: RolloutSettings) -> GenerationEngine:
    """The engine named by ``settings.engine``, with its model loaded."""
    import torch

    torch.set_num_threads(settings.torch_threads)
    if settings.engine == "vllm":
        from services.rollout.vllm_engine import VllmEngine

        return VllmEngine(
            settings.model,
            settings.tokenizer,
            dtype=settings.dtype,
            version=settings.initial_version,
            max_prompt_tokens=settings.max_prompt_tokens,
            max_model_len=settings.max_model_len,
            kv_cache_gib=settings.kv_cache_gib,
            device=settings.device,
        )
    from services.rollout.transformers_engine import TransformersEngine

    return TransformersEngine(
        settings.model,
        settings.tokenizer,
        gguf_file=settings.gguf_file,
        device=settings.device,
        dtype=settings.dtype,
        version=settings.initial_version,
        max_prompt_tokens=settings.max_prompt_tokens,
        batch_rows=settings.batch_rows,
        backend=settings.model_backend,
    )


@dataclass
class RunningService(ServesGrpc):
    """A started rollout service: its engine, gRPC endpoint, weights watcher and metrics."""

    settings: RolloutSettings
    engine: GenerationEngine
    endpoint: GrpcEndpoint
    executor: ThreadPoolExecutor
    watcher: WeightsWatcher | None
    metrics: GrpcMetrics | None = None
    metrics_http: WSGIServer | None = None
    metrics_port: int | None = None

    async def drain(self, grace_s: float) -> None:
        """``stop``'s drain: the watcher (no reload mid-drain), the gRPC endpoint, the engine
        threads and the engine, then the metrics server."""
        if self.watcher is not None:
            await self.watcher.stop()
        await self.endpoint.drain(grace_s)
        self.executor.shutdown(wait=True, cancel_futures=True)
        self.engine.close()
        if self.metrics_http is not None:
            self.metrics_http.shutdown()


def make_loader(loads: WeightLoads, published: Published) -> Callable[[int, str], Awaitable[bool]]:
    """The watcher's reload: the checks and the load of ``LoadWeights``; True when loaded,
    False (logged) when not, and the watcher tries again later."""

    async def load(version: int, path: str) -> bool:
        try:
            await loads.load(version, path, published)
        except (WeightsRefused, EngineError) as exc:
            log.error("weights version %d from %s not loaded: %s", version, path, exc)
            return False
        except Exception:  # a torn checkpoint: the previous weights stay in service
            log.exception("weights version %d from %s not loaded", version, path)
            return False
        return True

    return load


def published_of(watcher: WeightsWatcher | None) -> Published:
    """``LoadWeights``' view of the trainer's latest version: none without a watcher; a Redis
    that cannot be read refuses the load (UNAVAILABLE) rather than skip the check."""
    if watcher is None:
        return nothing_published

    async def published() -> int | None:
        try:
            return await watcher.published_version()
        except PublishedUnknown as exc:
            raise WeightsRefused(
                grpc.StatusCode.UNAVAILABLE,
                f"version: cannot read the trainer's published version now ({exc}); retry",
            ) from None

    return published


async def start_service(
    settings: RolloutSettings, engine: GenerationEngine | None = None
) -> RunningService:
    """Build the engine (unless given), start the gRPC server and the watcher; log the port."""
    loop = asyncio.get_running_loop()
    settings.check_exposure("rollout")  # before the model loads, not after
    eng = engine if engine is not None else await loop.run_in_executor(None, build_engine, settings)
    executor = ThreadPoolExecutor(max_workers=ENGINE_THREADS, thread_name_prefix="rollout-engine")
    metrics = rollout_metrics()
    loads = WeightLoads(eng, executor, WeightsGate(settings.weights_roots))
    watcher = None
    if settings.redis_url:
        watcher = WeightsWatcher(
            url=settings.redis_url,
            key=settings.weights_key,
            channel=settings.weights_channel,
            poll_s=settings.watch_poll_s,
            served=lambda: eng.policy_version,
        )
        watcher.load = make_loader(loads, published_of(watcher))
    endpoint = create_server(
        settings,
        eng,
        executor,
        loads,
        interceptors=(metrics.interceptor(),),
        published=published_of(watcher),
    )
    metrics_http, metrics_port = metrics.start_http(settings.host, settings.metrics_port)
    await endpoint.start()
    if watcher is not None:
        watcher.start()
    log.info(
        "rollout service ready: gRPC %s, metrics port %s, engine %s, model %s, version %d, "
        "watcher %s, weights roots %s, auth %s",
        endpoint.address,
        metrics_port,
        settings.engine,
        settings.model,
        eng.policy_version,
        "on" if watcher else "off",
        [str(r) for r in settings.weights_roots] or "none (no new weights load)",
        settings.auth_summary(),
    )
    return RunningService(
        settings, eng, endpoint, executor, watcher, metrics, metrics_http, metrics_port
    )


async def serve(settings: RolloutSettings) -> None:
    """Serve until SIGTERM/SIGINT, then drain gracefully."""
    await serve_until_signal(await start_service(settings))
