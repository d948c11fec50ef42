"""What every run type (text, web, video) shares for its GRPO phase: one RL config section, the
trainer's YAML, the orchestrator's settings and the one orchestration call.

``RlSection`` holds the fields every run has; a run type subclasses it for its own fields and
defaults (``TextRl`` in ``apps.pipeline.config``, ``VideoRl`` in ``apps.video.config``). The queue
bound (how many scored groups the stream holds, waiting or read but not yet acknowledged)
defaults to ``groups_per_step * (max_staleness + 1)``: the batch being trained plus
``max_staleness`` steps of groups ahead of it, which with the rollout's staleness gate keeps
generation from running further ahead than training can use. ``run_grpo`` feeds items through
the running services into the stream until the supervised trainer process exits. Given the
trainer's spec, it launches the trainer (unless the caller launched it already, e.g. beside the
services) and starts feeding without waiting for it: nothing the trainer does is needed before
the first group is pushed (the stream holds the groups; the rollout serves the start weights
either way), so the trainer's imports and model load overlap the first rollouts instead of
delaying them; its readiness is checked beside the feed, and a trainer that exits first or is
not ready in time stops the run with ``ProcessFailed``. Until it is ready the stream holds one
step's groups (``groups_per_step``), not the full bound: generation does not run further ahead
of a trainer that has not started (groups of the start's version past ``max_staleness`` steps
would only be dropped as stale) and leaves the CPU to its start-up. ``startup_breakdown`` says
where the start-up's seconds went.

Does not start the services (``apps.run.stack`` does) and does not evaluate.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import random
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry
from pydantic import ConfigDict, Field

from rlvr_world.apps.orchestrator.config import OrchestratorConfig
from rlvr_world.apps.orchestrator.ledger import Ledger
from rlvr_world.apps.orchestrator.metrics import OrchestratorMetrics
from rlvr_world.apps.orchestrator.worker import Orchestrator, RunStats
from rlvr_world.apps.run.configfile import section_to
from rlvr_world.apps.run.stack import Addresses
from rlvr_world.apps.supervisor import POLL_S, ProcessFailed, ProcessSpec, Supervisor
from rlvr_world.grpo.settings import (
    DEFAULT_MAX_STALENESS,
    GroupSize,
    GrpoObjective,
    MaxStaleness,
)
from rlvr_world.items import PromptItem
from rlvr_world.queue.server import RedisHandle
from rlvr_world.queue.stream import Producer, QueueMetrics, StreamNames
from rlvr_world.queue.weights import latest_version
from rlvr_world.runlog import read_jsonl
from rlvr_world.wire.services import ServiceClients

#: The supervised trainer process's name (the feed runs until it exits).
TRAINER = "trainer"


class RlSection(GrpoObjective):
    """GRPO settings every run type has: the objective's (``GrpoObjective``), sampling, trainer
    steps, staleness and the queue."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    group_size: GroupSize = 4
    steps: int = Field(default=12, ge=1, le=1_000_000, description="trainer optimizer steps")
    groups_per_step: int = Field(default=4, ge=1, le=100_000, description="groups per step")
    micro_batch_size: int = Field(default=8, ge=1, le=100_000, description="samples per backward")
    lr: float = Field(default=5e-5, gt=0.0, le=1.0, description="GRPO learning rate")
    temperature: float = Field(default=1.0, gt=0.0, le=10.0, description="sampling temperature")
    max_staleness: MaxStaleness = DEFAULT_MAX_STALENESS
    max_inflight: int = Field(default=2, ge=1, le=1000, description="prompts in flight")
    queue_bound: int | None = Field(
        default=None,
        ge=1,
        le=1_000_000,
        description="most scored groups in the stream (waiting or in training); unset: "
        "groups_per_step * (max_staleness + 1)",
    )
    drain_s: float = Field(
        default=5.0,
        ge=0.0,
        le=3600.0,
        description="grace for in-flight prompts once the trainer has exited",
    )

    @property
    def stream_bound(self) -> int:
        """The stream's length bound (``queue_bound`` or its default)."""
        return self.queue_bound or self.groups_per_step * (self.max_staleness + 1)

    @property
    def total_groups(self) -> int:
        """Groups the trainer consumes in the whole run (the progress bar's total)."""
        return self.steps * self.groups_per_step


def trainer_config(  # noqa: PLR0913 (the trainer YAML's run-specific fields, one keyword each)
    rl: RlSection,
    *,
    model: Path,
    redis_url: str,
    trainer_dir: Path,
    device: str,
    idle_timeout_s: float,
    seed: int,
    backend: str = "auto",
    precision: str = "auto",
) -> dict[str, Any]:
    """The trainer's YAML (``trainer.config.TrainerConfig``) for a run's GRPO phase; ``backend``:
    the model backend (``trainer.config.ModelConfig.backend``); ``device`` and ``precision``:
    the run's, resolved (``rlvr_world.devices.Placement``)."""
    return {
        "model": {"path": str(model), "temperature": rl.temperature, "backend": backend},
        "optim": {"lr": rl.lr},
        "grpo": rl.objective(),
        "batch": {"groups_per_step": rl.groups_per_step, "micro_batch_size": rl.micro_batch_size},
        "queue": {
            "redis_url": redis_url,
            "max_staleness": rl.max_staleness,
            "idle_timeout_s": idle_timeout_s,
        },
        "run": {
            "run_dir": str(trainer_dir),
            "total_steps": rl.steps,
            "checkpoint_every": 1,
            "keep_checkpoints": 2,
            "device": device,
            "precision": precision,
            "progress": False,
            "seed": seed,
        },
    }


