"""The GRPO loop of the web and video learning guards, through the real services, one step at a
time.

``GuardLoop`` starts an embedded Redis and the reward, decoder and rollout services (real gRPC
servers on loopback, each in a thread of this process: ``services.*.testing.ServiceThread``), and
the real ``trainer.loop.Trainer`` in this process. ``await loop.step(requests)`` is one GRPO step
as ``rlvr-world run`` makes it, in a fixed order: the real ``Orchestrator`` processes each request
(the rollout service samples the group at the served policy version, the decoder decodes it, the
reward service scores it, the group goes to the Redis stream), then the trainer collects the
groups, steps, checkpoints and publishes its weights, and the step ends when the rollout service
serves them (its watcher reloads what the trainer published in Redis; ``step`` fails with the
version it waited for when it never does). Nothing runs concurrently, sampling is seeded by the
request number and the trainer by its seed, so a guard repeats its curve on one machine.

It returns the mean training reward of the step's own groups (an unparseable answer counts as
``unparseable_reward``, as the trainer trains it), those groups (read back from the stream) and
the groups trained. Groups the caller makes (e.g. stale ones the gate must drop) go to the stream
before the step's own (``before``) or after them (``after``: made from them).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry

from rlvr_world.apps.orchestrator.config import OrchestratorConfig
from rlvr_world.apps.orchestrator.ledger import Ledger
from rlvr_world.apps.orchestrator.metrics import OrchestratorMetrics
from rlvr_world.apps.orchestrator.worker import Orchestrator
from rlvr_world.grpo.groups import training_reward
from rlvr_world.items import PromptItem
from rlvr_world.queue.schema import ScoredGroup, group_from_fields
from rlvr_world.queue.server import RedisHandle, start_embedded
from rlvr_world.queue.stream import Producer, QueueMetrics, StreamNames
from rlvr_world.queue.weights import latest_version
from rlvr_world.wire.services import ServiceClients
from services.decoder.settings import DecoderSettings
from services.decoder.testing import ServiceThread as DecoderThread
from services.reward.settings import RewardSettings
from services.reward.testing import ServiceThread as RewardThread
from services.rollout.settings import RolloutSettings
from services.rollout.testing import ServiceThread as RolloutThread
from tests.helpers.waiting import EVENT_TIMEOUT_S
from trainer.config import TrainerConfig
from trainer.loop import Trainer

#: How long a step waits for the rollout service to serve the weights the trainer published (the
#: suite's deadline for an event: generous, and a quiet machine does not wait it).
RELOAD_TIMEOUT_S = EVENT_TIMEOUT_S


@dataclass(frozen=True)
class StepResult:
    """One step: the mean training reward of its own groups, those groups, and every group the
    trainer trained on (its own and any the caller pushed that the trainer accepted)."""

    reward_mean: float
    own: list[ScoredGroup]
    trained: list[ScoredGroup]


@dataclass
class GuardLoop:
    """The running services, the in-process trainer and the orchestrator (module docstring)."""

    redis: RedisHandle
    trainer: Trainer
    clients: ServiceClients
    orchestrator: Orchestrator
    producer: Producer
    unparseable_reward: float
    requests: int = 0

    async def step(
        self,
        items: Sequence[PromptItem],
        *,
        before: Sequence[ScoredGroup] = (),
        after: Callable[[list[ScoredGroup]], Sequence[ScoredGroup]] | None = None,
    ) -> StepResult:
        """One GRPO step: push ``before``, one group per item through the services, then
        ``after(own groups)``; train, checkpoint, and wait until the rollout serves the new
        weights (module docstring)."""
        for group in before:
            self.producer.push(group)
        keys = []
        for item in items:
            number = self.requests
            self.requests += 1
            keys.append(f"{item.prompt_id}@{number}")
            pushed = await self.orchestrator.process(keys[-1], item, number)
            assert pushed, f"request {number} ({item.prompt_id}) failed: see the ledger"
        own = self.waiting(keys)
        for group in after(own) if after is not None else ():
            self.producer.push(group)
        trained = self.trainer.collect()
        assert trained is not None, "the trainer read no groups"
        self.trainer.step(trained)
        self.trainer.checkpoint()
        version = self.trainer.state.step
        published = latest_version(self.redis.client)
        assert published == version, (
            f"the trainer checkpointed step {version} but published version {published}"
        )
        await self.await_served(version)
        rewards = [
            r
            for g in own
            for s in g.samples
            if (r := training_reward(s, self.unparseable_reward)) is not None
        ]
        return StepResult(sum(rewards) / max(len(rewards), 1), own, trained)

    def waiting(self, keys: Sequence[str]) -> list[ScoredGroup]:
        """The groups with these ids in the stream (pushed, not yet trained), in ``keys``' order."""
        found = {}
        for _, fields in self.redis.client.xrange(StreamNames().stream):
            group = group_from_fields(fields)
            found[group.group_id] = group
        missing = [k for k in keys if k not in found]
        assert not missing, f"groups {missing} are not in the stream"
        return [found[k] for k in keys]

    async def await_served(self, version: int) -> None:
        """Wait until the rollout service serves ``version``; ``AssertionError`` naming what it
        served and what the trainer published when it does not within ``RELOAD_TIMEOUT_S``."""
        deadline = time.monotonic() + RELOAD_TIMEOUT_S
        served = await self.clients.served_version()
        while served != version:
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"the rollout service still serves version {served}, not {version}; the "
                    f"trainer published version {latest_version(self.redis.client)}"
                )
            await asyncio.sleep(0.05)
            served = await self.clients.served_version()


