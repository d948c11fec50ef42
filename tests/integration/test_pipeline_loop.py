"""The full loop on CPU: real processes, gRPC between them, a real Redis, the transformers engine.

Reward, decoder and rollout services and the trainer run as supervised processes; the orchestrator
runs here. Mid-run the reward service is SIGKILLed and restarted on the same port: the ledger must
show every prompt request ending pushed or failed-with-a-reason, the ones that hit the outage
retried and pushed. After the GRPO steps the rollout service serves the trainer's newer weights.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest
import yaml

from rlvr_world.apps.orchestrator.ledger import read_ledger, summarize
from rlvr_world.apps.pipeline.config import load_pipeline_config
from rlvr_world.apps.pipeline.runner import PipelineRun
from rlvr_world.apps.run.grpo import trainer_config
from rlvr_world.apps.run.stack import start_services, trainer_spec
from rlvr_world.apps.supervisor import Supervisor
from rlvr_world.queue.server import REDIS_URL_ENV, start_embedded
from rlvr_world.queue.weights import latest_version

pytestmark = [pytest.mark.integration, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
STEPS = 4


def _count(ledger: Path, event: str) -> int:
    return sum(1 for e in read_ledger(ledger) if e["event"] == event)


def _score_retries(ledger: Path) -> int:
    return sum(1 for e in read_ledger(ledger) if e["event"] == "retry" and e["stage"] == "score")


async def _outage(sup: Supervisor, ledger: Path) -> None:
    """Once two groups are pushed, SIGKILL the reward service; once a scoring call has hit the
    outage (a retry in the ledger), restart it on its port."""
    while _count(ledger, "pushed") < 2:
        await asyncio.sleep(0.1)
    sup.kill("reward")
    deadline = asyncio.get_running_loop().time() + 240
    while _score_retries(ledger) == 0:
        assert asyncio.get_running_loop().time() < deadline, "no scoring call hit the outage"
        await asyncio.sleep(0.1)
    await asyncio.to_thread(sup.restart, "reward")


def test_full_loop_survives_reward_restart_and_rollout_follows_weights(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(REDIS_URL_ENV, raising=False)
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    cfg = load_pipeline_config(
        REPO / "configs" / "pipeline" / "smoke.yaml",
        {"run.run_dir": str(tmp_path), "rl.steps": STEPS, "eval.enabled": False},
    )
    run = PipelineRun(cfg)
    train, test, model = run.prepare()
    redis = start_embedded(tmp_path / "redis")
    try:
        with Supervisor(tmp_path) as sup:
            addrs = start_services(sup, model=model, redis_url=redis.url, max_tokens=24)
            tpath = tmp_path / "trainer.yaml"
            tcfg = trainer_config(
                cfg.rl,
                model=model,
                redis_url=redis.url,
                trainer_dir=tmp_path / "trainer",
                device="cpu",
                idle_timeout_s=cfg.run.trainer_idle_timeout_s,
                seed=cfg.run.seed,
            )
            tpath.write_text(yaml.safe_dump(tcfg))

            async def both() -> None:
                chaos = asyncio.create_task(_outage(sup, tmp_path / "ledger.jsonl"))
                await run._grpo(sup, addrs, redis, (train, test), trainer_spec(tpath))
                await chaos

            asyncio.run(both())
            assert sup.get("trainer").popen.wait(timeout=60) == 0
            final = latest_version(redis.client)
            served = asyncio.run(run._await_version(addrs, final, timeout_s=60))
            assert sup.alive("rollout") and sup.alive("reward")
    finally:
        redis.close()
        run.log.close()

    assert final == STEPS
    assert served == final > 0  # the rollout service reloaded the trainer's newest weights

    events = read_ledger(tmp_path / "ledger.jsonl")
    summary = summarize(events)
    assert summary.complete, f"unfinished requests: {summary.unfinished}"
    assert all(r.startswith("cancelled") for r in summary.failed.values()), summary.failed
    score_retried = {e["key"] for e in events if e["event"] == "retry" and e["stage"] == "score"}
    assert score_retried, "the reward outage did not hit any request"
    # Every request the outage hit is accounted for: pushed after its retries, or cancelled with
    # that reason when the trainer reached its last step while the request was still backing off.
    cancelled = {k for k, r in summary.failed.items() if r.startswith("cancelled")}
    assert score_retried <= set(summary.pushed) | cancelled, "a request hit by the outage was lost"
    first_retry = next(
        i for i, e in enumerate(events) if e["event"] == "retry" and e["stage"] == "score"
    )
    assert any(e["event"] == "pushed" for e in events[first_retry:]), "no push after the outage"
    versions = {e["policy_version"] for e in events if e["event"] == "pushed"}
    assert max(versions) > 0  # groups sampled by newer weights reached the queue
    assert os.path.exists(tmp_path / "trainer" / "train_log.jsonl")
