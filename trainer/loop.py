"""The GRPO trainer loop: pull scored groups, train, checkpoint, ack, publish weights.

At-least-once: entries read since the last checkpoint (trained or too-few-valid) are acknowledged
only after the checkpoint that covers them is on disk; stale and duplicate entries, and with
``grpo.skip_zero_spread`` groups whose rewards are all equal (DAPO's dynamic sampling: a step is
filled with groups that carry a gradient; past ``grpo.zero_spread_max_skips`` drops in one step
the step takes what comes), are never trained and are acknowledged as soon as they are read
(their drop is final); a restart with
``--resume`` reloads that checkpoint, re-reads this consumer's pending entries, and skips group
ids it has already trained (the checkpointed seen-set). Malformed entries are dead-lettered by
the queue. After each checkpoint, ``(version, path)`` is stored under ``queue.weights_key`` and
PUBLISHed on ``queue.weights_channel``.

Does not generate or score samples (rollout workers do) and does no distributed training.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import torch
from prometheus_client import CollectorRegistry, start_http_server
from tqdm import tqdm  # type: ignore[import-untyped]  # no stubs (types-tqdm not installed)

from rlvr_world.devices import device_line, resolve_device, resolve_precision
from rlvr_world.grpo.diagnostics import group_diagnostics
from rlvr_world.grpo.groups import prepare_groups, training_reward, zero_spread
from rlvr_world.queue.schema import ScoredGroup
from rlvr_world.queue.server import connect
from rlvr_world.queue.stream import Consumer, QueueMetrics, StreamNames, count_stale
from rlvr_world.queue.weights import publish_weights
from rlvr_world.runlog import JsonlLog
from trainer.checkpoint import (
    TrainerState,
    archive_previous,
    latest_checkpoint,
    load_optimizer,
    load_state,
    save_checkpoint,
)
from trainer.config import TrainerConfig
from trainer.metrics import TrainerMetrics
from trainer.model import (
    PackedBatch,
    Policy,
    frozen_copy,
    load_base,
    response_logits,
    wrap_lora,
)
from trainer.step import RefLogits, StepStats, train_step

logger = logging.getLogger(__name__)

LOG_FILE = "train_log.jsonl"


class Trainer:
    """Owns the models, the optimizer, the queue consumer and the run directory."""

    def __init__(self, cfg: TrainerConfig, *, resume: bool = False) -> None:
        self.cfg = cfg
        self.run_dir = cfg.run.run_dir
        self.run_dir.mkdir(parents=True, exist_ok=True)
        torch.manual_seed(cfg.run.seed)
        # before anything else: a CUDA device this machine lacks fails here, with what to set
        device = resolve_device(cfg.run.device, "run.device")
        self.device = torch.device(device)
        self.precision = resolve_precision(cfg.run.precision, device)
        if self.device.type == "cpu":
            torch.set_num_threads(cfg.run.torch_threads)
        self.registry = CollectorRegistry()
        self.qmetrics = QueueMetrics(self.registry)
        self.metrics = TrainerMetrics(self.registry)
        if cfg.run.prometheus_port is not None:
            start_http_server(cfg.run.prometheus_port, registry=self.registry)
        if not resume:
            moved = archive_previous(self.run_dir, (LOG_FILE,))
            if moved is not None:
                logger.warning(
                    "fresh start in %s: an earlier run's checkpoints and train log moved to %s "
                    "(--resume continues a run instead)",
                    self.run_dir,
                    moved,
                )
        self.redis = connect(self.run_dir, cfg.queue.redis_url)
        q = cfg.queue
        self.names = StreamNames(stream=q.stream, group=q.group, dead_letter=q.dead_letter)
        self.consumer = Consumer(self.redis.client, self.names, q.consumer, self.qmetrics)
        self.log = JsonlLog(self.run_dir / LOG_FILE)
        ckpt = latest_checkpoint(self.run_dir) if resume else None
        self.state = load_state(ckpt) if ckpt is not None else TrainerState()
        self._build_models(ckpt)
        if ckpt is not None:
            load_optimizer(ckpt, self.optimizer)
            self.consumer.ack(self.state.acked_ids)  # in case the last run died before acking
        self.seen = set(self.state.seen_group_ids)
        g = cfg.grpo
        self._reward_rules = {
            "unparseable_reward": g.unparseable_reward,
            "truncated_reward": g.truncated_reward,
        }
        self._skipped_zero_spread = 0  # zero-spread groups dropped since the last step
        self._skipped_rewards = [0.0, 0]  # their training rewards: sum, count
        self.inflight: list[str] = []
        self.last_ckpt_step = self.state.step
        self.log.write(
            "start",
            step=self.state.step,
            resumed_from=str(ckpt) if ckpt else None,
            device=str(self.device),
            precision=self.precision,
        )
        logger.info("%s", device_line(str(self.device), self.precision))
        logger.info("trainer at step %d (resume=%s, checkpoint=%s)", self.state.step, resume, ckpt)

    def _build_models(self, ckpt: Path | None) -> None:
        mcfg = self.cfg.model
        base = load_base(mcfg, device=self.device)  # initial weights: the KL reference
        self.ref_model: torch.nn.Module | None = None
        if mcfg.lora.enabled:
            self.policy: Policy = wrap_lora(base, mcfg, ckpt)
        else:
            if self.cfg.grpo.kl_coef > 0 or self.cfg.grpo.log_ref_kl:
                self.ref_model = frozen_copy(base).to(self.device)
            self.policy = load_base(mcfg, ckpt, self.device) if ckpt is not None else base
        self.policy.to(self.device)  # type: ignore[arg-type]  # transformers' @wraps(Module.to)
        params = [p for p in self.policy.parameters() if p.requires_grad]
        o = self.cfg.optim
        self.optimizer = torch.optim.AdamW(
            params, lr=o.lr, betas=(o.beta1, o.beta2), weight_decay=o.weight_decay
        )

    def _ref_logits(self) -> RefLogits | None:
        if self.cfg.grpo.kl_coef <= 0 and not self.cfg.grpo.log_ref_kl:
            return None
        temperature = self.cfg.model.temperature
        if self.ref_model is not None:
            ref = self.ref_model
            return lambda batch: response_logits(ref, batch, temperature)
        from peft import PeftModel  # imported already: the reference is the policy without LoRA

        policy = self.policy
        if not isinstance(policy, PeftModel):
            raise TypeError(f"a KL reference needs LoRA or a frozen copy, not {type(policy)}")

        def no_adapter(batch: PackedBatch) -> torch.Tensor:
            with policy.disable_adapter():
                return response_logits(policy, batch, temperature)

        return no_adapter

    def _drop(self, group: ScoredGroup, reason: str) -> None:
        self.state.dropped[reason] = self.state.dropped.get(reason, 0) + 1
        self.metrics.dropped.labels(reason=reason).inc()
        self.log.write(
            "drop",
            step=self.state.step,
            group_id=group.group_id,
            reason=reason,
            policy_version=group.policy_version,
        )

    def _accept(self, group: ScoredGroup, batch_ids: set[str]) -> bool:
        gid = group.group_id
        if gid in self.seen or gid in batch_ids:
            self._drop(group, "duplicate")
            return False
        if self.state.step - group.policy_version > self.cfg.queue.max_staleness:
            self.seen.add(gid)
            self._drop(group, "stale")
            return False
        limit = self.cfg.grpo.zero_spread_max_skips
        if (
            self.cfg.grpo.skip_zero_spread
            and not (limit and self._skipped_zero_spread >= limit)
            and zero_spread(group, **self._reward_rules)
        ):
            self.seen.add(gid)
            self._drop(group, "zero_spread")
            self._skipped_zero_spread += 1
            rewards = [
                r
                for smp in group.samples
                if (r := training_reward(smp, **self._reward_rules)) is not None
            ]
            self._skipped_rewards[0] += sum(rewards)
            self._skipped_rewards[1] += len(rewards)
            return False
        return True

    def collect(self) -> list[ScoredGroup] | None:
        """Up to ``groups_per_step`` fresh groups; None when idle past ``idle_timeout_s``."""
        want, q = self.cfg.batch.groups_per_step, self.cfg.queue
        groups: list[ScoredGroup] = []
        batch_ids: set[str] = set()
        last_data = time.monotonic()
        inflight = set(self.inflight)
        while len(groups) < want:
            entries = self.consumer.read(want - len(groups), block_ms=q.block_ms)
            if not entries:
                entries = self.consumer.reclaim(q.reclaim_min_idle_ms)
                entries = [e for e in entries if e.entry_id not in inflight]
            if not entries:
                if q.idle_timeout_s and time.monotonic() - last_data > q.idle_timeout_s:
                    return groups or None
                continue
            last_data = time.monotonic()
            for entry in entries:
                if entry.entry_id in inflight:
                    continue
                inflight.add(entry.entry_id)
                if self._accept(entry.group, batch_ids):
                    self.inflight.append(entry.entry_id)
                    groups.append(entry.group)
                    batch_ids.add(entry.group.group_id)
                else:
                    # A stale, duplicate or (with skip_zero_spread) zero-spread group is never
                    # trained, whatever happens next, so its entry is acked now: waiting for the
                    # next checkpoint would keep it in the bounded stream, and a stream full of
                    # such entries blocks the producers while the trainer waits for fresh groups.
                    self.consumer.ack([entry.entry_id])
        return groups

    def step(self, groups: list[ScoredGroup]) -> StepStats | None:
        """One optimizer step on ``groups``: advantages, the packed GRPO loss, metrics and the
        train log. Groups ``prepare_groups`` drops (too few valid samples) are recorded, not
        trained; None when no sample is left, and then the step counter does not move."""
        g = self.cfg.grpo
        prepared = prepare_groups(
            groups,
            epsilon=g.epsilon,
            norm_adv_by_std=g.norm_adv_by_std,
            unparseable_reward=g.unparseable_reward,
            truncated_reward=g.truncated_reward,
            token_credit=g.token_credit,
        )
        diagnostics = group_diagnostics(groups, self.state.step)
        diagnostics["token_credit_groups"] = float(prepared.token_credit_groups)
        for group in groups:
            self.seen.add(group.group_id)
            if group.group_id in prepared.dropped:
                self._drop(group, prepared.dropped[group.group_id])
        if not prepared.samples:
            return None
        stats = train_step(
            self.cfg,
            self.policy,
            self._ref_logits(),
            self.optimizer,
            prepared.samples,
            device=self.device,
            precision=self.precision,
        )
        self.state.step += 1
        trained = prepared.group_ids
        self.state.trained_groups += len(trained)
        kept = len(groups) - len(prepared.dropped)
        skipped, self._skipped_zero_spread = self._skipped_zero_spread, 0
        flat, seen = prepared.zero_spread + skipped, kept + skipped
        diagnostics["zero_spread_share"] = flat / seen if seen else 0.0
        diagnostics["zero_spread_skipped"] = float(skipped)
        # The mean training reward of every sample read for this step, skipped groups included:
        # with skip_zero_spread, reward_mean covers the trained groups only, a biased subset.
        total, count = self._skipped_rewards
        self._skipped_rewards = [0.0, 0]
        trained_sum = sum(s.reward for s in prepared.samples)
        diagnostics["reward_read_mean"] = (trained_sum + total) / (len(prepared.samples) + count)
        diagnostics["samples_trained"] = float(len(prepared.samples))
        self._record(stats, trained, diagnostics)
        return stats

    def _record(self, stats: StepStats, trained: list[str], diagnostics: dict[str, float]) -> None:
        m = self.metrics
        m.steps.inc()
        m.groups.inc(len(trained))
        m.tokens.inc(stats.tokens)
        m.loss.set(stats.loss)
        m.kl.set(stats.kl)
        m.reward.set(stats.reward_mean)
        m.clipfrac.set(stats.clipfrac)
        m.entropy.set(stats.entropy)
        m.zero_spread.set(diagnostics["zero_spread_share"])
        m.version.set(self.state.step)
        m.tokens_per_s.set(stats.tokens / max(stats.seconds, 1e-9))
        if stats.skipped:
            m.skipped.inc()
        stale = count_stale(
            self.redis.client, self.names, self.state.step, self.cfg.queue.max_staleness
        )
        m.stale_waiting.set(stale)
        self.log.write(
            "step",
            step=self.state.step,
            group_ids=trained,
            queue_depth=self.consumer.depth(),
            stale_waiting=stale,
            **vars(stats),
            **diagnostics,
        )

    def checkpoint(self) -> Path:
        """Write the checkpoint, then ack the entries it covers, then publish the weights."""
        self.state.seen_group_ids = sorted(self.seen)
        self.state.acked_ids = list(self.inflight)
        self.state.pending_ids = []
        path = save_checkpoint(
            self.run_dir, self.policy, self.optimizer, self.state, self.cfg.run.keep_checkpoints
        )
        self.consumer.ack(self.inflight)
        self.inflight = []
        self.last_ckpt_step = self.state.step
        q = self.cfg.queue
        publish_weights(
            self.redis.client, self.state.step, path, key=q.weights_key, channel=q.weights_channel
        )
        self.metrics.checkpoints.inc()
        self.log.write("checkpoint", step=self.state.step, path=str(path))
        return path

    def run(self) -> TrainerState:
        """Train until ``total_steps`` or until idle; checkpoint at the end."""
        cfg = self.cfg.run
        bar = tqdm(
            total=cfg.total_steps, initial=self.state.step, disable=not cfg.progress, unit="step"
        )
        try:
            while self.state.step < cfg.total_steps:
                groups = self.collect()
                if groups is None:
                    logger.info("no data for %.1fs: stopping", self.cfg.queue.idle_timeout_s)
                    break
                stats = self.step(groups)
                if stats is not None:
                    bar.update(1)
                    bar.set_postfix(
                        reward=f"{stats.reward_mean:.3f}",
                        kl=f"{stats.kl:.2e}",
                        clip=f"{stats.clipfrac:.2f}",
                        depth=self.consumer.depth(),
                    )
                if self.state.step - self.last_ckpt_step >= cfg.checkpoint_every:
                    self.checkpoint()
            if self.state.step > self.last_ckpt_step or self.inflight:
                self.checkpoint()
        finally:
            bar.close()
        self.log.write("end", step=self.state.step, dropped=self.state.dropped)
        return self.state

    def close(self) -> None:
        """Close the train log and the Redis connection (an embedded Redis stops); no checkpoint."""
        self.log.close()
        self.redis.close()


@contextmanager
def open_trainer(cfg: TrainerConfig, *, resume: bool = False) -> Iterator[Trainer]:
    """A ``Trainer`` that is closed on exit, also when the body raises."""
    trainer = Trainer(cfg, resume=resume)
    try:
        yield trainer
    finally:
        trainer.close()
