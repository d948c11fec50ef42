"""LoRA training in the real ``Trainer`` (``model.lora.enabled``): only the adapters train, the
reference is the same model with its adapters off, and a resumed run continues from the saved
adapters. A real Redis (embedded) feeds the trainer; the model is the tiny test LM.

What each check would catch: a base weight that moves (adapters not the only trainable
parameters), a reference that follows the policy (``disable_adapter`` not taking effect: the KL
would stay 0), a reference that is not the start model (its logits would differ from the saved
model's), an adapter lost on resume (the resumed policy would be the base model).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from prometheus_client import CollectorRegistry

from rlvr_world.grpo.groups import TrainSample
from rlvr_world.queue.schema import ScoredGroup, ScoredSample
from rlvr_world.queue.stream import Producer, QueueMetrics, StreamNames
from rlvr_world.rewards.types import Status
from tests.helpers.tiny_lm import build_tiny_lm, load_model
from trainer.config import TrainerConfig
from trainer.loop import Trainer
from trainer.model import PackedBatch, pack, response_logits

pytestmark = pytest.mark.integration

CPU = torch.device("cpu")
PROMPT = [0, 40, 41, 42]
ANSWERS = ([50, 51, 52, 1], [60, 61, 1], [70, 71, 72, 73, 1], [80, 1])
STEPS = 3


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_lm(tmp_path_factory.mktemp("tiny_lm"))


def config(model: Path, run_dir: Path) -> TrainerConfig:
    return TrainerConfig.model_validate(
        {
            "model": {
                "path": str(model),
                "lora": {
                    "enabled": True,
                    "r": 4,
                    "alpha": 8,
                    "target_modules": ["q_proj", "v_proj"],
                },
            },
            "optim": {"lr": 5e-2},
            "grpo": {"kl_coef": 0.0, "log_ref_kl": True},
            "batch": {"groups_per_step": 1, "micro_batch_size": 8},
            "queue": {"block_ms": 20},
            "run": {"run_dir": str(run_dir), "progress": False, "seed": 0},
        }
    )


def push_group(trainer: Trainer, key: str) -> None:
    """One group of the four answers, rewarded 1, 0, 1, 0 (behaviour log-probs: a flat -3)."""
    producer = Producer(trainer.redis.client, StreamNames(), 100, QueueMetrics(CollectorRegistry()))
    samples = [
        ScoredSample(
            token_ids=ids, logprobs=[-3.0] * len(ids), reward=float(i % 2 == 0), status=Status.OK
        )
        for i, ids in enumerate(ANSWERS)
    ]
    producer.push(
        ScoredGroup(
            group_id=key,
            prompt_id="p",
            task="text_game",
            policy_version=trainer.state.step,
            prompt_token_ids=PROMPT,
            samples=samples,
        )
    )


def logits_of(model: torch.nn.Module) -> torch.Tensor:
    """Response logits of the four answers under ``model`` (eval mode, no gradient)."""
    was_training = model.training
    model.eval()
    with torch.no_grad():
        out = response_logits(model, batch(), 1.0)
    model.train(was_training)
    return out


def batch() -> PackedBatch:
    samples = [
        TrainSample("g", tuple(PROMPT), tuple(ids), (0.0,) * len(ids), 0.0, 0.0) for ids in ANSWERS
    ]
    return pack(samples, CPU)


def train(trainer: Trainer, steps: int) -> list[float]:
    """``steps`` steps of one pushed group each, checkpointed; the KL of each step."""
    kls = []
    for _ in range(steps):
        push_group(trainer, f"g{trainer.state.step}")
        groups = trainer.collect()
        assert groups is not None
        stats = trainer.step(groups)
        assert stats is not None and not stats.skipped
        kls.append(stats.kl)
        trainer.checkpoint()
    return kls


def reference(trainer: Trainer) -> torch.Tensor:
    """The trainer's reference logits of the four answers (``Trainer._ref_logits``)."""
    ref = trainer._ref_logits()
    assert ref is not None, "log_ref_kl is on: the trainer must keep a reference"
    with torch.no_grad():
        return ref(batch())


def test_lora_trains_only_the_adapters_against_the_adapter_off_reference(
    model_dir: Path, tmp_path: Path
) -> None:
    start = logits_of(load_model(model_dir))
    trainer = Trainer(config(model_dir, tmp_path / "run"))
    try:
        named = dict(trainer.policy.named_parameters())
        trainable = {n for n, p in named.items() if p.requires_grad}
        assert trainable and all("lora_" in n for n in trainable), sorted(trainable)[:5]
        frozen = {n: p.detach().clone() for n, p in named.items() if not p.requires_grad}
        adapters = {n: named[n].detach().clone() for n in trainable}
        # LoRA's B matrices start at 0: policy, reference and saved model agree
        torch.testing.assert_close(logits_of(trainer.policy), start)
        torch.testing.assert_close(reference(trainer), start)

        kls = train(trainer, STEPS)

        named = dict(trainer.policy.named_parameters())
        assert all(torch.equal(named[n], before) for n, before in frozen.items())
        assert any(not torch.equal(named[n], before) for n, before in adapters.items())
        assert kls[0] == pytest.approx(0.0, abs=1e-6)  # the first step starts at the reference
        assert kls[-1] > 1e-4, f"the policy never left its adapter-off reference: KL {kls}"
        torch.testing.assert_close(reference(trainer), start)  # adapters off: the start model
        moved = (logits_of(trainer.policy) - start).abs().max()
        assert moved > 1e-3, f"the trained policy's logits moved by {moved:.2e} only"
    finally:
        trainer.close()


def test_a_resumed_lora_run_continues_from_its_adapters(model_dir: Path, tmp_path: Path) -> None:
    start = logits_of(load_model(model_dir))
    first = Trainer(config(model_dir, tmp_path / "run"))
    try:
        train(first, 2)
        trained = logits_of(first.policy)
    finally:
        first.close()
    second = Trainer(config(model_dir, tmp_path / "run"), resume=True)
    try:
        assert second.state.step == 2
        torch.testing.assert_close(logits_of(second.policy), trained)
        torch.testing.assert_close(reference(second), start)
        assert all("lora_" in n for n, p in second.policy.named_parameters() if p.requires_grad)
        train(second, 1)
        assert second.state.step == 3
    finally:
        second.close()
