"""One optimizer step of ``trainer.step.train_step`` on a tiny model, checked by what it does to
the policy rather than by the loss value.

* Direction: one step on a group of two answers, one rewarded 1 and one 0, raises the log-prob
  of the rewarded answer and lowers the other's. A loss of the wrong sign at the call site (the
  mutation harness's ``loss_sign``: ``grpo_loss`` intact, its result negated where ``train_step``
  uses it), zeroed advantages or log-probs read one position off fail this in ``make quick``,
  without a learning guard.
* A non-finite gradient norm skips the update: the weights and the optimizer's state stay as they
  were, the step says ``skipped`` with the norm it saw, and the next finite step trains again.
"""

from __future__ import annotations

import math

import torch

from rlvr_world.grpo.groups import TrainSample, prepare_groups
from rlvr_world.queue.schema import ScoredGroup, ScoredSample
from rlvr_world.rewards.types import Status
from tests.helpers.guard_report import record
from trainer.config import TinyModel, TrainerConfig
from trainer.model import build_tiny, pack, response_logits, token_logprobs
from trainer.step import train_step

torch.set_num_threads(1)
CPU = torch.device("cpu")
PROMPT = [5, 6, 7, 8]
GOOD, BAD = [20, 21, 22, 23], [30, 31, 32, 33]


def config(**grpo: float) -> TrainerConfig:
    return TrainerConfig.model_validate(
        {
            "model": {"tiny": {"vocab_size": 64, "hidden_size": 32, "num_layers": 1}},
            "optim": {"lr": 1e-2, "weight_decay": 0.0},
            "grpo": {"kl_coef": 0.0, **grpo},
            "batch": {"micro_batch_size": 8},
        }
    )


def policy(cfg: TrainerConfig) -> torch.nn.Module:
    assert cfg.model.tiny is not None
    return build_tiny(TinyModel.model_validate(cfg.model.tiny.model_dump()))


def sequence_logprob(model: torch.nn.Module, sample: TrainSample) -> float:
    """Sum of the response's token log-probs under ``model``."""
    model.eval()
    with torch.no_grad():
        batch = pack([sample], CPU)
        logp = token_logprobs(response_logits(model, batch, 1.0), batch.response_ids)
    return float(logp.sum())


def scored_group(model: torch.nn.Module) -> list[TrainSample]:
    """The two answers as GRPO prepares them (advantages +0.71 and -0.71), behaviour log-probs
    from ``model`` itself (on-policy: the importance ratio starts at 1)."""
    samples = []
    for ids, reward in ((GOOD, 1.0), (BAD, 0.0)):
        draft = TrainSample("g", tuple(PROMPT), tuple(ids), (0.0,) * len(ids), reward, 0.0)
        with torch.no_grad():
            batch = pack([draft], CPU)
            lp = token_logprobs(response_logits(model, batch, 1.0), batch.response_ids)[0]
        samples.append(
            ScoredSample(token_ids=ids, logprobs=lp.tolist(), reward=reward, status=Status.OK)
        )
    group = ScoredGroup(
        group_id="g", prompt_id="p", task="text_game", policy_version=0,
        prompt_token_ids=PROMPT, samples=samples,
    )  # fmt: skip
    prepared = prepare_groups([group])
    assert [round(s.advantage, 2) for s in prepared.samples] == [0.71, -0.71]
    return prepared.samples


def test_one_step_raises_the_rewarded_answer_and_lowers_the_other() -> None:
    cfg = config()
    model = policy(cfg)
    good, bad = scored_group(model)
    before = sequence_logprob(model, good), sequence_logprob(model, bad)
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.optim.lr, weight_decay=0.0)
    stats = train_step(cfg, model, None, optimizer, [good, bad], device=CPU)
    after = sequence_logprob(model, good), sequence_logprob(model, bad)
    record("step", rewarded=after[0] - before[0], unrewarded=after[1] - before[1])
    assert not stats.skipped and stats.grad_norm > 0
    # measured: +1.93 and -1.59 nats; any step in the right direction moves both by far more than
    # float noise, a loss of the wrong sign moves both the other way (-2.39, +2.06)
    assert after[0] - before[0] > 0.05, f"rewarded answer: {before[0]:.3f} -> {after[0]:.3f}"
    assert after[1] - before[1] < -0.05, f"unrewarded answer: {before[1]:.3f} -> {after[1]:.3f}"


def test_a_non_finite_gradient_norm_skips_the_update() -> None:
    cfg = config()
    model = policy(cfg)
    good, bad = scored_group(model)
    poisoned = [good, TrainSample(**{**vars(bad), "advantage": math.inf})]
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.optim.lr, weight_decay=0.0)
    weights = {k: v.clone() for k, v in model.state_dict().items()}

    stats = train_step(cfg, model, None, optimizer, poisoned, device=CPU)

    assert stats.skipped and not math.isfinite(stats.grad_norm)
    assert all(torch.equal(weights[k], v) for k, v in model.state_dict().items())
    assert optimizer.state_dict()["state"] == {}  # no AdamW moment was touched
    assert all(p.grad is None for p in model.parameters())  # nothing left for the next step
    before = sequence_logprob(model, good)
    stats = train_step(cfg, model, None, optimizer, [good, bad], device=CPU)
    assert not stats.skipped and math.isfinite(stats.grad_norm)
    assert sequence_logprob(model, good) > before
