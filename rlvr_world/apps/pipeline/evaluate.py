"""Greedy held-out evaluation through the running services (rollout -> decoder -> reward).

Each held-out prompt gets one greedy answer (temperature 0) from the rollout service, decoded with
special tokens kept and scored by the reward service. Reported: exact-match accuracy (reward 1
under the binary reward), mean reward (non-ok statuses count as 0 here, and are counted
separately as ``unscored``), and both split into changed and unchanged transitions (the paper's
gold label). Retries follow the orchestrator's backoff; a prompt that still fails is counted as
``failed`` (not as a wrong answer) and named in the log.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import asdict, dataclass, field
from typing import Any

from rlvr_world.apps.orchestrator.retry import Backoff, RetriesExhausted, retry_async
from rlvr_world.apps.orchestrator.worker import classify
from rlvr_world.items import PromptItem
from rlvr_world.rewards.types import RewardResult
from rlvr_world.wire.services import Sampling, ServiceClients

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Answer:
    """One scored greedy answer."""

    prompt_id: str
    changed: bool | None
    reward: float
    status: str
    text: str


@dataclass
class EvalReport:
    """Aggregates over the held-out answers."""

    policy_version: int = 0
    n: int = 0
    accuracy: float = 0.0
    mean_reward: float = 0.0
    unscored: int = 0
    failed: list[str] = field(default_factory=list)
    by_split: dict[str, dict[str, float]] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _stats(answers: list[Answer]) -> dict[str, float]:
    if not answers:
        return {"n": 0, "accuracy": 0.0, "mean_reward": 0.0}
    exact = sum(1 for a in answers if a.status == "ok" and a.reward >= 1.0)
    total = sum(a.reward if a.status == "ok" else 0.0 for a in answers)
    return {
        "n": len(answers),
        "accuracy": exact / len(answers),
        "mean_reward": total / len(answers),
    }


def summarize(answers: list[Answer], version: int, failed: list[str]) -> EvalReport:
    """The report of a list of answers (pure)."""
    overall = _stats(answers)
    splits = {
        "changed": _stats([a for a in answers if a.changed is True]),
        "unchanged": _stats([a for a in answers if a.changed is False]),
    }
    return EvalReport(
        policy_version=version,
        n=len(answers),
        accuracy=overall["accuracy"],
        mean_reward=overall["mean_reward"],
        unscored=sum(1 for a in answers if a.status != "ok"),
        failed=failed,
        by_split=splits,
    )


async def _answer(
    clients: ServiceClients, item: PromptItem, max_tokens: int, variant: str, backoff: Backoff
) -> tuple[Answer, int]:
    greedy = Sampling(n=1, max_tokens=max_tokens, temperature=0.0)

    async def run() -> tuple[Answer, int]:
        gen = await clients.generate(f"eval-{item.prompt_id}", item.prompt, greedy)
        (text,) = await clients.decode([list(gen.samples[0].token_ids)], "keep")
        # the task's own metric whatever GRPO trained on: exact match (binary) or the paper's F1
        row = item.reward_row(text) | {"variant": variant, "reward_type": None}
        (result,) = await clients.score([row])
        return _to_answer(item, text, result), int(gen.policy_version)

    return await retry_async(f"eval {item.prompt_id}", run, backoff, classify)


def _to_answer(item: PromptItem, text: str, result: RewardResult) -> Answer:
    return Answer(item.prompt_id, item.changed, result.reward, result.status.value, text)


async def evaluate(
    clients: ServiceClients,
    items: list[PromptItem],
    *,
    max_tokens: int,
    variant: str = "strict",
    concurrency: int = 2,
    backoff: Backoff | None = None,
) -> tuple[EvalReport, list[Answer]]:
    """Evaluate ``items`` (module docstring); at most ``concurrency`` prompts at once."""
    sem = asyncio.Semaphore(concurrency)
    backoff = backoff or Backoff(attempts=6)

    async def one(item: PromptItem) -> tuple[Answer, int] | str:
        async with sem:
            try:
                return await _answer(clients, item, max_tokens, variant, backoff)
            except RetriesExhausted as exc:
                logger.error("eval of %s failed: %s", item.prompt_id, exc)
                return item.prompt_id

    results = await asyncio.gather(*(one(item) for item in items))
    answers = [r[0] for r in results if not isinstance(r, str)]
    versions = {r[1] for r in results if not isinstance(r, str)}
    failed = [r for r in results if isinstance(r, str)]
    return summarize(answers, max(versions, default=0), failed), answers


async def evaluate_served(
    rollout: str,
    decoder: str,
    reward: str,
    items: list[PromptItem],
    *,
    max_tokens: int,
    variant: str = "strict",
) -> tuple[EvalReport, list[Answer]]:
    """``evaluate`` of the model the rollout service at ``rollout`` serves, through the decoder
    and reward services at ``decoder`` and ``reward`` (clients opened and closed here)."""
    clients = ServiceClients(rollout, decoder, reward)
    try:
        return await evaluate(clients, items, max_tokens=max_tokens, variant=variant)
    finally:
        await clients.close()
