"""Learning guard (b): GRPO through the whole system raises the reward of a task it can certainly
learn. Real processes throughout: the embedded Redis, the reward, decoder and rollout services, the
trainer process, weight publishing and reloads, the orchestrator: ``PipelineRun.run_async``, the
code path of ``rlvr-world run``, with only the start checkpoint prepared here.

The task: kitchen transitions whose true diff is empty (the action changes nothing). The start
model is SFT-trained (6 epochs: 3 left most answers garbled, neither right nor the wrong change,
and GRPO from there sometimes never recovered) on answers that are right one time in eight and
otherwise claim a change that did not happen. The reward is the real strict exact match from the
reward service; in 32 steps GRPO must lift the mean train reward of the last 8 steps to at least
0.6 and by at least 0.15 over the first 3 steps, with every group sampled at most
``max_staleness`` versions behind and the rollout serving the final weights. A run whose trainer
stops stepping (groups only dropped as stale: e.g. weights never published) is cancelled and
fails naming the stall.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
from pathlib import Path
from typing import Any

import pytest

from rlvr_world.apps.pipeline.config import PipelineConfig, load_pipeline_config
from rlvr_world.apps.pipeline.data import build_items
from rlvr_world.apps.pipeline.runner import PipelineRun
from rlvr_world.items import PromptItem, diff_answer
from rlvr_world.queue.server import REDIS_URL_ENV
from rlvr_world.runlog import read_jsonl
from rlvr_world.tiny_model import TinyLMConfig, build_tiny_lm
from tests.helpers.guard_report import record

pytestmark = [
    pytest.mark.integration,
    pytest.mark.slow,
    pytest.mark.timeout(1800),
]  # a loaded 2-core machine is slow

REPO = Path(__file__).resolve().parents[2]
GUARD = "system"
STEPS = 32
#: Groups in a row dropped as stale with no step between that mean the run is stuck.
STALL_DROPS = 60
#: How often the start model's SFT data holds the right answer (else ``WRONG``).
RIGHT_SHARE = 0.12
#: A change that never happens: the toaster switching itself on.
WRONG = diff_answer(
    {
        "modified": [
            {
                "name": "toaster (ID: 3)",
                "uuid": 3,
                "type": "Toaster",
                "properties": {"isOn": True, "isContainer": True},
                "contains": [],
            }
        ],
        "removed": [],
        "score": {},
    }
)


class _WarmStart(PipelineRun):
    """``rlvr-world run`` from a start checkpoint trained here (the rest is unchanged)."""

    def __init__(self, cfg: PipelineConfig, items: list[PromptItem], model: Path) -> None:
        super().__init__(cfg, "learning-guard")
        self._items, self._model = items, model

    def prepare(self) -> tuple[list[PromptItem], list[PromptItem], Path]:
        return self._items, self._items[:4], self._model


def _unchanged_items() -> list[PromptItem]:
    from rlvr_world.apps.pipeline.config import DataConfig, KitchenData

    data = DataConfig(
        kitchen=KitchenData(slices=1), prompt="bare", test_fraction=0.5, max_train=500
    )
    train, test = build_items(data, seed=0)
    return [i for i in train + test if i.changed is False]


def _warm_model(root: Path, items: list[PromptItem]) -> Path:
    """SFT on the items with the right answer one time in five, ``WRONG`` otherwise."""
    from trainer.sft import SftConfig, run_sft

    rng = random.Random(0)
    pairs = [
        (i.prompt, i.target if rng.random() < RIGHT_SHARE else WRONG)
        for i in items
        for _ in range(5)
    ]
    corpus = [p for p, _ in pairs] + [i.target for i in items] + [WRONG]
    shape = TinyLMConfig(
        vocab_size=512, hidden_size=64, num_layers=2, num_heads=2, max_positions=512
    )
    base = build_tiny_lm(root / "base", corpus, shape)
    cfg = SftConfig(epochs=6, lr=3e-3, batch_size=16, warmup_steps=5, torch_threads=1)
    return run_sft(base, pairs, root / "sft", cfg).path


def _stalled(log: Path) -> str | None:
    """Why the trainer is stuck, when the end of its log is ``STALL_DROPS`` or more groups in a
    row dropped as stale with no step between (a healthy run drops at most a stream's worth,
    ``groups_per_step * (max_staleness + 1)`` = 6, between two steps); None otherwise."""
    if not log.exists():
        return None
    steps = run = 0
    for line in log.read_text().split("\n")[:-1]:  # the last piece may be a line half written
        event = json.loads(line)
        if event["event"] == "step":
            steps, run = event["step"], 0
        elif event["event"] == "drop" and event.get("reason") == "stale":
            run += 1
    if run < STALL_DROPS:
        return None
    return (
        f"the trainer is stuck at step {steps}: its last {run} groups were all dropped as stale "
        "(the rollout samples with old weights: were new ones published and reloaded?)"
    )


async def _watched(run: PipelineRun, log: Path) -> dict[str, Any]:
    """``run.run_async()``, cancelled (the run stops its processes) with a failure naming the
    stall when the trainer stops making steps (``_stalled``), instead of waiting for a timeout."""
    task = asyncio.create_task(run.run_async())
    while not task.done():
        await asyncio.wait({task}, timeout=0.5)
        why = None if task.done() else _stalled(log)
        if why is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            record(GUARD, stalled=why)
            pytest.fail(why)
    return task.result()


def test_grpo_through_the_services_learns_a_learnable_task(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(REDIS_URL_ENV, raising=False)
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    items = _unchanged_items()
    assert len(items) >= 40
    model = _warm_model(tmp_path / "model", items)
    overrides = {
        "run.run_dir": str(tmp_path / "run"),
        "rl.steps": STEPS,
        "rl.group_size": 8,
        "rl.groups_per_step": 3,
        "rl.micro_batch_size": 16,
        "rl.lr": 1e-3,
        "rl.kl_coef": 0.0,
        "rl.max_tokens": 64,
        "rl.max_staleness": 1,
        "rl.reward_type": "binary",
        "eval.enabled": False,
    }
    cfg = load_pipeline_config(REPO / "configs" / "pipeline" / "smoke.yaml", overrides)
    log_path = tmp_path / "run" / "trainer" / "train_log.jsonl"
    summary = asyncio.run(_watched(_WarmStart(cfg, items, model), log_path))
    record(GUARD, trainer_exit=summary["trainer_exit"], served_version=summary["served_version"])
    assert summary["trainer_exit"] == 0
    assert summary["trainer_steps"] == STEPS
    assert summary["served_version"] == STEPS  # the rollout reloaded the last published weights
    # no start evaluation: the trainer was launched with the services, the feed did not wait
    procs = summary["startup"]["processes"]
    assert procs["trainer"]["started_s"] <= procs["rollout"]["started_s"]
    assert summary["startup"]["first_request_s"] >= summary["startup"]["services_s"]
    steps = [
        e
        for e in read_jsonl(tmp_path / "run" / "trainer" / "train_log.jsonl")
        if e["event"] == "step"
    ]
    rewards = [s["reward_mean"] for s in steps]
    first, last = sum(rewards[:3]) / 3, sum(rewards[-8:]) / 8
    record(
        GUARD,
        start=first,
        end=last,
        curve=rewards,
        sample_age_max=max(s["sample_age_max"] for s in steps),
        dropped={
            k: v
            for e in read_jsonl(tmp_path / "run" / "trainer" / "train_log.jsonl")
            if e["event"] == "end"
            for k, v in e.get("dropped", {}).items()
        },
    )
    # The bars, from the measurements (docs/testing.md#the-system-guard-under-load): unbroken, 11
    # runs of 24 steps (6 beside 2 or 4 busy processes) started at 0.42-0.49 and ended at
    # 0.85-0.94, and 6 runs of 32 steps (5 beside busy processes or a second pytest worker) at
    # 0.90-0.98; one clean-clone `make test` beside a `make run` (2026-12-03) ended at 0.615
    # after 24 steps: learning, but slower, hence the 32 steps now. Broken (make test-mutants),
    # the best end was 0.45 (zeroed advantages: a run that does not learn wanders around its
    # start, 0.36-0.49, and rose by 0.06), and a stale group trained or weights never published
    # fail the checks below.
    assert first <= 0.6, f"the warm start should often be wrong (first steps {rewards[:3]})"
    assert last >= 0.6 and last - first >= 0.15, (
        f"GRPO through the services did not learn: {json.dumps(rewards)}"
    )
    assert max(s["sample_age_max"] for s in steps) <= 1
    assert all(s["status_error"] == 0 and s["status_timeout"] == 0 for s in steps)