def orchestrator_config(rl: RlSection, *, seed: int, **task: Any) -> OrchestratorConfig:
    """The orchestrator's settings: the shared ones from ``rl``, the task's own as keywords
    (``max_tokens``, ``variant``, ``allowed_tokens``, ``video_weights``, ...). Only
    ``RlSection``'s own fields are taken: a run type's section may add fields of the
    orchestrator's names (``TextRl.max_tokens``, ``reward_type``) that its caller passes, as it
    means them, in ``task``."""
    return section_to(rl, OrchestratorConfig, RlSection.model_fields, seed=seed, **task)


def requests_forever(items: Sequence[PromptItem], seed: int) -> Iterator[tuple[str, PromptItem]]:
    """``(key, item)`` pairs: the items reshuffled every epoch, keys unique per epoch."""
    rng = random.Random(seed)
    for epoch in itertools.count():
        order = list(items)
        rng.shuffle(order)
        for item in order:
            yield f"{item.prompt_id}@{epoch}", item


async def await_ready(sup: Supervisor, name: str, timeout_s: float) -> None:
    """Poll the launched process ``name`` until it is ready; if it exits first or is not ready
    within ``timeout_s``, stop it and raise ``ProcessFailed`` (with the tail of its log)."""
    deadline = time.monotonic() + timeout_s
    try:
        while not sup.probe(name):
            if time.monotonic() > deadline:
                raise sup.not_ready(name, timeout_s)
            await asyncio.sleep(POLL_S)
    except ProcessFailed:
        await asyncio.to_thread(sup.stop, name, 5.0)
        raise


async def run_grpo(  # noqa: PLR0913 (settings, items, and the live supervisor, services, Redis)
    rl: RlSection,
    orchestrator: OrchestratorConfig,
    items: Sequence[PromptItem],
    *,
    sup: Supervisor,
    addrs: Addresses,
    redis: RedisHandle,
    seed: int,
    run_dir: Path,
    progress: bool,
    trainer: ProcessSpec | None = None,
    trainer_timeout_s: float = 180.0,
) -> RunStats:
    """Feed ``items`` (reshuffled each epoch) through the services into the stream until the
    supervised ``trainer`` process exits; the ledger goes to ``run_dir/ledger.jsonl``.

    ``trainer``: its spec, launched here beside the feed unless the caller launched it already
    (``Supervisor.launch``), and checked to be ready within ``trainer_timeout_s`` (module
    docstring); without it the caller has started the trainer and waited for it."""
    if trainer is not None and trainer.name != TRAINER:
        raise ValueError(f"the trainer process must be named {TRAINER!r}, not {trainer.name!r}")
    registry = CollectorRegistry()
    producer = Producer(redis.client, StreamNames(), rl.stream_bound, QueueMetrics(registry))

    async def run_feed() -> RunStats:
        clients = ServiceClients(addrs.rollout, addrs.decoder, addrs.reward)
        ledger = Ledger(run_dir / "ledger.jsonl")
        orch = Orchestrator(
            orchestrator,
            clients,
            producer=producer,
            ledger=ledger,
            metrics=OrchestratorMetrics(registry),
            latest_version=lambda: latest_version(redis.client),
            progress=progress,
        )
        try:
            return await orch.run(
                requests_forever(items, seed),
                stop=lambda: not sup.alive(TRAINER),
                total=rl.total_groups,
            )
        finally:
            producer.close()  # pushes still waiting in threads of cancelled prompts end now
            ledger.close()
            await clients.close()

    feed = run_feed()
    if trainer is None:
        return await feed
    if TRAINER not in sup:  # not launched earlier (e.g. beside the services)
        sup.launch(trainer)
    producer.max_len = min(rl.groups_per_step, rl.stream_bound)  # until the trainer is ready
    ready = asyncio.create_task(await_ready(sup, TRAINER, trainer_timeout_s))

    def full_bound(_: asyncio.Task[None]) -> None:
        producer.max_len = rl.stream_bound

    ready.add_done_callback(full_bound)
    try:
        stats = await feed
    except BaseException:
        ready.cancel()
        with contextlib.suppress(asyncio.CancelledError, ProcessFailed):
            await ready
        raise
    await ready  # ProcessFailed when the trainer exited before it was ready (the feed then ended)
    return stats


def train_steps(log_path: Path) -> list[dict[str, Any]]:
    """The ``step`` events of a trainer log (empty if there is none)."""
    return [e for e in read_jsonl(log_path) if e.get("event") == "step"]


def first_request_time(ledger: Path) -> float | None:
    """Wall-clock time of the first rollout request the feed made (the ledger's first
    ``start``); None when it made none."""
    try:
        with ledger.open() as fh:
            for line in fh:
                record = json.loads(line)
                if record.get("event") == "start":
                    return float(record["time"])
    except FileNotFoundError:
        return None
    return None


def startup_breakdown(sup: Supervisor, since: float, **marks: float | None) -> dict[str, Any]:
    """Where the start-up went, in seconds after ``since`` (wall clock, kept as ``since_unix``):
    each supervised process's start and ready (``processes``), and the caller's named ``marks``
    (e.g. Redis up, the GRPO phase's start, its first rollout request); None for a mark that
    never happened."""
    out: dict[str, Any] = {"since_unix": since}
    out |= {key: None if at is None else round(at - since, 3) for key, at in marks.items()}
    out["processes"] = {
        name: {
            "started_s": round(m.started_at - since, 3),
            "ready_s": None if m.ready_at is None else round(m.ready_at - since, 3),
        }
        for name in sup.names()
        for m in [sup.get(name)]
    }
    return out
