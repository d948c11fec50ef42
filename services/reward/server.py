"""Run one reward worker: the gRPC server and the HTTP gateway in one event loop, one scoring pool.

``start_service(settings)`` starts everything and returns a ``RunningService`` (ports bound, port 0
resolved); ``RunningService.stop()`` drains gracefully: health goes NOT_SERVING and ``/readyz`` 503,
both servers stop accepting, in-flight calls get ``settings.grace_s`` to finish, then the pool
shuts down. ``serve(settings)`` does this until SIGTERM or SIGINT.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import Iterator
from dataclasses import dataclass

import grpc
import uvicorn
from fastapi import FastAPI
from grpc_health.v1 import health

from rlvr_world.service_thread import serve_until_signal
from services.reward.engine import RewardEngine
from services.reward.grpc_server import create_server, set_serving
from services.reward.http.router import create_app
from services.reward.http.serving import RewardServing
from services.reward.metrics import RewardMetrics
from services.reward.settings import RewardSettings

log = logging.getLogger(__name__)


class _Uvicorn(uvicorn.Server):
    """uvicorn without its own signal handling: ``serve()`` owns SIGTERM for both servers."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


def bind_socket(host: str, port: int) -> socket.socket:
    """A listening TCP socket (port 0: a free one), for uvicorn."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP explicitly: asyncio sets TCP_NODELAY on accepted connections only when the
    # listening socket says so (proto 0 left Nagle on: +40 ms per keep-alive request).
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


@dataclass
class RunningService:
    settings: RewardSettings
    engine: RewardEngine
    metrics: RewardMetrics
    grpc_server: grpc.aio.Server
    grpc_port: int
    health: health.aio.HealthServicer
    http: _Uvicorn
    http_port: int
    http_task: asyncio.Task[None]
    app: FastAPI

    @property
    def grpc_address(self) -> str:
        return f"{self.settings.host}:{self.grpc_port}"

    @property
    def http_url(self) -> str:
        return f"http://{self.settings.host}:{self.http_port}"

    async def stop(self, grace_s: float | None = None) -> None:
        """Drain: refuse new work, let in-flight calls finish within the grace period, stop."""
        grace = self.settings.grace_s if grace_s is None else grace_s
        log.info("draining (grace %.1fs)", grace)
        self.app.state.draining = True
        await set_serving(self.health, False)
        self.http.config.timeout_graceful_shutdown = max(1, round(grace))
        self.http.should_exit = True
        await asyncio.gather(self.grpc_server.stop(grace), self.http_task)
        await asyncio.get_running_loop().run_in_executor(None, self.engine.close)
        log.info("stopped")


async def start_service(settings: RewardSettings) -> RunningService:
    """Start the pool, the gRPC server and the HTTP gateway; log the chosen ports."""
    metrics = RewardMetrics()
    engine = RewardEngine(settings, metrics)
    await engine.start()
    server, grpc_port, health_servicer = create_server(settings, engine, metrics)
    await server.start()
    await set_serving(health_servicer, True)
    app = create_app(RewardServing(engine, metrics, settings), settings, metrics)
    sock = bind_socket(settings.host, settings.http_port)
    http_port = int(sock.getsockname()[1])
    config = uvicorn.Config(
        app,
        log_level="warning",
        lifespan="off",
        timeout_graceful_shutdown=max(1, round(settings.grace_s)),
        access_log=False,
    )
    http = _Uvicorn(config)
    http_task = asyncio.create_task(http.serve(sockets=[sock]))
    while not http.started and not http_task.done():
        await asyncio.sleep(0.01)
    if http_task.done():
        await http_task
        raise OSError(f"HTTP gateway failed to start on {settings.host}:{http_port}")
    log.info(
        "reward service ready: gRPC %s:%d, HTTP http://%s:%d (%d scoring processes, auth %s)",
        settings.host,
        grpc_port,
        settings.host,
        http_port,
        settings.workers,
        "on" if settings.token() else "off",
    )
    return RunningService(
        settings,
        engine,
        metrics,
        server,
        grpc_port,
        health_servicer,
        http,
        http_port,
        http_task,
        app,
    )


async def serve(settings: RewardSettings) -> None:
    """Serve until SIGTERM/SIGINT, then drain gracefully."""
    await serve_until_signal(await start_service(settings))
