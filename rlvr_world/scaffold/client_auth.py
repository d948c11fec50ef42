"""Credentials on the client side: every call of a channel carries the token, over TLS if asked.

``ClientAuth.from_env()`` reads the shared variables a local stack or a deployment sets once:
``RLVR_API_TOKEN`` (bearer token), ``RLVR_TLS_ROOT_CERT`` (CA that signed the servers'
certificates; set: TLS), ``RLVR_TLS_CLIENT_CERT`` + ``RLVR_TLS_CLIENT_KEY`` (mTLS). Explicit
arguments win over the environment. ``channel(target)`` / ``aio_channel(target)`` return a gRPC
channel whose every call sends ``authorization: Bearer <token>`` (a client interceptor, so call
sites need no ``metadata=``), secure when a root certificate is set.

``ensure_local_token()`` gives a local stack one random token, stored in ``RLVR_API_TOKEN`` of
this process, so the services it starts (which inherit the environment) and the clients it
builds agree on it without any flag.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

TOKEN_ENV = "RLVR_API_TOKEN"
ROOT_CERT_ENV = "RLVR_TLS_ROOT_CERT"
CLIENT_CERT_ENV = "RLVR_TLS_CLIENT_CERT"
CLIENT_KEY_ENV = "RLVR_TLS_CLIENT_KEY"
ChannelOptions = Sequence[tuple[str, Any]]


def _env_path(name: str) -> Path | None:
    value = os.environ.get(name, "").strip()
    return Path(value) if value else None


def ensure_local_token() -> str:
    """The token in ``RLVR_API_TOKEN``, after setting a fresh random one if there is none."""
    token = os.environ.get(TOKEN_ENV) or secrets.token_urlsafe(32)
    os.environ[TOKEN_ENV] = token
    return token


@dataclass(frozen=True)
class ClientAuth:
    """What a client sends: a bearer token, and TLS trust (plus a client certificate for mTLS)."""

    token: str | None = None
    root_cert: Path | None = None
    client_cert: Path | None = None
    client_key: Path | None = None

    def __post_init__(self) -> None:
        if (self.client_cert is None) != (self.client_key is None):
            raise ValueError("client_cert and client_key (mTLS) must be given together")

    @classmethod
    def from_env(
        cls,
        token: str | None = None,
        root_cert: str | Path | None = None,
        token_envs: Sequence[str] = (TOKEN_ENV,),
    ) -> ClientAuth:
        """Explicit values, else the environment (``token_envs`` in order, then the shared)."""
        if token is None:
            for name in (*token_envs, TOKEN_ENV):
                if os.environ.get(name):
                    token = os.environ[name]
                    break
        return cls(
            token=token or None,
            root_cert=Path(root_cert) if root_cert else _env_path(ROOT_CERT_ENV),
            client_cert=_env_path(CLIENT_CERT_ENV),
            client_key=_env_path(CLIENT_KEY_ENV),
        )

    @property
    def metadata(self) -> tuple[tuple[str, str], ...]:
        """The call metadata to send: the ``authorization`` header, or nothing without a token."""
        return (("authorization", f"Bearer {self.token}"),) if self.token else ()

    def credentials(self) -> grpc.ChannelCredentials | None:
        """TLS channel credentials, or None for plaintext."""
        if self.root_cert is None and self.client_cert is None:
            return None
        root = self.root_cert.read_bytes() if self.root_cert is not None else None
        if self.client_cert is not None and self.client_key is not None:
            return grpc.ssl_channel_credentials(
                root, self.client_key.read_bytes(), self.client_cert.read_bytes()
            )
        return grpc.ssl_channel_credentials(root)

    def channel(self, target: str, options: ChannelOptions = ()) -> grpc.Channel:
        """A blocking channel whose calls carry the token."""
        creds = self.credentials()
        if creds is not None:
            channel = grpc.secure_channel(target, creds, options=list(options))
        else:
            channel = grpc.insecure_channel(target, options=list(options))
        if not self.token:
            return channel
        return grpc.intercept_channel(channel, _SyncToken(self.metadata))

    def aio_channel(self, target: str, options: ChannelOptions = ()) -> grpc.aio.Channel:
        """An asyncio channel whose calls carry the token."""
        interceptors = [*_aio_token_interceptors(self.metadata)] if self.token else None
        creds = self.credentials()
        if creds is not None:
            return grpc.aio.secure_channel(
                target, creds, options=list(options), interceptors=interceptors
            )
        return grpc.aio.insecure_channel(target, options=list(options), interceptors=interceptors)


# grpcio ships no type stubs: its names below are Any to mypy (they still say what flows).
Metadata = tuple[tuple[str, str], ...]
#: What a client interceptor calls to go on with the call (the request is a message, or an
#: iterator of them for a client stream), and the call object it gets back.
Continue = Callable[[grpc.ClientCallDetails, Any], grpc.Call]
AioContinue = Callable[[grpc.aio.ClientCallDetails, Any], Awaitable[grpc.aio.Call]]


def _with_metadata(
    details: grpc.aio.ClientCallDetails, metadata: Metadata
) -> grpc.aio.ClientCallDetails:
    """``details`` with ``metadata`` added to the call's own."""
    own = tuple(details.metadata or ())
    return details._replace(metadata=grpc.aio.Metadata(*own, *metadata))


