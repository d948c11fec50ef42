"""Run one decoder server: the tokenizer and the gRPC server.

``start_service(settings)`` loads the tokenizer, binds (port 0 resolved), starts, and returns a
``RunningService``; ``RunningService.stop()`` drains (``rlvr_world.scaffold.grpc_server``): health
goes NOT_SERVING, new calls get UNAVAILABLE and the ones running get ``settings.grace_s``.
``serve(settings)`` does this until SIGTERM or SIGINT.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from wsgiref.simple_server import WSGIServer

from rlvr_world.scaffold.grpc_server import GrpcEndpoint, ServesGrpc
from rlvr_world.scaffold.metrics import GrpcMetrics
from rlvr_world.scaffold.thread import serve_until_signal
from services.decoder.frames import FrameDecoder
from services.decoder.grpc_server import create_server
from services.decoder.metrics import decoder_metrics
from services.decoder.settings import DecoderSettings
from services.decoder.text import TextDecoder

log = logging.getLogger(__name__)


@dataclass
class RunningService(ServesGrpc):
    """A started decoder service: its tokenizers, gRPC endpoint and metrics server."""

    settings: DecoderSettings
    decoder: TextDecoder
    endpoint: GrpcEndpoint
    metrics: GrpcMetrics | None = None
    metrics_http: WSGIServer | None = None
    metrics_port: int | None = None
    frames: FrameDecoder | None = None

    async def drain(self, grace_s: float) -> None:
        """``stop``'s drain: the gRPC endpoint, then the metrics server."""
        await self.endpoint.drain(grace_s)
        if self.metrics_http is not None:
            self.metrics_http.shutdown()


async def start_service(settings: DecoderSettings) -> RunningService:
    """Load the tokenizer, start the gRPC server; log the port."""
    loop = asyncio.get_running_loop()
    settings.check_exposure("decoder")  # before the tokenizer loads, not after
    decoder = await loop.run_in_executor(None, TextDecoder, settings.tokenizer, settings.gguf_file)
    frames = None
    if settings.video_tokenizer is not None:
        import torch

        torch.set_num_threads(settings.torch_threads)
        frames = await loop.run_in_executor(
            None,
            FrameDecoder,
            settings.video_tokenizer,
            settings.frame_batch,
            settings.max_frames,
            settings.device,
        )
    metrics = decoder_metrics()
    endpoint = create_server(settings, decoder, (metrics.interceptor(),), frames)
    metrics_http, metrics_port = metrics.start_http(settings.host, settings.metrics_port)
    await endpoint.start()
    log.info(
        "decoder service ready: gRPC %s, metrics port %s, auth %s, tokenizer %s (%d ids), "
        "frames: %s",
        endpoint.address,
        metrics_port,
        settings.auth_summary(),
        settings.tokenizer,
        decoder.vocab_size,
        "not loaded"
        if frames is None
        else f"{frames.name} ({frames.codebook_size} codes, {frames.tokens_per_frame}/frame)",
    )
    return RunningService(
        settings,
        decoder,
        endpoint,
        metrics,
        metrics_http,
        metrics_port,
        frames,
    )


async def serve(settings: DecoderSettings) -> None:
    """Serve until SIGTERM/SIGINT, then drain gracefully."""
    await serve_until_signal(await start_service(settings))
