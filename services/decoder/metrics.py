"""Prometheus metrics of the decoder service: ``rlvr_decoder_*`` in a registry of its own.

``rlvr_decoder_requests_total{method,status}``, ``rlvr_decoder_request_latency_seconds{method}``
and ``rlvr_decoder_decoded_tokens_total{method}`` (token ids turned into text by successful
calls). Recorded by a gRPC interceptor, served at ``/metrics`` on ``settings.metrics_port``
(unset: no metrics endpoint).
"""

from __future__ import annotations

from typing import Any

from rlvr_world.scaffold.metrics import GrpcMetrics


def decoded_tokens(method: str, request: Any, response: Any) -> int:
    """Token ids decoded by one successful call."""
    if method == "DecodeText":
        return len(request.token_ids)
    if method == "DecodeTextBatch":
        return sum(len(r.token_ids) for r in request.requests)
    return 0


def decoder_metrics() -> GrpcMetrics:
    """The decoder's ``rlvr_decoder_*`` metrics, in a registry of their own."""
    return GrpcMetrics(
        "rlvr_decoder",
        decoded_tokens,
        "decoded_tokens",
        "Token ids decoded to text by successful calls.",
    )