# the classes below subclass grpcio classes, Any to mypy (no stubs): hence their ignore[misc]
class _CallDetails(grpc.ClientCallDetails):  # type: ignore[misc]
    def __init__(self, base: grpc.ClientCallDetails, metadata: Metadata) -> None:
        self.method = base.method
        self.timeout = base.timeout
        self.metadata = tuple(base.metadata or ()) + metadata
        self.credentials = getattr(base, "credentials", None)
        self.wait_for_ready = getattr(base, "wait_for_ready", None)
        self.compression = getattr(base, "compression", None)


class _SyncToken(
    grpc.UnaryUnaryClientInterceptor,  # type: ignore[misc]
    grpc.UnaryStreamClientInterceptor,  # type: ignore[misc]
    grpc.StreamUnaryClientInterceptor,  # type: ignore[misc]
    grpc.StreamStreamClientInterceptor,  # type: ignore[misc]
):
    def __init__(self, metadata: Metadata) -> None:
        self._metadata = metadata

    def intercept_unary_unary(
        self, continuation: Continue, details: grpc.ClientCallDetails, request: Any
    ) -> grpc.Call:
        """The call with the token added to its metadata."""
        return continuation(_CallDetails(details, self._metadata), request)

    # grpc calls every kind's hook positionally with (continuation, details, request), the
    # request being an iterator of messages for a client stream: one body serves all four
    intercept_unary_stream = intercept_unary_unary
    intercept_stream_unary = intercept_unary_unary
    intercept_stream_stream = intercept_unary_unary


def _aio_token_interceptors(metadata: Metadata) -> list[grpc.aio.ClientInterceptor]:
    """One asyncio interceptor per call kind, all with the same hook: grpc.aio files each
    interceptor under the first call kind's base class it is an instance of, and calls the hook
    positionally with (continuation, details, request or request iterator)."""

    async def intercept(
        self: object, continuation: AioContinue, details: grpc.aio.ClientCallDetails, request: Any
    ) -> grpc.aio.Call:
        return await continuation(_with_metadata(details, metadata), request)

    bases = {
        "unary_unary": grpc.aio.UnaryUnaryClientInterceptor,
        "unary_stream": grpc.aio.UnaryStreamClientInterceptor,
        "stream_unary": grpc.aio.StreamUnaryClientInterceptor,
        "stream_stream": grpc.aio.StreamStreamClientInterceptor,
    }
    return [
        type(f"Aio{base.__name__}", (base,), {f"intercept_{kind}": intercept})()
        for kind, base in bases.items()
    ]
