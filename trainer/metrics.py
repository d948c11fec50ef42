"""Prometheus metrics of the trainer (``rlvr_trainer_*``); its JSON Lines log is
``rlvr_world.runlog.JsonlLog``."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge


class TrainerMetrics:
    """Registered on the process's own registry (shared with the queue metrics)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.steps = Counter("rlvr_trainer_steps_total", "optimizer steps", registry=registry)
        self.skipped = Counter(
            "rlvr_trainer_skipped_steps_total", "non-finite grad norm", registry=registry
        )
        self.groups = Counter("rlvr_trainer_groups_trained_total", "groups", registry=registry)
        self.dropped = Counter(
            "rlvr_trainer_groups_dropped_total", "groups dropped", ["reason"], registry=registry
        )
        self.tokens = Counter("rlvr_trainer_tokens_total", "response tokens", registry=registry)
        self.checkpoints = Counter(
            "rlvr_trainer_checkpoints_total", "checkpoints written", registry=registry
        )
        self.loss = Gauge("rlvr_trainer_loss", "last total loss", registry=registry)
        self.kl = Gauge("rlvr_trainer_kl", "last KL term", registry=registry)
        self.reward = Gauge("rlvr_trainer_reward_mean", "last mean reward", registry=registry)
        self.clipfrac = Gauge("rlvr_trainer_clip_fraction", "last clip fraction", registry=registry)
        self.entropy = Gauge(
            "rlvr_trainer_entropy", "last policy entropy per response token", registry=registry
        )
        self.zero_spread = Gauge(
            "rlvr_trainer_zero_spread_share",
            "share of the last step's groups whose rewards were all equal",
            registry=registry,
        )
        self.version = Gauge("rlvr_trainer_policy_version", "current step", registry=registry)
        self.stale_waiting = Gauge(
            "rlvr_trainer_stale_waiting", "stale entries still in the stream", registry=registry
        )
        self.tokens_per_s = Gauge(
            "rlvr_trainer_tokens_per_second", "last step throughput", registry=registry
        )
