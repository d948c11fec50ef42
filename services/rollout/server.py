"""Run one rollout server: the engine, the gRPC server and (with ``redis_url``) the weights watcher.

``start_service(settings)`` loads the model, binds (port 0 resolved), starts, and returns a
``RunningService``; ``RunningService.stop()`` drains: health goes NOT_SERVING, the watcher stops,
the server refuses new calls and in-flight ones get ``settings.grace_s`` to finish.
``serve(settings)`` does this until SIGTERM or SIGINT.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import grpc
from grpc_health.v1 import health

from rlvr_world.service_metrics import GrpcMetrics
from rlvr_world.service_thread import serve_until_signal
from services.rollout.engine import EngineError, GenerationEngine
from services.rollout.grpc_server import create_server, set_serving
from services.rollout.metrics import rollout_metrics
from services.rollout.settings import RolloutSettings
from services.rollout.watcher import WeightsWatcher

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
    )


@dataclass
class RunningService:
    settings: RolloutSettings
    engine: GenerationEngine
    grpc_server: grpc.aio.Server
    grpc_port: int
    health: health.aio.HealthServicer
    executor: ThreadPoolExecutor
    watcher: WeightsWatcher | None
    metrics: GrpcMetrics | None = None
    metrics_http: Any = None
    metrics_port: int | None = None

    @property
    def grpc_address(self) -> str:
        return f"{self.settings.host}:{self.grpc_port}"

    async def stop(self, grace_s: float | None = None) -> None:
        """Drain: refuse new work, let in-flight calls finish within the grace period, stop."""
        grace = self.settings.grace_s if grace_s is None else grace_s
        log.info("draining (grace %.1fs)", grace)
        await set_serving(self.health, False)
        if self.watcher is not None:
            await self.watcher.stop()
        await self.grpc_server.stop(grace)
        self.executor.shutdown(wait=True, cancel_futures=True)
        self.engine.close()
        if self.metrics_http is not None:
            self.metrics_http.shutdown()
        log.info("stopped")


def make_loader(
    engine: GenerationEngine, executor: ThreadPoolExecutor
) -> Callable[[int, str], Awaitable[None]]:
    """The watcher's reload: ``engine.load_weights`` in a worker thread; failures are logged."""

    async def load(version: int, path: str) -> None:
        loop = asyncio.get_running_loop()
        try:
            await loop.run_in_executor(executor, engine.load_weights, version, path)
        except (EngineError, OSError, ValueError, RuntimeError) as exc:
            log.error("weights version %d from %s not loaded: %s", version, path, exc)

    return load


async def start_service(
    settings: RolloutSettings, engine: GenerationEngine | None = None
) -> RunningService:
    """Build the engine (unless given), start the gRPC server and the watcher; log the port."""
    loop = asyncio.get_running_loop()
    if engine is None:
        engine = await loop.run_in_executor(None, build_engine, settings)
    executor = ThreadPoolExecutor(max_workers=ENGINE_THREADS, thread_name_prefix="rollout-engine")
    metrics = rollout_metrics()
    server, port, health_servicer = create_server(
        settings, engine, executor, (metrics.interceptor(),)
    )
    metrics_http, metrics_port = None, None
    if settings.metrics_port is not None:
        metrics_http, metrics_port = metrics.start_http(settings.host, settings.metrics_port)
    await server.start()
    await set_serving(health_servicer, True)
    watcher = None
    if settings.redis_url:
        watcher = WeightsWatcher(
            url=settings.redis_url,
            key=settings.weights_key,
            channel=settings.weights_channel,
            poll_s=settings.watch_poll_s,
            load=make_loader(engine, executor),
            served=lambda: engine.policy_version,
        )
        watcher.start()
    log.info(
        "rollout service ready: gRPC %s:%d, metrics port %s, engine %s, model %s, version %d, "
        "watcher %s",
        settings.host,
        port,
        metrics_port,
        settings.engine,
        settings.model,
        engine.policy_version,
        "on" if watcher else "off",
    )
    return RunningService(
        settings,
        engine,
        server,
        port,
        health_servicer,
        executor,
        watcher,
        metrics,
        metrics_http,
        metrics_port,
    )


async def serve(settings: RolloutSettings) -> None:
    """Serve until SIGTERM/SIGINT, then drain gracefully."""
    await serve_until_signal(await start_service(settings))
