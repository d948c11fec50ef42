"""Prometheus metrics of the orchestrator (``rlvr_orchestrator_*``), on a per-process registry."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

_SECONDS = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


class OrchestratorMetrics:
    """Counters, gauges and stage latencies."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.prompts = Counter(
            "rlvr_orchestrator_prompts_total",
            "prompt requests finished, by outcome (pushed | failed)",
            ["outcome"],
            registry=registry,
        )
        self.samples = Counter(
            "rlvr_orchestrator_samples_total",
            "scored samples pushed, by reward status",
            ["status"],
            registry=registry,
        )
        self.retries = Counter(
            "rlvr_orchestrator_retries_total",
            "service calls retried, by stage (generate | decode | score | push)",
            ["stage"],
            registry=registry,
        )
        self.staleness_waits = Counter(
            "rlvr_orchestrator_staleness_waits_total",
            "times generation waited for the rollout weights to catch up",
            registry=registry,
        )
        self.inflight = Gauge(
            "rlvr_orchestrator_inflight_prompts", "prompts being processed", registry=registry
        )
        self.policy_version = Gauge(
            "rlvr_orchestrator_policy_version",
            "policy version of the last generated group",
            registry=registry,
        )
        self.latest_version = Gauge(
            "rlvr_orchestrator_trainer_version",
            "latest weights version the trainer published",
            registry=registry,
        )
        self.reward = Gauge(
            "rlvr_orchestrator_reward_mean", "mean ok reward of the last group", registry=registry
        )
        self.stage_seconds = Histogram(
            "rlvr_orchestrator_stage_seconds",
            "time per stage of one prompt (generate | decode | score | push)",
            ["stage"],
            buckets=_SECONDS,
            registry=registry,
        )
