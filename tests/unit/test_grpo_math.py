"""Hand-computed GRPO cases: advantages, dual-clip, aggregation, KL, validity rules."""

from __future__ import annotations

import math

import pytest
import torch

from rlvr_world.grpo.advantage import group_normalized_scores
from rlvr_world.grpo.groups import prepare_groups
from rlvr_world.grpo.loss import (
    GrpoLossConfig,
    agg_loss,
    entropy_from_logits,
    full_kl,
    grpo_loss,
    kl_penalty,
    policy_loss,
)
from rlvr_world.queue.schema import ScoredGroup, ScoredSample
from rlvr_world.rewards.types import Status

torch.set_num_threads(1)


def _t(x: object) -> torch.Tensor:
    return torch.tensor(x, dtype=torch.float64)


def test_all_equal_group_has_zero_advantage() -> None:
    assert group_normalized_scores(_t([1.0, 1.0, 1.0]), list("ggg")).tolist() == [0.0] * 3
    # 0.7 is not exact in binary: mean - x is ~1e-16, divided by (0 + eps) stays ~1e-10
    adv = group_normalized_scores(_t([0.7, 0.7, 0.7]), list("ggg"))
    assert adv.abs().max().item() < 1e-9


def test_single_sample_group_uses_mean_zero_std_one() -> None:
    adv = group_normalized_scores(_t([2.5]), ["s"], epsilon=1e-6)
    assert adv.item() == pytest.approx(2.5 / (1 + 1e-6))


def test_two_sample_group_unbiased_std() -> None:
    # mean 0.5, unbiased std sqrt(0.5) -> A = ±0.5 / 0.70710678
    adv = group_normalized_scores(_t([1.0, 0.0]), ["g", "g"], epsilon=0.0)
    assert adv.tolist() == pytest.approx([1 / math.sqrt(2), -1 / math.sqrt(2)])


def test_norm_adv_by_std_off_only_centres() -> None:
    adv = group_normalized_scores(_t([3.0, 1.0, 2.0]), list("ggg"), norm_adv_by_std=False)
    assert adv.tolist() == pytest.approx([1.0, -1.0, 0.0])


def test_invalid_samples_excluded_from_group_statistics() -> None:
    valid = torch.tensor([True, True, False])
    adv = group_normalized_scores(_t([1.0, 0.0, 100.0]), list("ggg"), valid=valid, epsilon=0.0)
    assert adv.tolist() == pytest.approx([1 / math.sqrt(2), -1 / math.sqrt(2), 0.0])


def _sample(reward: float | None, status: Status = Status.OK) -> ScoredSample:
    return ScoredSample(token_ids=[1, 2], logprobs=[-0.5, -0.25], reward=reward, status=status)


def _group(gid: str, samples: list[ScoredSample]) -> ScoredGroup:
    return ScoredGroup(
        group_id=gid,
        prompt_id="p",
        task="text_game",
        policy_version=0,
        prompt_token_ids=[5],
        samples=samples,
    )


def test_prepare_groups_drops_failed_samples_and_small_groups() -> None:
    ok = _group("a", [_sample(1.0), _sample(0.0), _sample(None, Status.TIMEOUT)])
    lonely = _group("b", [_sample(1.0), _sample(None, Status.ERROR), _sample(0.0, Status.ERROR)])
    single = _group("c", [_sample(3.0)])
    batch = prepare_groups([ok, lonely, single])
    assert batch.dropped == {"b": "too_few_valid", "c": "too_few_valid"}
    assert [s.group_id for s in batch.samples] == ["a", "a"]
    assert [s.advantage for s in batch.samples] == pytest.approx(
        [1 / (math.sqrt(0.5) + 1e-6) * 0.5, -1 / (math.sqrt(0.5) + 1e-6) * 0.5]
    )
    assert all(math.isfinite(s.advantage) for s in batch.samples)


def test_unparseable_answers_train_with_the_configured_reward_only() -> None:
    """The paper's GRPO gives an answer its reward cannot read a 0; with unparseable_reward=None
    (the strict choice) such samples are left out like errors. Errors never train."""
    group = _group(
        "g",
        [_sample(1.0), _sample(0.0, Status.UNPARSEABLE), _sample(None, Status.ERROR)],
    )
    paper = prepare_groups([group], unparseable_reward=0.0)
    assert [s.reward for s in paper.samples] == [1.0, 0.0]
    assert paper.samples[0].advantage > 0 > paper.samples[1].advantage
    strict = prepare_groups([group], unparseable_reward=None)
    assert strict.samples == [] and strict.dropped == {"g": "too_few_valid"}
    shifted = prepare_groups([group], unparseable_reward=-0.5)
    assert [s.reward for s in shifted.samples] == [1.0, -0.5]


def test_dual_clip_caps_negative_advantage_loss() -> None:
    # ratio = e^2 = 7.39 > c = 3, A = -1: PPO-clip gives max(7.39, 1.2) = 7.39; dual-clip caps at 3.
    old, new, adv, mask = _t([[0.0]]), _t([[2.0]]), _t([[-1.0]]), _t([[1.0]])
    capped = policy_loss(old, new, adv, mask, clip_ratio_c=3.0)
    plain = policy_loss(old, new, adv, mask, clip_ratio_c=None)
    assert capped.loss.item() == pytest.approx(3.0)
    assert plain.loss.item() == pytest.approx(math.exp(2.0))
    assert capped.clipfrac_lower.item() == 1.0


