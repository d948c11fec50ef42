"""The gRPC interceptor every call of a service passes: token, drain, in-flight count, parsing.

One interceptor rather than several, because each wraps every call on the service's event loop.
For each method outside ``open_prefixes`` (the health service and reflection):

1. **Token**: without ``authorization: Bearer <token>`` (when a token is set) the call is refused
   with ``UNAUTHENTICATED`` before its request is parsed.
2. **Drain**: once ``start_drain()`` was called, new calls are refused with ``UNAVAILABLE`` (safe
   to retry on another replica) while the calls already running finish; ``wait_idle`` waits for
   them (``grpc_server.GrpcEndpoint.drain``).
3. **Parsing**: the request message is parsed here, not by gRPC, so malformed bytes get
   ``INVALID_ARGUMENT`` naming the message type instead of gRPC's ``UNKNOWN``. A handler
   registered without a deserializer (it takes raw bytes) is left to parse its own; a
   stream of requests is parsed message by message, a malformed one ending the call the same way.

What it does not do: rate limiting, per-method permissions (one token opens every method).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeAlias

import grpc
from google.protobuf.message import Message

from rlvr_world.scaffold.auth import UNAUTHENTICATED_MESSAGE, bearer_matches
from rlvr_world.scaffold.interceptor import HandlerInterceptor

log = logging.getLogger(__name__)
OPEN_PREFIXES: tuple[str, ...] = (
    "/grpc.health.v1.Health/",
    "/grpc.reflection.v1alpha.ServerReflection/",
    "/grpc.reflection.v1.ServerReflection/",
)
DRAINING_MESSAGE = "server is draining (shutting down); retry on another replica or after restart"
#: A drain waits this long with nothing in flight before it stops the server, so calls admitted
#: but not yet started are counted.
SETTLE_S = 0.1
Deserializer = Callable[[bytes], Message]
#: (reason) for each refused call: "unauthenticated", "draining", "malformed".
OnReject = Callable[[str], None]
#: A message as a servicer method takes or returns it: parsed, or raw bytes where the method was
#: registered without a (de)serializer.
Payload: TypeAlias = Message | bytes
Context: TypeAlias = grpc.aio.ServicerContext
#: The four behaviours a ``grpc.RpcMethodHandler`` carries, by request and response cardinality.
UnaryUnary = Callable[[Payload, Context], Awaitable[Payload]]
UnaryStream = Callable[[Payload, Context], AsyncIterator[Payload]]
StreamUnary = Callable[[AsyncIterator[Payload], Context], Awaitable[Payload]]
StreamStream = Callable[[AsyncIterator[Payload], Context], AsyncIterator[Payload]]


async def _parse(raw: bytes, parse: Deserializer, context: Context) -> Message:
    try:
        return parse(raw)
    except Exception as exc:  # DecodeError, invalid UTF-8 in a string field, ...
        name = getattr(getattr(parse, "__self__", None), "__name__", "request")
        await context.abort(
            grpc.StatusCode.INVALID_ARGUMENT,
            f"request: malformed {name} message ({type(exc).__name__})",
        )
        raise AssertionError("unreachable: abort raises") from exc


def _refusal(
    handler: grpc.RpcMethodHandler, code: grpc.StatusCode, message: str
) -> grpc.RpcMethodHandler:
    """A handler of the same kind as ``handler`` that refuses without reading the request."""

    async def unary(_req: object, ctx: Context) -> None:
        await ctx.abort(code, message)

    async def streaming(_req: object, ctx: Context) -> AsyncIterator[None]:
        await ctx.abort(code, message)
        yield None  # pragma: no cover - abort raises

    kw = {"response_serializer": handler.response_serializer}
    if handler.unary_unary:
        return grpc.unary_unary_rpc_method_handler(unary, **kw)
    if handler.unary_stream:
        return grpc.unary_stream_rpc_method_handler(streaming, **kw)
    if handler.stream_unary:
        return grpc.stream_unary_rpc_method_handler(unary, **kw)
    return grpc.stream_stream_rpc_method_handler(streaming, **kw)


class Admission(HandlerInterceptor):
    """See the module docstring. Create it inside the service's event loop."""

    def __init__(
        self,
        token: str | None,
        on_reject: OnReject | None = None,
        open_prefixes: tuple[str, ...] = OPEN_PREFIXES,
    ) -> None:
        self._token = token
        self._on_reject = on_reject
        self._open = open_prefixes
        self.in_flight = 0
        self.draining = False
        self._last_change = time.monotonic()

    def start_drain(self) -> None:
        """Refuse every new call from now on with ``UNAVAILABLE``; running calls go on."""
        self.draining = True

    async def wait_idle(self, timeout_s: float) -> bool:
        """Until no call has been in flight for ``SETTLE_S`` (True) or ``timeout_s`` (False)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.in_flight == 0 and time.monotonic() - self._last_change >= SETTLE_S:
                return True
            await asyncio.sleep(0.02)
        return self.in_flight == 0

    def _reject(self, reason: str) -> None:
        if self._on_reject is not None:
            self._on_reject(reason)

    def wrap(
        self, handler: grpc.RpcMethodHandler, details: grpc.HandlerCallDetails
    ) -> grpc.RpcMethodHandler:
        """``handler`` behind the token and drain checks, counted and parsed (module docstring);
        an open method (health, reflection) unchanged."""
        if str(details.method).startswith(self._open):
            return handler
        if self._token is not None:
            header = dict(details.invocation_metadata or ()).get("authorization")
            if not bearer_matches(header, self._token):
                self._reject("unauthenticated")
                return _refusal(handler, grpc.StatusCode.UNAUTHENTICATED, UNAUTHENTICATED_MESSAGE)
        if self.draining:
            self._reject("draining")
            return _refusal(handler, grpc.StatusCode.UNAVAILABLE, DRAINING_MESSAGE)
        return self._tracked(handler)

    def _enter(self) -> None:
        self.in_flight += 1
        self._last_change = time.monotonic()

    def _exit(self) -> None:
        self.in_flight -= 1
        self._last_change = time.monotonic()

    def _tracked(self, handler: grpc.RpcMethodHandler) -> grpc.RpcMethodHandler:
        """``handler`` counted while it runs, its request(s) parsed here (module docstring)."""
        parse: Deserializer | None = handler.request_deserializer
        kw = {"response_serializer": handler.response_serializer}
        if handler.unary_unary or handler.unary_stream:
            return self._unary_request(handler, parse, kw)

        def requests(raw_iter: AsyncIterator[bytes], ctx: Context) -> AsyncIterator[Payload]:
            if parse is None:
                return raw_iter

            async def parsed() -> AsyncIterator[Message]:
                async for raw in raw_iter:
                    yield await _parse(raw, parse, ctx)

            return parsed()

        if handler.stream_unary:
            inner_unary: StreamUnary = handler.stream_unary

            async def stream_unary(raw_iter: AsyncIterator[bytes], ctx: Context) -> Payload:
                self._enter()
                try:
                    return await inner_unary(requests(raw_iter, ctx), ctx)
                finally:
                    self._exit()

            return grpc.stream_unary_rpc_method_handler(stream_unary, **kw)
        inner_stream: StreamStream | None = handler.stream_stream
        assert inner_stream is not None

        async def stream_stream(
            raw_iter: AsyncIterator[bytes], ctx: Context
        ) -> AsyncIterator[Payload]:
            self._enter()
            try:
                async for resp in inner_stream(requests(raw_iter, ctx), ctx):
                    yield resp
            finally:
                self._exit()

        return grpc.stream_stream_rpc_method_handler(stream_stream, **kw)

    def _unary_request(
        self, handler: grpc.RpcMethodHandler, parse: Deserializer | None, kw: dict[str, Any]
    ) -> grpc.RpcMethodHandler:
        if handler.unary_unary:
            inner: UnaryUnary = handler.unary_unary

            async def unary_unary(raw: bytes, ctx: Context) -> Payload:
                self._enter()
                try:
                    request = raw if parse is None else await _parse(raw, parse, ctx)
                    return await inner(request, ctx)
                finally:
                    self._exit()

            return grpc.unary_unary_rpc_method_handler(unary_unary, **kw)
        inner_gen: UnaryStream = handler.unary_stream

        async def unary_stream(raw: bytes, ctx: Context) -> AsyncIterator[Payload]:
            self._enter()
            try:
                request = raw if parse is None else await _parse(raw, parse, ctx)
                async for resp in inner_gen(request, ctx):
                    yield resp
            finally:
                self._exit()

        return grpc.unary_stream_rpc_method_handler(unary_stream, **kw)
