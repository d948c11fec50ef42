"""The rollout worker: prompts -> G samples -> decoded texts -> rewards -> scored groups on Redis.

For each request ``(key, PromptItem)`` it asks the rollout service for ``group_size`` samples
(token ids, behaviour log-probs, policy version), has the item's task recipe decode and score
them (one decoder call and one ``ScoreBatch`` on the reward service), and pushes a
``ScoredGroup`` (group id = request key, an idempotency key) to the bounded stream.

* **Bounded in flight**: at most ``max_inflight`` requests at once (an asyncio semaphore).
* **Retries**: every stage is retried with exponential backoff while its service is down
  (``UNAVAILABLE``, ``DEADLINE_EXCEEDED``); a scored group is not regenerated when only scoring
  or pushing failed. A request that still fails is recorded ``failed`` with the reason in the
  ledger; none is dropped silently (cancelled ones at shutdown are recorded too).
* **Backpressure**: the push waits while the stream is full (``Producer``); a push that times out
  is retried like a service call.
* **Staleness**: generation asks for ``min_policy_version = latest - max_staleness`` where
  ``latest`` is the trainer's published version (``rlvr_world.queue.weights``); the rollout answers
  ``FAILED_PRECONDITION`` while its weights are older, and the worker waits for the reload. With
  the stream bound (``queue max_len``) this keeps generation from running far ahead of training.
* **Per task** (``recipes``): what a task asks of the rollout, the decoder and the reward
  service (text: ``DecodeTextBatch`` and verl-style rows; video: ``DecodeFrames`` and pixel
  rewards, single- or multi-step) is its ``Recipe``, looked up by the item's task; this module
  has no task branches. A multi-step video sample's forced tokens get ``loss_mask`` 0 here, and
  the ledger's ``pushed`` entry lists those positions (``masked``) per sample.
* **Statuses travel as scored**: an answer the scorer could not parse is pushed with status
  ``unparseable``; whether it trains with reward 0 (the paper) is the trainer's
  ``grpo.unparseable_reward``.

Not done here: dataset reading or sharding across workers (the caller passes requests), and
any training. Other failed scores (``error``, ``timeout``, ``invalid_input``) travel with their
status (the trainer leaves them out of GRPO), never as an ``ok`` zero.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import redis
from tqdm import tqdm  # type: ignore[import-untyped]

from rlvr_world.apps.orchestrator.config import OrchestratorConfig
from rlvr_world.apps.orchestrator.ledger import Ledger
from rlvr_world.apps.orchestrator.metrics import OrchestratorMetrics
from rlvr_world.apps.orchestrator.recipes import Recipe, recipes
from rlvr_world.apps.orchestrator.retry import RetriesExhausted, grpc_reason, retry_async
from rlvr_world.items import PromptItem
from rlvr_world.queue.schema import ScoredGroup, ScoredSample
from rlvr_world.queue.stream import Producer, QueueFull
from rlvr_world.rewards.types import InvalidInput, RewardResult, Status
from rlvr_world.wire.reward import RewardServiceUnavailable
from rlvr_world.wire.services import ServiceClients

logger = logging.getLogger(__name__)

Request = tuple[str, PromptItem]


@dataclass
class RunStats:
    """What one ``Orchestrator.run`` did."""

    pushed: int = 0
    failed: int = 0
    samples: int = 0
    seconds: float = 0.0


def classify(exc: BaseException) -> tuple[str, bool] | None:
    """Retry verdict for the errors the stages raise (``retry.retry_async``'s ``classify``)."""
    if isinstance(exc, RewardServiceUnavailable):
        return str(exc), True
    if isinstance(exc, QueueFull | redis.ConnectionError | redis.TimeoutError):
        return f"{type(exc).__name__}: {exc}", True
    if isinstance(exc, InvalidInput):
        return f"invalid input: {exc}", False
    return grpc_reason(exc)


def to_sample(
    token_ids: list[int],
    logprobs: list[float],
    result: RewardResult,
    inserted: Iterable[bool] = (),
    truncated: bool = False,
) -> ScoredSample:
    """A wire sample with the scorer's status; the reward is kept only when it is finite.
    ``truncated``: the sample was cut at ``max_tokens`` although it could have stopped.

    A result with ``patch_rewards`` (a single-step video frame scored per patch) gives the sample
    ``token_rewards``, patch k's reward for token k; ``ValueError`` when their counts differ (a
    ``video_patch_grid`` that is not the frame's token grid).

    ``inserted`` is the rollout's ``Sample.inserted``: when any token was forced (e.g. a video
    model's ground-truth actions), ``loss_mask`` is 0 there and 1 elsewhere, so the trainer does
    not train on them; otherwise ``loss_mask`` stays unset (all tokens trained)."""
    metrics = {k: float(v) for k, v in result.metrics.items() if math.isfinite(float(v))}
    reward: float | None = result.reward if math.isfinite(result.reward) else None
    status = result.status if reward is not None or result.status is not Status.OK else Status.ERROR
    flags = [bool(f) for f in inserted]
    loss_mask = [0 if f else 1 for f in flags] if any(flags) else None
    token_rewards = None
    if result.patch_rewards and status is Status.OK:
        if len(result.patch_rewards) != len(token_ids):
            raise ValueError(
                f"{len(result.patch_rewards)} patch rewards for {len(token_ids)} response tokens: "
                "video_patch_grid must be the frame's token grid (rows x cols = tokens per frame)"
            )
        token_rewards = list(result.patch_rewards)
    return ScoredSample(
        token_ids=token_ids,
        logprobs=logprobs,
        reward=reward,
        status=status,
        metrics=metrics,
        loss_mask=loss_mask,
        truncated=truncated,
        token_rewards=token_rewards,
    )


class Orchestrator:
    """One rollout worker; ``run`` processes requests until they are done or ``stop()``."""

    def __init__(
        self,
        cfg: OrchestratorConfig,
        clients: ServiceClients,
        *,
        producer: Producer,
        ledger: Ledger,
        metrics: OrchestratorMetrics,
        latest_version: Callable[[], int],
        progress: bool = True,
    ) -> None:
        self.cfg, self.clients, self.producer = cfg, clients, producer
        self.ledger, self.metrics, self.latest_version = ledger, metrics, latest_version
        self.progress = progress
        self.recipes = recipes(cfg, clients)
        self.stats = RunStats()
        self._bar: Any = None

    # ------------------------------------------------------------ stages

    async def _stage(self, stage: str, key: str, item: PromptItem, call: Callable[[], Any]) -> Any:
        def on_retry(attempt: int, reason: str, delay: float) -> None:
            self.metrics.retries.labels(stage=stage).inc()
            if stage == "generate" and reason.startswith("FAILED_PRECONDITION"):
                self.metrics.staleness_waits.inc()
            self.ledger.write(
                "retry", key, item.prompt_id, stage=stage, attempt=attempt + 1, reason=reason
            )

        t0 = time.perf_counter()
        try:
            return await retry_async(
                f"{stage} {key}", call, self.cfg.backoff(stage), classify, on_retry=on_retry
            )
        finally:
            self.metrics.stage_seconds.labels(stage=stage).observe(time.perf_counter() - t0)

    def _recipe(self, item: PromptItem) -> Recipe:
        try:
            return self.recipes[item.task]
        except KeyError:
            raise ValueError(
                f"item {item.prompt_id}: no recipe for task {item.task!r} "
                f"(known: {', '.join(sorted(self.recipes))})"
            ) from None

    async def _generate(self, key: str, item: PromptItem, number: int, recipe: Recipe) -> Any:
        plan = recipe.plan(item, self.cfg.sampling(number))

        def call() -> Any:
            latest = self.latest_version()
            self.metrics.latest_version.set(latest)
            min_version = max(0, latest - self.cfg.max_staleness)
            if plan.inserts:  # interleaved: T segments, each followed by its forced run
                return self.clients.generate(
                    key,
                    item.rollout_prompt,
                    plan.sampling,
                    min_version,
                    inserts=plan.inserts,
                    segment_tokens=plan.segment_tokens,
                )
            return self.clients.generate(key, item.rollout_prompt, plan.sampling, min_version)

        return await self._stage("generate", key, item, call)

    async def process(self, key: str, item: PromptItem, number: int) -> bool:
        """Generate, decode, score and push one request; True when pushed. Always ledgered."""
        self.ledger.write("start", key, item.prompt_id)
        try:
            recipe = self._recipe(item)
            gen = await self._generate(key, item, number, recipe)
            ids = [list(s.token_ids) for s in gen.samples]
            flags = [list(s.inserted) for s in gen.samples]

            def stage(name: str, call: Callable[[], Any]) -> Any:
                return self._stage(name, key, item, call)

            results = await recipe.score(stage, item, ids, flags)
            group = self._group(key, item, gen, results, can_stop=recipe.can_stop)
            statuses = [r.status.value for r in results]
            entry_id = await self._stage(
                "push",
                key,
                item,
                lambda: asyncio.to_thread(self.producer.push, group, self.cfg.push_timeout_s),
            )
        except RetriesExhausted as exc:
            self._fail(key, item, str(exc))
            return False
        except asyncio.CancelledError:
            self._fail(key, item, "cancelled: the run stopped before this prompt finished")
            raise
        except (ValueError, RuntimeError) as exc:  # e.g. a sample the schema refuses
            self._fail(key, item, f"{type(exc).__name__}: {exc}")
            return False
        self._pushed(key, item, group, entry_id, statuses)
        return True

    def _group(
        self, key: str, item: PromptItem, gen: Any, results: list[RewardResult], *, can_stop: bool
    ) -> ScoredGroup:
        if len(results) != len(gen.samples):
            raise ValueError(f"{len(results)} rewards for {len(gen.samples)} samples")
        samples = [
            to_sample(
                list(s.token_ids),
                list(s.logprobs),
                r,
                list(s.inserted),
                truncated=can_stop and s.finish_reason == "length",
            )
            for s, r in zip(gen.samples, results, strict=True)
        ]
        return ScoredGroup(
            group_id=key,
            prompt_id=item.prompt_id,
            task=item.task,
            policy_version=int(gen.policy_version),
            prompt_token_ids=list(gen.prompt_token_ids),
            samples=samples,
        )

    def _pushed(
        self, key: str, item: PromptItem, group: ScoredGroup, entry_id: str, statuses: list[str]
    ) -> None:
        ok = [s.reward for s in group.samples if s.ok and s.reward is not None]
        mean = sum(ok) / len(ok) if ok else None
        extra: dict[str, Any] = {}
        if any(s.loss_mask is not None for s in group.samples):  # forced tokens, not trained
            extra["masked"] = [
                [i for i, m in enumerate(s.loss_mask or ()) if m == 0] for s in group.samples
            ]
        self.ledger.write(
            "pushed",
            key,
            item.prompt_id,
            entry_id=entry_id,
            policy_version=group.policy_version,
            statuses=statuses,
            reward_mean=mean,
            **extra,
        )
        self.metrics.prompts.labels(outcome="pushed").inc()
        self.metrics.policy_version.set(group.policy_version)
        for status in statuses:
            self.metrics.samples.labels(status=status).inc()
        if mean is not None:
            self.metrics.reward.set(mean)
        self.stats.pushed += 1
        self.stats.samples += len(statuses)
        if self._bar is not None:
            self._bar.update(1)
            self._bar.set_postfix(version=group.policy_version, reward=f"{mean or 0:.2f}")

    def _fail(self, key: str, item: PromptItem, reason: str) -> None:
        logger.error("prompt %s failed: %s", key, reason)
        self.ledger.write("failed", key, item.prompt_id, reason=reason)
        self.metrics.prompts.labels(outcome="failed").inc()
        self.stats.failed += 1
        if self._bar is not None:
            self._bar.update(1)

    # ------------------------------------------------------------ loop

    async def run(
        self,
        requests: Iterable[Request],
        stop: Callable[[], bool] | None = None,
        total: int | None = None,
    ) -> RunStats:
        """Process ``requests`` with at most ``max_inflight`` at once, until done or ``stop()``.

        After ``stop()`` turns true no request starts; in-flight ones get ``drain_s`` to finish,
        then are cancelled (and recorded failed with the reason)."""
        stop = stop or (lambda: False)
        t0 = time.perf_counter()
        sem = asyncio.Semaphore(self.cfg.max_inflight)
        tasks: set[asyncio.Task[bool]] = set()
        self._bar = tqdm(total=total, disable=not self.progress, unit="group", desc="rollout")

        async def guarded(key: str, item: PromptItem, number: int) -> bool:
            try:
                return await self.process(key, item, number)
            finally:
                sem.release()
                self.metrics.inflight.dec()

        try:
            for number, (key, item) in enumerate(requests):
                while not stop():
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(sem.acquire(), timeout=0.5)
                        break
                if stop():
                    break
                self.metrics.inflight.inc()
                task = asyncio.create_task(guarded(key, item, number), name=key)
                tasks.add(task)
                task.add_done_callback(tasks.discard)
            await self._drain(tasks, stop)
        finally:
            self._bar.close()
            self._bar = None
        self.stats.seconds += time.perf_counter() - t0
        return self.stats

    async def _drain(self, tasks: set[asyncio.Task[bool]], stop: Callable[[], bool]) -> None:
        deadline: float | None = None
        while tasks:
            if stop() and deadline is None:
                deadline = time.monotonic() + self.cfg.drain_s
            if deadline is not None and time.monotonic() >= deadline:
                for task in list(tasks):
                    task.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
                return
            await asyncio.wait(set(tasks), timeout=0.5)