def test_dual_clip_leaves_positive_advantage_alone() -> None:
    # A = +1, ratio e^2: clipped at 1 + 0.2 -> loss = -1.2 (max of -7.39 and -1.2)
    out = policy_loss(_t([[0.0]]), _t([[2.0]]), _t([[1.0]]), _t([[1.0]]), clip_ratio_c=3.0)
    assert out.loss.item() == pytest.approx(-1.2)
    assert out.clipfrac.item() == 1.0


def test_agg_modes_by_hand() -> None:
    loss = _t([[1.0, 2.0, 3.0], [4.0, 0.0, 0.0]])
    mask = _t([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0]])
    assert agg_loss(loss, mask, "token-mean").item() == pytest.approx(10 / 4)
    assert agg_loss(loss, mask, "token-sum").item() == pytest.approx(10)
    assert agg_loss(loss, mask, "seq-mean-token-sum").item() == pytest.approx((6 + 4) / 2)
    assert agg_loss(loss, mask, "seq-mean-token-mean").item() == pytest.approx((2 + 4) / 2)
    assert agg_loss(loss, mask, "seq-mean-token-sum-norm").item() == pytest.approx(5 / 3)
    with pytest.raises(ValueError, match="loss_agg_mode"):
        agg_loss(loss, mask, "mean")


def test_empty_mask_gives_zero_not_nan() -> None:
    loss = _t([[1.0, 2.0]])
    mask = _t([[0.0, 0.0]])
    for mode in ("token-mean", "seq-mean-token-sum", "seq-mean-token-mean"):
        assert agg_loss(loss, mask, mode).item() == 0.0


def test_low_var_kl_by_hand_and_clamp() -> None:
    lp, ref = _t([-1.0, -20.0]), _t([-2.0, -1.0])
    got = kl_penalty(lp, ref, "low_var_kl")
    assert got[0].item() == pytest.approx(math.exp(-1) + 1 - 1)
    assert got[1].item() == 10.0  # exp(19) - 19 - 1 clamped
    with pytest.raises(ValueError, match="kl_type"):
        kl_penalty(lp, ref, "bogus")


def test_straight_through_kl_has_k2_gradient() -> None:
    lp = _t([-1.0]).requires_grad_(True)
    ref = _t([-2.0])
    val = kl_penalty(lp, ref, "k3+")
    val.sum().backward()
    assert val.item() == pytest.approx(math.exp(-1.0))
    assert lp.grad is not None and lp.grad.item() == pytest.approx(1.0)  # d/dlp 0.5 (lp-ref)^2


def test_full_kl_zero_for_equal_and_positive_otherwise() -> None:
    logits = _t([[0.0, 1.0, 2.0]])
    assert full_kl(logits, logits).item() == pytest.approx(0.0, abs=1e-7)
    assert full_kl(logits, _t([[2.0, 1.0, 0.0]])).item() > 0


def test_entropy_uniform_is_log_vocab() -> None:
    assert entropy_from_logits(torch.zeros(4)).item() == pytest.approx(math.log(4))


def test_grpo_loss_combines_terms() -> None:
    cfg = GrpoLossConfig(kl_coef=0.5, entropy_coef=0.1, clip_ratio_c=None)
    lp, mask = _t([[-1.0, -1.0]]), _t([[1.0, 1.0]])
    out = grpo_loss(
        cfg,
        log_prob=lp,
        old_log_prob=lp,
        advantages=_t([[2.0, 2.0]]),
        mask=mask,
        kl_tokens=_t([[0.2, 0.4]]),
        entropy_tokens=_t([[1.0, 3.0]]),
    )
    assert out.loss.item() == pytest.approx(-2.0 + 0.5 * 0.3 - 0.1 * 2.0)
    assert out.pg_loss.item() == pytest.approx(-2.0)


def _cut(reward: float | None, status: Status = Status.OK) -> ScoredSample:
    return ScoredSample(
        token_ids=[1, 2], logprobs=[-0.5, -0.25], reward=reward, status=status, truncated=True
    )


def test_truncated_samples_train_with_the_truncated_reward() -> None:
    """DAPO's overlong punishment: a sample cut at max_tokens trains with ``truncated_reward``
    whatever it was scored (the scorer ignores text after a complete answer, so an answer that
    never stops would otherwise be free). Unset, the scored reward stands."""
    group = _group("g", [_sample(1.0), _cut(1.0), _cut(0.0, Status.UNPARSEABLE)])
    kept = prepare_groups([group], unparseable_reward=0.0)
    assert [s.reward for s in kept.samples] == [1.0, 1.0, 0.0]
    punished = prepare_groups([group], unparseable_reward=0.0, truncated_reward=0.0)
    assert [s.reward for s in punished.samples] == [1.0, 0.0, 0.0]
    assert punished.samples[0].advantage > 0 > punished.samples[1].advantage
    # a truncated sample that would be left out (error, or unparseable without a reward) stays out
    strict = prepare_groups([group], unparseable_reward=None, truncated_reward=-1.0)
    assert [s.reward for s in strict.samples] == [1.0, -1.0]
    errors = _group("e", [_sample(1.0), _sample(0.5), _cut(None, Status.ERROR)])
    assert len(prepare_groups([errors], truncated_reward=0.0).samples) == 2


def test_zero_spread_counts_kept_groups_whose_rewards_are_all_equal() -> None:
    flat = _group("a", [_sample(1.0), _sample(1.0)])
    mixed = _group("b", [_sample(1.0), _sample(0.0)])
    flattened = _group("c", [_cut(1.0), _cut(1.0)])  # equal after the truncation rule
    dropped = _group("d", [_sample(1.0)])
    batch = prepare_groups([flat, mixed, flattened, dropped], truncated_reward=0.0)
    assert batch.zero_spread == 2
    assert batch.dropped == {"d": "too_few_valid"}
