"""Prometheus metrics of a gRPC service, recorded by a server interceptor, served on their own port.

``GrpcMetrics(prefix, count_tokens)`` holds, in a registry of its own, ``<prefix>_requests_total``
(by ``method`` and gRPC ``status``), ``<prefix>_request_latency_seconds`` (by ``method``) and
``<prefix>_<tokens_name>_total`` (tokens counted from each successful request/response pair by
``count_tokens``). ``interceptor()`` observes every unary-unary call of a ``grpc.aio`` server
without touching the servicer; ``start_http(host, port)`` serves ``/metrics`` from a daemon thread
(port 0 picks a free port; the port is ``settings.GrpcMetricsSettings.metrics_port``). Used by the
rollout and decoder services; the reward service has its own, richer metrics.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any
from wsgiref.simple_server import WSGIServer

import grpc
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.exposition import start_http_server

from rlvr_world.scaffold.admission import Context, Payload, UnaryUnary
from rlvr_world.scaffold.interceptor import HandlerInterceptor

LATENCY_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)

#: tokens in one successful call, from its request and response messages
TokenCounter = Callable[[str, Any, Any], int]


class GrpcMetrics:
    """Per-process metrics of one gRPC service."""

    def __init__(
        self, prefix: str, count_tokens: TokenCounter, tokens_name: str, tokens_help: str
    ) -> None:
        self.registry = CollectorRegistry()
        self.count_tokens = count_tokens
        self.requests = Counter(
            f"{prefix}_requests_total",
            "Finished gRPC calls by method and status code.",
            ["method", "status"],
            registry=self.registry,
        )
        self.latency = Histogram(
            f"{prefix}_request_latency_seconds",
            "Time to answer one gRPC call, by method.",
            ["method"],
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.tokens = Counter(
            f"{prefix}_{tokens_name}_total", tokens_help, ["method"], registry=self.registry
        )

    def observe(self, method: str, status: str, seconds: float, tokens: int) -> None:
        """Record one finished call: its status name, latency in seconds and tokens (0: none)."""
        self.requests.labels(method, status).inc()
        self.latency.labels(method).observe(seconds)
        if tokens:
            self.tokens.labels(method).inc(tokens)

    def render(self) -> bytes:
        """The registry in the Prometheus text exposition format."""
        return generate_latest(self.registry)

    def interceptor(self) -> grpc.aio.ServerInterceptor:
        """A server interceptor that observes every unary-unary call (others pass untouched)."""
        return _MetricsInterceptor(self)

    def start_http(self, host: str, port: int | None) -> tuple[WSGIServer | None, int | None]:
        """Serve ``/metrics`` on ``host:port`` from a daemon thread; the server and bound port.
        ``port`` None (a service's ``metrics_port`` unset): no server, ``(None, None)``."""
        if port is None:
            return None, None
        server, _thread = start_http_server(port, addr=host, registry=self.registry)
        return server, int(server.server_port)


def _status_name(code: grpc.StatusCode | None) -> str:
    return str((code or grpc.StatusCode.OK).name)


class _MetricsInterceptor(HandlerInterceptor):
    def __init__(self, metrics: GrpcMetrics) -> None:
        self.metrics = metrics

    def wrap(
        self, handler: grpc.RpcMethodHandler, details: grpc.HandlerCallDetails
    ) -> grpc.RpcMethodHandler:
        if handler.unary_unary is None:
            return handler
        method = str(details.method).rsplit("/", 1)[-1]
        inner: UnaryUnary = handler.unary_unary
        metrics = self.metrics

        async def observed(request: Payload, context: Context) -> Payload:
            t0 = time.perf_counter()
            status = "UNKNOWN"
            tokens = 0
            try:
                response = await inner(request, context)
                status = _status_name(context.code())
                if status == "OK":
                    tokens = metrics.count_tokens(method, request, response)
                return response
            except grpc.aio.AbortError:
                status = _status_name(context.code())
                raise
            finally:
                metrics.observe(method, status, time.perf_counter() - t0, tokens)

        return grpc.unary_unary_rpc_method_handler(
            observed,
            request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer,
        )
