"""The shape every server interceptor of the scaffold shares: look the handler up, then wrap it.

``HandlerInterceptor.intercept_service`` asks gRPC for the method's handler and, when there is
one, hands it to the subclass's ``wrap`` (admission: the token, the drain and the in-flight
count; metrics: latency and status). An unknown method (no handler) passes through untouched,
so gRPC answers ``UNIMPLEMENTED`` itself.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import grpc

#: What gRPC passes an interceptor to look a method's handler up.
Continuation = Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]]


# grpcio ships no type stubs: its classes are Any to mypy, and subclassing Any needs the ignore.
class HandlerInterceptor(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    """A server interceptor that wraps each method's handler (``wrap``)."""

    async def intercept_service(
        self, continuation: Continuation, details: grpc.HandlerCallDetails
    ) -> grpc.RpcMethodHandler:
        """The method's handler wrapped by ``wrap``; None (an unknown method) passes through."""
        handler = await continuation(details)
        return handler if handler is None else self.wrap(handler, details)

    def wrap(
        self, handler: grpc.RpcMethodHandler, details: grpc.HandlerCallDetails
    ) -> grpc.RpcMethodHandler:
        """The handler that runs instead of ``handler`` for the call ``details`` describes."""
        raise NotImplementedError
