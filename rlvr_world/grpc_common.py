"""gRPC server plumbing shared by the reward, rollout and decoder services.

A new ``grpc.aio`` server with message limits, the standard health service plus server reflection,
binding (optionally over TLS) with a clear error, and health status flips for graceful drains.
Each service keeps its own servicer; only this boilerplate is shared (services never import each
other).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection


def new_server(max_message_bytes: int, interceptors: Sequence[Any] = ()) -> grpc.aio.Server:
    """An unstarted server whose send/receive limits are ``max_message_bytes``."""
    return grpc.aio.server(
        interceptors=list(interceptors),
        options=[
            ("grpc.max_receive_message_length", max_message_bytes),
            ("grpc.max_send_message_length", max_message_bytes),
            ("grpc.so_reuseport", 0),
        ],
    )


def add_health_and_reflection(server: grpc.aio.Server, service_name: str) -> Any:
    """Register ``grpc.health.v1.Health`` and reflection for ``service_name``; return the health
    servicer (``health.aio.HealthServicer``)."""
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
    server: grpc.aio.Server,
    host: str,
    port: int,
    tls_cert: Path | None = None,
    tls_key: Path | None = None,
) -> int:
    """Bind ``host:port`` (0 picks a free port), over TLS when both PEM paths are given."""
    address = f"{host}:{port}"
    if tls_cert is not None and tls_key is not None:
        creds = grpc.ssl_server_credentials([(tls_key.read_bytes(), tls_cert.read_bytes())])
        bound = int(server.add_secure_port(address, creds))
    else:
        bound = int(server.add_insecure_port(address))
    if bound == 0:
        raise OSError(f"gRPC could not bind {address}")
    return bound


async def set_serving(health_servicer: Any, service_name: str, serving: bool) -> None:
    """Report SERVING / NOT_SERVING for the whole server and for ``service_name``."""
    status = (
        health_pb2.HealthCheckResponse.SERVING
        if serving
        else health_pb2.HealthCheckResponse.NOT_SERVING
    )
    for name in ("", service_name):
        await health_servicer.set(name, status)
