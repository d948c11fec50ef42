"""The whole loop under faults: each service killed and restarted in turn, Redis included.

Reward, decoder and rollout (real processes, one token), the embedded Redis (a supervised child
of this process) and the trainer run as in ``rlvr-world run``; the orchestrator runs here. After
every two more pushed groups one part is SIGKILLed and comes back: reward, decoder and rollout are
restarted on their ports (as a container runtime would), Redis by its own watchdog on the same
socket. The trainer rides out the Redis restart without a restart of its own.

Accounting, from the ledger, the trainer log and the stream:

- prompt requests: started = pushed + failed-with-a-reason (none lost), and none failed except
  those cancelled when the trainer finished;
- scored groups: pushed = trained + dropped-with-a-reason + still queued (none lost), and no group
  trained twice;
- recovery per fault: until the part serves again, and until the next group is pushed.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from rlvr_world.apps.orchestrator.ledger import read_ledger, summarize
from rlvr_world.apps.pipeline.config import load_pipeline_config
from rlvr_world.apps.pipeline.runner import PipelineRun
from rlvr_world.apps.run.grpo import orchestrator_config, run_grpo, trainer_config
from rlvr_world.apps.run.stack import start_services, trainer_spec
from rlvr_world.apps.supervisor import Supervisor
from rlvr_world.queue.server import REDIS_URL_ENV, RedisHandle, start_embedded
from rlvr_world.queue.stream import StreamNames
from tests.chaos.support import REPO, report

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.chaos]
STEPS = 10
FAULTS = ("reward", "decoder", "rollout", "redis")


def _pushed(ledger: Path) -> int:
    return sum(1 for e in read_ledger(ledger) if e["event"] == "pushed")


async def _until(predicate: Any, timeout_s: float, what: str) -> float:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")
        await asyncio.sleep(0.05)
    return time.monotonic()


async def _faults(
    sup: Supervisor, redis: RedisHandle, ledger: Path, recovery: dict[str, dict[str, float]]
) -> None:
    """One fault after every two more pushed groups; ``recovery`` gets the times."""
    assert redis.embedded is not None
    for part in FAULTS:
        base = _pushed(ledger)
        await _until(lambda b=base: _pushed(ledger) >= b + 2, 300, f"pushes before {part}")
        pushed_at_fault = _pushed(ledger)
        t0 = time.monotonic()
        if part == "redis":
            redis.embedded.kill()
            await _until(lambda: bool(redis.embedded and redis.embedded.restarts), 60, "redis")
            back = redis.embedded.restarts[-1][1]
        else:
            sup.kill(part)
            await asyncio.to_thread(sup.start, sup.get(part).spec, 300)
            back = time.monotonic()
        flowing = await _until(
            lambda p=pushed_at_fault: _pushed(ledger) > p, 300, f"a push after {part}"
        )
        recovery[part] = {"serving_again_s": back - t0, "next_push_s": flowing - t0}


def _trained(train_log: Path) -> tuple[list[str], dict[str, str]]:
    """Group ids of every step (with repeats, if any), and drop reasons by group id."""
    trained: list[str] = []
    dropped: dict[str, str] = {}
    for line in train_log.read_text().splitlines():
        event = json.loads(line)
        if event["event"] == "step":
            trained += event["group_ids"]
        elif event["event"] == "drop" and event["reason"] != "duplicate":
            dropped.setdefault(event["group_id"], event["reason"])
    return trained, dropped


def _queued(redis: RedisHandle) -> set[str]:
    entries = redis.client.xrange(StreamNames().stream)
    return {fields[b"group_id"].decode() for _, fields in entries}


def test_every_part_killed_in_turn_loses_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(REDIS_URL_ENV, raising=False)
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    overrides = {"run.run_dir": str(tmp_path), "rl.steps": STEPS, "eval.enabled": False}
    overrides["rl.max_staleness"] = 100  # staleness is not what this test is about
    overrides["rl.queue_bound"] = 4  # two steps of groups, as before the bound had a default
    overrides["run.trainer_idle_timeout_s"] = 900  # nor is the trainer giving up while one
    # part restarts (a service start took over a minute on a loaded 2-core machine)
    cfg = load_pipeline_config(REPO / "configs" / "pipeline" / "smoke.yaml", overrides)
    run = PipelineRun(cfg)
    train, _, model = run.prepare()
    rl = cfg.rl
    ocfg = orchestrator_config(
        rl,
        seed=cfg.run.seed,
        max_tokens=rl.max_tokens,
        variant=rl.reward_variant,
        reward_type=rl.reward_type or "",
        attempts=60,
        backoff_max_s=2.0,
    )
    redis = start_embedded(tmp_path / "redis")
    ledger = tmp_path / "ledger.jsonl"
    recovery: dict[str, dict[str, float]] = {}
    t_start = time.monotonic()
    try:
        with Supervisor(tmp_path) as sup:
            addrs = start_services(sup, model=model, redis_url=redis.url, max_tokens=24)
            tpath = tmp_path / "trainer.yaml"
            tcfg = trainer_config(
                rl,
                model=model,
                redis_url=redis.url,
                trainer_dir=tmp_path / "trainer",
                device="cpu",
                idle_timeout_s=cfg.run.trainer_idle_timeout_s,
                seed=cfg.run.seed,
            )
            tpath.write_text(yaml.safe_dump(tcfg))
            sup.start(trainer_spec(tpath))

            async def both() -> None:
                chaos = asyncio.create_task(_faults(sup, redis, ledger, recovery))
                await run_grpo(
                    rl, ocfg, train, sup=sup, addrs=addrs, redis=redis, seed=0,
                    run_dir=tmp_path, progress=False,
                )  # fmt: skip
                await chaos

            asyncio.run(both())
            trainer_exit = sup.get("trainer").popen.wait(timeout=120)
        queued = _queued(redis)
    finally:
        redis.close()
        run.log.close()
    events = read_ledger(ledger)
    summary = summarize(events)
    trained, dropped = _trained(tmp_path / "trainer" / "train_log.jsonl")
    pushed = set(summary.pushed)
    lost_groups = pushed - set(trained) - set(dropped) - queued
    cancelled = [k for k, r in summary.failed.items() if r.startswith("cancelled")]
    retries = sum(1 for e in events if e["event"] == "retry")
    report(
        "pipeline, each part killed in turn",
        seconds=round(time.monotonic() - t_start, 1),
        requests_started=len(pushed) + len(summary.failed) + len(summary.unfinished),
        requests_failed=len(summary.failed) - len(cancelled),
        requests_cancelled_at_end=len(cancelled),
        requests_retried=len(summary.retried),
        retries=retries,
        requests_lost=len(summary.unfinished),
        groups_pushed=len(pushed),
        groups_trained=len(set(trained)),
        groups_dropped=dict(sorted(dropped.items())),
        groups_still_queued=len(queued),
        groups_lost=len(lost_groups),
        groups_trained_twice=len(trained) - len(set(trained)),
        recovery_s={k: {m: round(v, 2) for m, v in d.items()} for k, d in recovery.items()},
        redis_restarts=1,
    )
    assert trainer_exit == 0
    assert set(recovery) == set(FAULTS)
    assert summary.complete, summary.unfinished
    assert len(summary.failed) == len(cancelled), summary.failed
    assert not lost_groups, lost_groups
    assert len(trained) == len(set(trained)), "a group was trained twice"
    assert len(set(trained)) == STEPS * cfg.rl.groups_per_step
