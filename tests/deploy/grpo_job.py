"""The orchestrator side of the deployment test's GRPO job (imported by ``driver.py grpo``).

Runs inside the driver container: kitchen prompts -> ``rollout:50061`` -> ``decoder:50062`` ->
``dns:///reward:50051`` -> the Redis Stream on ``redis:6379``, until the trainer container has
published the wanted weights version; then waits until the rollout container serves it (read
from the shared checkpoints volume) and accounts for every group: each one the ledger says was
pushed must have been trained or dropped by the trainer (its ``train_log.jsonl`` on the
checkpoints volume, mounted read-only here) or still be in the stream. A Redis restart during the
job must leave that account whole.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

STREAM = "rlvr:scored_groups"
REDIS_URL = "redis://redis:6379/0"


def kitchen_items() -> tuple[list[Any], list[Any]]:
    """The job's prompts: one slice of the kitchen data, 60 train and 8 test items (seed 0)."""
    from rlvr_world.apps.pipeline.config import DataConfig, KitchenData
    from rlvr_world.apps.pipeline.data import build_items

    return build_items(DataConfig(kitchen=KitchenData(slices=1), max_train=60, max_test=8), seed=0)


def published_version(client: Any) -> int:
    """The trainer's last published version; 0 before the first or while Redis is away."""
    import redis

    from rlvr_world.queue.weights import latest_version

    try:
        return latest_version(client)
    except (redis.ConnectionError, redis.TimeoutError):
        return 0


def stream_group_ids(client: Any) -> set[str]:
    """group_id of every entry still in the stream (waiting or pending)."""
    out: set[str] = set()
    for _entry_id, fields in client.xrange(STREAM, "-", "+"):
        out.add(fields[b"group_id"].decode())
    return out


def trainer_account(train_log: Path) -> tuple[set[str], set[str], int]:
    """(trained group ids, dropped group ids, trainer starts) from ``train_log.jsonl``."""
    trained: set[str] = set()
    dropped: set[str] = set()
    starts = 0
    for line in train_log.read_text().splitlines():
        try:
            event = json.loads(line)
        except json.JSONDecodeError:
            continue  # a line torn by a killed trainer
        if event.get("event") == "step":
            trained.update(event["group_ids"])
        elif event.get("event") == "drop":
            dropped.add(event["group_id"])
        elif event.get("event") == "start":
            starts += 1
    return trained, dropped, starts


def trained_twice(train_log: Path) -> list[str]:
    """Group ids in more than one trainer step of ``train_log.jsonl`` (each must train once)."""
    seen: dict[str, int] = {}
    for line in train_log.read_text().splitlines():
        try:
            event = json.loads(line)
        except json.JSONDecodeError:
            continue
        if event.get("event") == "step":
            for gid in event["group_ids"]:
                seen[gid] = seen.get(gid, 0) + 1
    return sorted(g for g, n in seen.items() if n > 1)


async def _orchestrate(steps: int, ledger_path: Path, timeout_s: float) -> dict[str, Any]:
    import redis
    from prometheus_client import CollectorRegistry

    from rlvr_world.apps.orchestrator.config import OrchestratorConfig
    from rlvr_world.apps.orchestrator.ledger import Ledger
    from rlvr_world.apps.orchestrator.metrics import OrchestratorMetrics
    from rlvr_world.apps.orchestrator.worker import Orchestrator
    from rlvr_world.apps.run.grpo import requests_forever
    from rlvr_world.queue.server import redis_credentials
    from rlvr_world.queue.stream import Producer, QueueMetrics, StreamNames
    from rlvr_world.wire.services import ServiceClients

    train, _ = kitchen_items()
    client = redis.Redis.from_url(REDIS_URL, **redis_credentials(REDIS_URL))
    registry = CollectorRegistry()
    cfg = OrchestratorConfig(
        group_size=4,
        max_tokens=24,
        max_inflight=2,
        max_staleness=4,
        reward_type="task_specific",
        drain_s=20.0,
    )
    clients = ServiceClients("rollout:50061", "decoder:50062", "dns:///reward:50051")
    ledger = Ledger(ledger_path)
    orch = Orchestrator(
        cfg,
        clients,
        producer=Producer(client, StreamNames(), 16, QueueMetrics(registry)),
        ledger=ledger,
        metrics=OrchestratorMetrics(registry),
        latest_version=lambda: published_version(client),
        progress=False,
    )
    deadline = time.monotonic() + timeout_s
    t0 = time.monotonic()
    try:
        stats = await orch.run(
            requests_forever(train, 0),
            stop=lambda: published_version(client) >= steps or time.monotonic() > deadline,
        )
        version = published_version(client)
        served = 0
        while time.monotonic() < deadline:  # the rollout reloads from the shared volume
            served = await clients.served_version()
            if served >= version:
                break
            await asyncio.sleep(0.5)
    finally:
        ledger.close()
        await clients.close()
    return {
        "pushed": stats.pushed,
        "failed": stats.failed,
        "samples": stats.samples,
        "published_version": version,
        "served_version": served,
        "seconds": round(time.monotonic() - t0, 1),
        "in_stream": sorted(stream_group_ids(client)),
    }


def run_grpo(
    steps: int,
    runs: Path,
    timeout_s: float,
    emit: Callable[[dict[str, Any]], None],
    fail: Callable[[str], int],
) -> int:
    from rlvr_world.apps.orchestrator.ledger import read_ledger, summarize

    ledger_path = Path("/tmp/ledger.jsonl")
    result = asyncio.run(_orchestrate(steps, ledger_path, timeout_s))
    summary = summarize(read_ledger(ledger_path))
    train_log = runs / "trainer" / "train_log.jsonl"
    trained, dropped, starts = trainer_account(train_log)
    in_stream = set(result.pop("in_stream"))
    pushed = set(summary.pushed)
    lost = sorted(pushed - trained - dropped - in_stream)
    twice = trained_twice(train_log)
    result.update(
        trained_twice=twice,
        trained_groups=len(trained & pushed),
        dropped_groups=len(dropped & pushed),
        still_queued=len(in_stream & pushed),
        lost=lost,
        trainer_starts=starts,
        failed_prompts=summary.failed,
        retried_prompts=len(summary.retried),
    )
    emit(result)
    if result["published_version"] < steps:
        return fail(f"trainer published version {result['published_version']}, wanted {steps}")
    if result["served_version"] < steps:
        return fail(f"rollout serves version {result['served_version']}, wanted {steps}")
    if lost:
        return fail(f"{len(lost)} pushed groups neither trained, dropped nor queued: {lost[:5]}")
    if twice:
        return fail(f"{len(twice)} groups trained more than once: {twice[:5]}")
    if summary.failed:
        return fail(f"prompts failed: {summary.failed}")
    return 0