@asynccontextmanager
async def guard_loop(
    root: Path,
    *,
    model: Path,
    trainer: dict[str, Any],
    orchestrator: OrchestratorConfig,
    video_tokenizer: Path | None = None,
) -> AsyncIterator[GuardLoop]:
    """Start Redis, the services and the trainer for ``model`` under ``root``; ``trainer`` is the
    trainer's config without ``model.path``, ``queue.redis_url`` and ``run.run_dir`` (set here)."""
    redis = start_embedded(root / "redis")
    async with AsyncExitStack() as stack:
        stack.callback(redis.close)
        trainer_dir = root / "trainer"
        reward = stack.enter_context(
            RewardThread(RewardSettings(grpc_port=0, http_port=0, workers=1))
        )
        decoder = stack.enter_context(
            DecoderThread(
                DecoderSettings(
                    tokenizer=str(model),
                    video_tokenizer=None if video_tokenizer is None else str(video_tokenizer),
                    grpc_port=0,
                )
            )
        )
        rollout = stack.enter_context(
            RolloutThread(
                RolloutSettings(
                    model=str(model),
                    grpc_port=0,
                    redis_url=redis.url,
                    weights_roots=[trainer_dir],
                    watch_poll_s=0.1,
                )
            )
        )
        cfg = TrainerConfig.model_validate(
            {
                **trainer,
                "model": {**trainer.get("model", {}), "path": str(model)},
                "queue": {**trainer.get("queue", {}), "redis_url": redis.url},
                "run": {**trainer.get("run", {}), "run_dir": str(trainer_dir), "progress": False},
            }
        )
        loop_trainer = Trainer(cfg)
        stack.callback(loop_trainer.close)
        registry = CollectorRegistry()
        producer = Producer(redis.client, StreamNames(), 10_000, QueueMetrics(registry))
        stack.callback(producer.close)
        clients = ServiceClients(rollout.grpc_address, decoder.grpc_address, reward.grpc_address)
        stack.push_async_callback(clients.close)
        ledger = Ledger(root / "ledger.jsonl")
        stack.callback(ledger.close)
        orch = Orchestrator(
            orchestrator,
            clients,
            producer=producer,
            ledger=ledger,
            metrics=OrchestratorMetrics(registry),
            latest_version=lambda: latest_version(redis.client),
            progress=False,
        )
        unparseable = cfg.grpo.unparseable_reward
        yield GuardLoop(
            redis,
            loop_trainer,
            clients,
            orch,
            producer,
            0.0 if unparseable is None else unparseable,
        )
