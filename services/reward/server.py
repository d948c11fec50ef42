"""Run one reward worker: the gRPC server and the HTTP gateway in one event loop, one scoring pool.

``start_service(settings)`` checks the bind rule (``rlvr_world.scaffold.settings``), starts
everything and returns a ``RunningService`` (ports bound, port 0 resolved). Both servers take the
same credentials: the bearer token (gRPC metadata, HTTP header) and the TLS / mTLS certificates.
``RunningService.stop()`` drains gracefully: health goes NOT_SERVING and ``/readyz`` 503, new gRPC
calls get UNAVAILABLE and the HTTP server stops accepting connections, the calls already running
get ``settings.grace_s`` to finish, then the pool shuts down. ``serve(settings)`` does this until
SIGTERM or SIGINT.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import uvicorn
from fastapi import FastAPI

from rlvr_world.scaffold.auth import uvicorn_ssl
from rlvr_world.scaffold.grpc_server import GrpcEndpoint, ServesGrpc
from rlvr_world.scaffold.thread import serve_until_signal
from services.reward.engine import RewardEngine
from services.reward.grpc_server import create_server
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
class RunningService(ServesGrpc):
    """A started reward service: engine, metrics, gRPC endpoint and HTTP gateway."""

    settings: RewardSettings
    engine: RewardEngine
    metrics: RewardMetrics
    endpoint: GrpcEndpoint
    http: _Uvicorn
    http_port: int
    http_task: asyncio.Task[None]
    app: FastAPI

    @property
    def http_url(self) -> str:
        """Base URL of the HTTP gateway (https with TLS)."""
        scheme = "https" if self.settings.tls_cert is not None else "http"
        return f"{scheme}://{self.settings.host}:{self.http_port}"

    async def drain(self, grace_s: float) -> None:
        """``stop``'s drain: ``/readyz`` 503, both servers drain together, then the pool."""
        self.app.state.draining = True
        self.http.config.timeout_graceful_shutdown = max(1, round(grace_s))
        self.http.should_exit = True
        await asyncio.gather(self.endpoint.drain(grace_s), self.http_task)
        await asyncio.get_running_loop().run_in_executor(None, self.engine.close)


def health_follower(endpoint: GrpcEndpoint) -> Callable[[bool], None]:
    """gRPC health follows the pool: NOT_SERVING while it is degraded, SERVING again after."""
    loop = asyncio.get_running_loop()
    pending: set[asyncio.Task[None]] = set()

    def follow(healthy: bool) -> None:
        if endpoint.admission.draining:
            return
        task = loop.create_task(endpoint.set_serving(healthy))
        pending.add(task)
        task.add_done_callback(pending.discard)

    return follow


async def start_service(settings: RewardSettings) -> RunningService:
    """Start the pool, the gRPC server and the HTTP gateway; log the chosen ports."""
    settings.check_exposure("reward")  # before the pool starts, not after
    metrics = RewardMetrics()
    engine = RewardEngine(settings, metrics)
    try:
        await engine.start()
    except BaseException:  # models.IdmUnavailable, a pool that cannot start: stop what started
        engine.close()
        raise
    endpoint = create_server(settings, engine, metrics)
    await endpoint.start()
    engine.on_health(health_follower(endpoint))
    app = create_app(RewardServing(engine, metrics, settings), settings, metrics)
    sock = bind_socket(settings.host, settings.http_port)
    http_port = int(sock.getsockname()[1])
    config = uvicorn.Config(
        app,
        log_level="warning",
        lifespan="off",
        timeout_graceful_shutdown=max(1, round(settings.grace_s)),
        access_log=False,
        **uvicorn_ssl(settings),
    )
    http = _Uvicorn(config)
    http_task = asyncio.create_task(http.serve(sockets=[sock]))
    while not http.started and not http_task.done():
        await asyncio.sleep(0.01)
    if http_task.done():
        await http_task
        raise OSError(f"HTTP gateway failed to start on {settings.host}:{http_port}")
    service = RunningService(settings, engine, metrics, endpoint, http, http_port, http_task, app)
    log.info(
        "reward service ready: gRPC %s, HTTP %s (%d scoring processes, auth %s)",
        endpoint.address,
        service.http_url,
        settings.workers,
        settings.auth_summary(),
    )
    return service


async def serve(settings: RewardSettings) -> None:
    """Serve until SIGTERM/SIGINT, then drain gracefully."""
    await serve_until_signal(await start_service(settings))
