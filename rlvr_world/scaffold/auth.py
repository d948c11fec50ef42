"""Credentials on the server side: the bearer-token check, TLS / mTLS for gRPC and for HTTP.

``bearer_matches(header, token)``: ``Bearer <token>`` with the scheme in any case (RFC 7235 makes
auth schemes case-insensitive), compared in constant time. ``grpc_server_credentials`` and
``uvicorn_ssl`` turn a service's ``tls_cert`` / ``tls_key`` / ``tls_client_ca`` into what gRPC
and uvicorn take. ``TokenGate`` is an ASGI middleware that refuses a request without the token
with 401 before a byte of its body is read, so an unauthenticated caller cannot make the service
buffer a large body. The gRPC side of the token check is ``admission.Admission``.
"""

from __future__ import annotations

import hmac
import json
import ssl
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

import grpc

from rlvr_world.scaffold.settings import ServiceSettings

UNAUTHENTICATED_MESSAGE = (
    "authorization: missing or wrong bearer token (send the header 'authorization: Bearer <token>')"
)
#: ASGI callables, typed loosely as the ASGI spec does (messages are dicts).
Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


def bearer_matches(header: str | bytes | None, token: str) -> bool:
    """True when ``header`` is ``<scheme> <token>`` with scheme ``bearer`` in any case."""
    if not header:
        return False
    text = header.decode("latin-1") if isinstance(header, bytes) else header
    scheme, _, value = text.strip().partition(" ")
    given = value.strip().encode("utf-8", "replace")
    # compare even when the scheme is wrong, so the time does not tell which part failed
    same = hmac.compare_digest(given, token.encode("utf-8"))
    return same and scheme.lower() == "bearer"


def grpc_server_credentials(settings: ServiceSettings) -> grpc.ServerCredentials | None:
    """TLS credentials (mTLS when ``tls_client_ca`` is set), or None for plaintext."""
    if settings.tls_cert is None or settings.tls_key is None:
        return None
    pair = [(settings.tls_key.read_bytes(), settings.tls_cert.read_bytes())]
    if settings.tls_client_ca is None:
        return grpc.ssl_server_credentials(pair)
    return grpc.ssl_server_credentials(
        pair, root_certificates=settings.tls_client_ca.read_bytes(), require_client_auth=True
    )


def uvicorn_ssl(settings: ServiceSettings) -> dict[str, Any]:
    """``uvicorn.Config`` keyword arguments for TLS (and mTLS); empty for plaintext."""
    if settings.tls_cert is None or settings.tls_key is None:
        return {}
    kw: dict[str, Any] = {
        "ssl_certfile": str(settings.tls_cert),
        "ssl_keyfile": str(settings.tls_key),
    }
    if settings.tls_client_ca is not None:
        kw.update(ssl_ca_certs=str(settings.tls_client_ca), ssl_cert_reqs=ssl.CERT_REQUIRED)
    return kw


class TokenGate:
    """ASGI middleware: 401 unless ``authorization: Bearer <token>``, before the body is read.

    Paths in ``open_paths`` (probes, metrics, docs) pass without a token. ``on_reject`` is called
    for each refusal (a metric)."""

    def __init__(
        self,
        app: ASGIApp,
        token: str,
        open_paths: frozenset[str],
        on_reject: Callable[[], None] | None = None,
    ) -> None:
        self.app = app
        self.token = token
        self.open_paths = open_paths
        self.on_reject = on_reject

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("path") in self.open_paths:
            await self.app(scope, receive, send)
            return
        header = dict(scope.get("headers") or ()).get(b"authorization")
        if bearer_matches(header, self.token):
            await self.app(scope, receive, send)
            return
        if self.on_reject is not None:
            self.on_reject()
        body = json.dumps({"detail": UNAUTHENTICATED_MESSAGE}).encode()
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
            (b"www-authenticate", b"Bearer"),
            (b"connection", b"close"),  # the unread body must not be taken for the next request
        ]
        await send({"type": "http.response.start", "status": 401, "headers": headers})
        await send({"type": "http.response.body", "body": body})
