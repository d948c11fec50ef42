"""Run one decoder server: the tokenizer and the gRPC server.

``start_service(settings)`` loads the tokenizer, binds (port 0 resolved), starts, and returns a
``RunningService``; ``RunningService.stop()`` drains: health goes NOT_SERVING, the server refuses
new calls and in-flight ones get ``settings.grace_s``. ``serve(settings)`` does this until SIGTERM
or SIGINT.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Any

import grpc
from grpc_health.v1 import health

from rlvr_world.service_metrics import GrpcMetrics
from rlvr_world.service_thread import serve_until_signal
from services.decoder.frames import FrameDecoder
from services.decoder.grpc_server import create_server, set_serving
from services.decoder.metrics import decoder_metrics
from services.decoder.settings import DecoderSettings
from services.decoder.text import TextDecoder

log = logging.getLogger(__name__)


@dataclass
class RunningService:
    settings: DecoderSettings
    decoder: TextDecoder
    grpc_server: grpc.aio.Server
    grpc_port: int
    health: health.aio.HealthServicer
    metrics: GrpcMetrics | None = None
    metrics_http: Any = None
    metrics_port: int | None = None
    frames: FrameDecoder | None = None

    @property
    def grpc_address(self) -> str:
        return f"{self.settings.host}:{self.grpc_port}"

    async def stop(self, grace_s: float | None = None) -> None:
        """Drain: refuse new work, let in-flight calls finish within the grace period, stop."""
        grace = self.settings.grace_s if grace_s is None else grace_s
        log.info("draining (grace %.1fs)", grace)
        await set_serving(self.health, False)
        await self.grpc_server.stop(grace)
        if self.metrics_http is not None:
            self.metrics_http.shutdown()
        log.info("stopped")


async def start_service(settings: DecoderSettings) -> RunningService:
    """Load the tokenizer, start the gRPC server; log the port."""
    loop = asyncio.get_running_loop()
    decoder = await loop.run_in_executor(None, TextDecoder, settings.tokenizer, settings.gguf_file)
    frames = None
    if settings.video_tokenizer is not None:
        import torch

        torch.set_num_threads(settings.torch_threads)
        frames = await loop.run_in_executor(
            None, FrameDecoder, settings.video_tokenizer, settings.frame_batch, settings.max_frames
        )
    metrics = decoder_metrics()
    server, port, health_servicer = create_server(
        settings, decoder, (metrics.interceptor(),), frames
    )
    metrics_http, metrics_port = None, None
    if settings.metrics_port is not None:
        metrics_http, metrics_port = metrics.start_http(settings.host, settings.metrics_port)
    await server.start()
    await set_serving(health_servicer, True)
    log.info(
        "decoder service ready: gRPC %s:%d, metrics port %s, tokenizer %s (%d ids), frames: %s",
        settings.host,
        port,
        metrics_port,
        settings.tokenizer,
        decoder.vocab_size,
        "not loaded"
        if frames is None
        else f"{frames.name} ({frames.codebook_size} codes, {frames.tokens_per_frame}/frame)",
    )
    return RunningService(
        settings,
        decoder,
        server,
        port,
        health_servicer,
        metrics,
        metrics_http,
        metrics_port,
        frames,
    )


async def serve(settings: DecoderSettings) -> None:
    """Serve until SIGTERM/SIGINT, then drain gracefully."""
    await serve_until_signal(await start_service(settings))
