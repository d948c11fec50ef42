"""Prometheus metrics of the rollout service: ``rlvr_rollout_*`` in a registry of its own.

``rlvr_rollout_requests_total{method,status}``, ``rlvr_rollout_request_latency_seconds{method}``
and ``rlvr_rollout_generated_tokens_total{method}`` (sampled tokens of every successful
``Generate``; tokens/s is its rate). Recorded by a gRPC interceptor, served at ``/metrics`` on
``settings.metrics_port`` (unset: no metrics endpoint).
"""

from __future__ import annotations

from typing import Any

from rlvr_world.scaffold.metrics import GrpcMetrics


def generated_tokens(method: str, request: Any, response: Any) -> int:
    """Tokens sampled by one successful call (0 for every method but ``Generate``)."""
    if method != "Generate":
        return 0
    return sum(len(sample.token_ids) for sample in response.samples)


def rollout_metrics() -> GrpcMetrics:
    """The rollout service's ``rlvr_rollout_*`` metrics, in a registry of their own."""
    return GrpcMetrics(
        "rlvr_rollout",
        generated_tokens,
        "generated_tokens",
        "Tokens sampled by successful Generate calls (all samples).",
    )
