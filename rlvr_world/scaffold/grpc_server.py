"""A service's gRPC server: limits, admission, health, reflection, binding and a drain that answers.

``build_grpc(settings, service_name, register, ...)`` checks the bind rule
(``ServiceSettings.check_exposure``), builds a ``grpc.aio`` server whose first interceptor is
``admission.Admission`` (token, drain, parsing), lets ``register(server)`` add the servicer,
adds the standard health service and reflection, and binds ``host:grpc_port`` over TLS / mTLS
when configured (port 0 picks a free one). It returns a ``GrpcEndpoint``.

``GrpcEndpoint.drain(grace_s)`` is the graceful stop: new calls get ``UNAVAILABLE`` (retryable),
then health goes NOT_SERVING, the calls already running are waited for up to the grace period,
and only then is the server stopped (whatever is left after the grace is cancelled). Stopping the
server at once with a grace period instead cancelled calls that had arrived but were not yet
handed to the servicer.

``ServesGrpc`` is the base of every service's ``RunningService``: its ``stop(grace_s)`` resolves the
grace period, logs, and runs the service's ``drain`` (the endpoint's drain and the service's own
resources, in the order the service documents there).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from rlvr_world.scaffold.admission import Admission, OnReject
from rlvr_world.scaffold.auth import grpc_server_credentials
from rlvr_world.scaffold.settings import ServiceSettings

log = logging.getLogger(__name__)


def new_server(
    max_message_bytes: int,
    interceptors: Sequence[grpc.aio.ServerInterceptor] = (),
    options: Sequence[tuple[str, Any]] = (),
) -> grpc.aio.Server:
    """An unstarted server whose send/receive limits are ``max_message_bytes``; ``options`` are
    further gRPC channel arguments of the service (e.g. ``grpc.max_connection_age_ms``)."""
    return grpc.aio.server(
        interceptors=list(interceptors),
        options=[
            ("grpc.max_receive_message_length", max_message_bytes),
            ("grpc.max_send_message_length", max_message_bytes),
            ("grpc.so_reuseport", 0),
            *options,
        ],
    )


def add_health_and_reflection(
    server: grpc.aio.Server, service_name: str
) -> health.aio.HealthServicer:
    """Register ``grpc.health.v1.Health`` and reflection for ``service_name``; return the health
    servicer."""
    health_servicer = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    reflection.enable_server_reflection(
        (
            service_name,
            health_pb2.DESCRIPTOR.services_by_name["Health"].full_name,
            reflection.SERVICE_NAME,
        ),
        server,
    )
    return health_servicer


def bind(
    server: grpc.aio.Server, host: str, port: int, creds: grpc.ServerCredentials | None = None
) -> int:
    """Bind ``host:port`` (0 picks a free port), over TLS when ``creds`` are given."""
    address = f"{host}:{port}"
    if creds is not None:
        bound = int(server.add_secure_port(address, creds))
    else:
        bound = int(server.add_insecure_port(address))
    if bound == 0:
        raise OSError(f"gRPC could not bind {address}")
    return bound


async def set_serving(
    health_servicer: health.aio.HealthServicer, service_name: str, serving: bool
) -> None:
    """Report SERVING / NOT_SERVING for the whole server and for ``service_name``."""
    status = (
        health_pb2.HealthCheckResponse.SERVING
        if serving
        else health_pb2.HealthCheckResponse.NOT_SERVING
    )
    for name in ("", service_name):
        await health_servicer.set(name, status)


@dataclass
class GrpcEndpoint:
    """A bound (not yet started) gRPC server of one service, with its admission and health."""

    server: grpc.aio.Server
    port: int
    host: str
    service_name: str
    health: health.aio.HealthServicer
    admission: Admission

    @property
    def address(self) -> str:
        """``host:port`` as bound."""
        return f"{self.host}:{self.port}"

    async def start(self) -> None:
        """Start serving, then report SERVING."""
        await self.server.start()
        await self.set_serving(True)

    async def set_serving(self, serving: bool) -> None:
        """Report SERVING (True) or NOT_SERVING on the health service."""
        await set_serving(self.health, self.service_name, serving)

    async def drain(self, grace_s: float) -> None:
        """Refuse new calls, NOT_SERVING, wait for running ones (up to ``grace_s``), stop.

        Refusing comes first: ``set_serving`` yields to the event loop, and a client that saw
        NOT_SERVING must not then get a call admitted."""
        t0 = time.monotonic()
        self.admission.start_drain()
        await self.set_serving(False)
        idle = await self.admission.wait_idle(grace_s)
        if not idle:
            log.warning(
                "%d call(s) still running after the %.1fs grace; cancelling them",
                self.admission.in_flight,
                grace_s,
            )
        await self.server.stop(max(0.0, grace_s - (time.monotonic() - t0)) if idle else 0)


class ServesGrpc:
    """What every service's ``RunningService`` shares (it has ``settings`` and ``endpoint``): the
    address properties and ``stop``; the service writes its drain order in ``drain``."""

    settings: ServiceSettings
    endpoint: GrpcEndpoint

    async def stop(self, grace_s: float | None = None) -> None:
        """Drain: refuse new work, let in-flight calls finish within the grace period, stop.
        ``grace_s`` None: ``settings.grace_s``. Logged under the service's own module."""
        grace = self.settings.grace_s if grace_s is None else grace_s
        service_log = logging.getLogger(type(self).__module__)
        service_log.info("draining (grace %.1fs)", grace)
        await self.drain(grace)
        service_log.info("stopped")

    async def drain(self, grace_s: float) -> None:
        """The service's drain, in its order; here only the gRPC endpoint's (``GrpcEndpoint``)."""
        await self.endpoint.drain(grace_s)

    @property
    def grpc_port(self) -> int:
        """The bound gRPC port (the free one picked when 0 was asked for)."""
        return self.endpoint.port

    @property
    def grpc_server(self) -> grpc.aio.Server:
        """The service's ``grpc.aio`` server."""
        return self.endpoint.server

    @property
    def grpc_address(self) -> str:
        """``host:port`` for clients."""
        return self.endpoint.address


def build_grpc(
    settings: ServiceSettings,
    service_name: str,
    register: Callable[[grpc.aio.Server], None],
    *,
    interceptors: Sequence[grpc.aio.ServerInterceptor] = (),
    on_reject: OnReject | None = None,
    options: Sequence[tuple[str, Any]] = (),
) -> GrpcEndpoint:
    """Check the bind rule, build, register, bind (module docstring). Call inside the loop.
    ``options``: the service's own gRPC server arguments (``new_server``)."""
    settings.check_exposure(service_name.rsplit(".", 1)[-1])
    admission = Admission(settings.token(), on_reject)
    server = new_server(settings.max_payload_bytes, [admission, *interceptors], options)
    register(server)
    health_servicer = add_health_and_reflection(server, service_name)
    port = bind(server, settings.host, settings.grpc_port, grpc_server_credentials(settings))
    return GrpcEndpoint(server, port, settings.host, service_name, health_servicer, admission)
