"""Per-token ``loss_mask`` from the wire to the loss: the scored sample carries it, GRPO preparation
keeps it, ``pack`` makes it the response mask, and the GRPO loss (policy gradient, KL, entropy)
over a masked batch equals the same loss computed by hand over the unmasked tokens only, in value
and in gradient."""

from __future__ import annotations

import copy
from dataclasses import replace

import pytest
import torch

from rlvr_world.grpo.groups import TrainSample, prepare_groups
from rlvr_world.grpo.loss import (
    GrpoLossConfig,
    entropy_from_logits,
    grpo_loss,
    kl_penalty,
)
from rlvr_world.queue.schema import ScoredGroup, ScoredSample
from rlvr_world.rewards.types import Status
from trainer.config import TinyModel
from trainer.model import build_tiny, pack, response_logits, token_logprobs

torch.set_num_threads(1)
CPU = torch.device("cpu")
TEMPERATURE = 0.8


def samples() -> list[TrainSample]:
    """Three responses of different lengths: masked in blocks, masked sparsely, unmasked."""
    gen = torch.Generator().manual_seed(0)

    def rand_ids(k: int) -> tuple[int, ...]:
        return tuple(int(t) for t in torch.randint(3, 60, (k,), generator=gen))

    def rand_lp(k: int) -> tuple[float, ...]:
        return tuple(float(x) for x in -torch.rand(k, generator=gen) * 4)

    return [
        TrainSample("g", rand_ids(4), rand_ids(7), rand_lp(7), 1.0, 0.9, (1, 1, 0, 0, 1, 1, 0)),
        TrainSample("g", rand_ids(6), rand_ids(5), rand_lp(5), 0.0, -1.3, (0, 1, 0, 1, 1)),
        TrainSample("h", rand_ids(3), rand_ids(6), rand_lp(6), 0.5, 0.4, None),
    ]


def test_pack_takes_the_loss_mask_as_the_response_mask() -> None:
    batch = pack(samples(), CPU)
    assert batch.response_mask.tolist() == [
        [1, 1, 0, 0, 1, 1, 0],
        [0, 1, 0, 1, 1, 0, 0],
        [1, 1, 1, 1, 1, 1, 0],
    ]


def test_pack_refuses_a_mask_of_the_wrong_length() -> None:
    bad = TrainSample("g", (1, 2), (3, 4, 5), (-1.0, -1.0, -1.0), 0.0, 0.0, (1, 0))
    with pytest.raises(ValueError, match="loss_mask of sample 0 has 2 entries for 3"):
        pack([bad], CPU)


def test_prepare_groups_carries_the_mask_to_the_train_sample() -> None:
    group = ScoredGroup(
        group_id="g",
        prompt_id="p",
        task="video",
        policy_version=0,
        prompt_token_ids=[1, 2],
        samples=[
            ScoredSample(
                token_ids=[3, 4, 5],
                logprobs=[-1.0, 0.0, -2.0],
                reward=1.0,
                status=Status.OK,
                loss_mask=[1, 0, 1],
            ),
            ScoredSample(token_ids=[6], logprobs=[-0.5], reward=0.0, status=Status.OK),
        ],
    )
    prepared = prepare_groups([group])
    assert [s.loss_mask for s in prepared.samples] == [(1, 0, 1), None]


def by_hand(
    policy: torch.nn.Module, ref: torch.nn.Module, batch: list[TrainSample], cfg: GrpoLossConfig
) -> torch.Tensor:
    """pg + kl_coef * k3 KL - entropy_coef * entropy, token-mean over the unmasked tokens only,
    one sequence at a time, from the dual-clip PPO formula written out."""
    pg_terms: list[torch.Tensor] = []
    kl_terms: list[torch.Tensor] = []
    ent_terms: list[torch.Tensor] = []
    for s in batch:
        ids = torch.tensor([s.prompt_token_ids + s.token_ids])
        p = len(s.prompt_token_ids)
        logits = policy(input_ids=ids).logits[0].float() / TEMPERATURE
        with torch.no_grad():
            ref_logits = ref(input_ids=ids).logits[0].float() / TEMPERATURE
        mask = s.loss_mask or (1,) * len(s.token_ids)
        for t, token in enumerate(s.token_ids):
            if not mask[t]:
                continue
            row = logits[p - 1 + t]
            logp = torch.log_softmax(row, dim=-1)[token]
            ref_logp = torch.log_softmax(ref_logits[p - 1 + t], dim=-1)[token]
            ratio = torch.exp(logp - s.behaviour_logprobs[t])
            a = s.advantage
            clipped = torch.maximum(
                -a * ratio, -a * torch.clamp(ratio, 1 - cfg.clip_low, 1 + cfg.clip_high)
            )
            assert cfg.clip_ratio_c is not None
            pg_terms.append(
                torch.minimum(clipped, torch.tensor(-a * cfg.clip_ratio_c)) if a < 0 else clipped
            )
            d = ref_logp - logp
            kl_terms.append(torch.clamp(torch.exp(d) - d - 1, -10, 10))
            probs = torch.softmax(row, dim=-1)
            ent_terms.append(-(probs * torch.log_softmax(row, dim=-1)).sum())
    pg, kl, ent = (torch.stack(x).mean() for x in (pg_terms, kl_terms, ent_terms))
    return pg + cfg.kl_coef * kl - cfg.entropy_coef * ent


def test_masked_loss_equals_the_loss_over_unmasked_tokens_by_hand() -> None:
    policy = build_tiny(TinyModel(vocab_size=64, hidden_size=16, num_layers=1, num_heads=2))
    ref = copy.deepcopy(policy).requires_grad_(False)
    with torch.no_grad():
        for param in ref.parameters():
            param.add_(0.2 * torch.randn_like(param))
    cfg = GrpoLossConfig(clip_low=0.2, clip_high=0.28, kl_coef=0.1, entropy_coef=0.01)
    batch_samples = samples()

    batch = pack(batch_samples, CPU)
    logits = response_logits(policy, batch, TEMPERATURE)
    logp = token_logprobs(logits, batch.response_ids)
    with torch.no_grad():
        ref_logp = token_logprobs(response_logits(ref, batch, TEMPERATURE), batch.response_ids)
    out = grpo_loss(
        cfg,
        log_prob=logp,
        old_log_prob=batch.old_logprobs,
        advantages=batch.advantages,
        mask=batch.response_mask,
        kl_tokens=kl_penalty(logp, ref_logp, cfg.kl_type),
        entropy_tokens=entropy_from_logits(logits),
    )
    out.loss.backward()  # type: ignore[no-untyped-call]
    packed_grads = [p.grad.clone() for p in policy.parameters() if p.grad is not None]
    policy.zero_grad()

    expected = by_hand(policy, ref, batch_samples, cfg)
    expected.backward()  # type: ignore[no-untyped-call]
    hand_grads = [p.grad for p in policy.parameters() if p.grad is not None]

    assert abs(float(out.loss.detach()) - float(expected.detach())) < 1e-5
    assert len(packed_grads) == len(hand_grads) > 0
    for a, b in zip(packed_grads, hand_grads, strict=True):
        assert torch.allclose(a, b, atol=1e-6, rtol=1e-4)

    full_mask = pack([replace(s, loss_mask=None) for s in batch_samples], CPU).response_mask
    unmasked = grpo_loss(
        cfg,
        log_prob=logp.detach(),
        old_log_prob=batch.old_logprobs,
        advantages=batch.advantages,
        mask=full_mask,
    )
    assert abs(float(unmasked.pg_loss) - float(out.pg_loss)) > 1e-3  # the mask matters here
