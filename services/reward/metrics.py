"""Prometheus metrics of one reward-service process, in a registry of its own.

Names follow ``rlvr_reward_<what>_<unit>``; labels are low-cardinality (``task``, ``status``,
``transport`` in {grpc, http}). The HTTP gateway serves them at ``GET /metrics``.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

LATENCY_BUCKETS = (
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1,
    2.5,
    5,
    10,
    30,
)
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 4096)


class RewardMetrics:
    """Every metric the service exports; one instance per process."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.requests = Counter(
            "rlvr_reward_requests_total",
            "Scored requests by task, result status and transport.",
            ["task", "status", "transport"],
            registry=r,
        )
        self.rejected = Counter(
            "rlvr_reward_rejected_total",
            "Calls refused before scoring (bad input, auth, limits), by reason and transport.",
            ["reason", "transport"],
            registry=r,
        )
        self.latency = Histogram(
            "rlvr_reward_request_latency_seconds",
            "Time to answer one call (a whole batch counts once), by method and transport.",
            ["method", "transport"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.score_seconds = Histogram(
            "rlvr_reward_score_seconds",
            "Time to score one request inside the service, by task.",
            ["task"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.batch_size = Histogram(
            "rlvr_reward_batch_size",
            "Requests per batch call, by transport.",
            ["transport"],
            buckets=BATCH_BUCKETS,
            registry=r,
        )
        self.perceptual_batch = Histogram(
            "rlvr_reward_perceptual_batch_size",
            "Frame pairs per LPIPS/ST-LPIPS forward pass.",
            buckets=BATCH_BUCKETS,
            registry=r,
        )
        self.idm_batch = Histogram(
            "rlvr_reward_idm_batch_size",
            "Steps (frame pairs) per forward pass of the inverse-dynamics model (idm weight).",
            buckets=BATCH_BUCKETS,
            registry=r,
        )
        self.in_flight = Gauge(
            "rlvr_reward_in_flight_requests",
            "Calls being answered now, by transport.",
            ["transport"],
            registry=r,
        )
        self.pool_workers = Gauge(
            "rlvr_reward_pool_workers", "Processes in the text-scoring pool.", registry=r
        )
        self.pool_live = Gauge(
            "rlvr_reward_pool_live_workers",
            "Pool processes ready to score (below rlvr_reward_pool_workers: degraded).",
            registry=r,
        )
        self.pool_busy = Gauge(
            "rlvr_reward_pool_busy_workers",
            "Pool processes with work now (min of queued chunks and workers).",
            registry=r,
        )
        self.pool_queued = Gauge(
            "rlvr_reward_pool_queued_chunks",
            "Chunks of requests submitted to the pool and not finished.",
            registry=r,
        )
        self.pool_utilisation = Gauge(
            "rlvr_reward_pool_utilisation_ratio",
            "Busy pool processes / pool processes, now.",
            registry=r,
        )

    def render(self) -> bytes:
        """The registry in the Prometheus text exposition format."""
        return generate_latest(self.registry)
