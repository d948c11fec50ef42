"""Scored groups -> per-sample GRPO advantages, with the validity rules of the trainer.

Samples whose status is not ``ok`` are excluded from the group statistics and from the loss, except
``unparseable`` answers when ``unparseable_reward`` is set: those enter with that reward (the
paper's GRPO gives an answer its reward function cannot read a 0, and format failures of a fresh
model are exactly what RL has to fix). Statuses stay honest on the wire; the choice is the
trainer's.
A sample cut at the token limit (``truncated``: it could have stopped and did not) trains with
``truncated_reward`` when that is set, whatever it was scored: DAPO's overlong punishment. Without
it, an answer that never stops is free (the text-game scorers read the first complete answer and
ignore what follows), and a policy drifts there (FINDINGS 2026-12-01). Left unset, the sample keeps
its scored reward.
A group left with fewer than two valid samples is dropped (reason ``too_few_valid``): its
advantage would be 0 (all-equal) or the raw reward (singleton rule), neither a useful signal.
``PreparedBatch.zero_spread`` counts the kept groups whose training rewards are all equal: their
advantages are 0, so they add no policy gradient (only KL and entropy terms).
Rewards reaching the advantage are finite by the schema's validation, so no NaN reaches the loss.
A sample's ``loss_mask`` (tokens the rollout forced) travels with it to the trainer's response mask;
masked tokens still count as the sample's tokens for the group statistics (one reward per sample).

``token_credit`` λ in (0, 1] mixes in per-token advantages where a group can have them: every
valid sample carries ``token_rewards`` of one common length and trains with its scored reward
(not ``truncated_reward`` or ``unparseable_reward``). Then each token's advantage is
``(1 - λ) A_i + λ A_it`` with ``A_it`` from ``advantage.token_normalized_scores``; other groups
keep ``A_i`` on every token. ``PreparedBatch.token_credit_groups`` counts the groups that had it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from rlvr_world.grpo.advantage import group_normalized_scores, token_normalized_scores
from rlvr_world.queue.schema import ScoredGroup, ScoredSample
from rlvr_world.rewards.types import Status

MIN_VALID_SAMPLES = 2


@dataclass(frozen=True)
class TrainSample:
    """One valid response with everything the loss needs."""

    group_id: str
    prompt_token_ids: tuple[int, ...]
    token_ids: tuple[int, ...]
    behaviour_logprobs: tuple[float, ...]
    reward: float
    advantage: float
    #: Per response token, 1 trained and 0 left out of every loss term; None: all trained.
    loss_mask: tuple[int, ...] | None = None
    #: Per response token, its advantage (``token_credit``); None: ``advantage`` on every token.
    token_advantages: tuple[float, ...] | None = None


@dataclass(frozen=True)
class PreparedBatch:
    """Valid samples with advantages, plus the groups that were dropped and why."""

    samples: list[TrainSample]
    dropped: dict[str, str] = field(default_factory=dict)
    #: Kept groups whose training rewards are all equal (advantage 0 for every sample).
    zero_spread: int = 0
    #: Kept groups trained with per-token advantages (``token_credit`` > 0).
    token_credit_groups: int = 0

    @property
    def group_ids(self) -> list[str]:
        """The ids of the groups with a sample to train, sorted."""
        return sorted({s.group_id for s in self.samples})


def training_reward(
    sample: ScoredSample,
    unparseable_reward: float | None,
    truncated_reward: float | None = None,
) -> float | None:
    """The reward a sample trains with, or None when it is left out."""
    if sample.truncated and truncated_reward is not None and _scored(sample, unparseable_reward):
        return truncated_reward
    if sample.ok and sample.reward is not None:  # the schema refuses an ok sample without one
        return float(sample.reward)
    if sample.status is Status.UNPARSEABLE and unparseable_reward is not None:
        return unparseable_reward
    return None


def _scored(sample: ScoredSample, unparseable_reward: float | None) -> bool:
    """Whether the sample takes part at all (ok, or unparseable with a reward for it)."""
    return sample.ok or (sample.status is Status.UNPARSEABLE and unparseable_reward is not None)


def _mask(sample: ScoredSample) -> tuple[int, ...] | None:
    return tuple(sample.loss_mask) if sample.loss_mask is not None else None


def zero_spread(
    group: ScoredGroup,
    *,
    unparseable_reward: float | None = None,
    truncated_reward: float | None = None,
) -> bool:
    """Whether the group's training rewards are all equal (or fewer than two take part): every
    advantage would be 0, so the group adds no policy gradient."""
    rewards = {
        r
        for s in group.samples
        if (r := training_reward(s, unparseable_reward, truncated_reward)) is not None
    }
    return len(rewards) <= 1


def prepare_groups(
    groups: Sequence[ScoredGroup],
    *,
    epsilon: float = 1e-6,
    norm_adv_by_std: bool = True,
    unparseable_reward: float | None = None,
    truncated_reward: float | None = None,
    token_credit: float = 0.0,
) -> PreparedBatch:
    """Compute advantages over the valid samples of each group; drop groups with < 2 valid.
    ``token_credit`` (0..1): the weight of per-token advantages (module docstring)."""
    if not 0.0 <= token_credit <= 1.0:
        raise ValueError(f"token_credit must lie in [0, 1], got {token_credit!r}")
    kept: list[tuple[ScoredGroup, int]] = []
    rewards: list[float] = []
    dropped: dict[str, str] = {}
    zero_spread = 0
    for group in groups:
        trained = [training_reward(s, unparseable_reward, truncated_reward) for s in group.samples]
        valid = [r for r in trained if r is not None]
        if len(valid) < MIN_VALID_SAMPLES:
            dropped[group.group_id] = "too_few_valid"
            continue
        zero_spread += max(valid) == min(valid)
        kept.extend((group, i) for i, r in enumerate(trained) if r is not None)
        rewards.extend(valid)
    if not kept:
        return PreparedBatch([], dropped)
    scores = torch.tensor(rewards, dtype=torch.float64)
    adv = group_normalized_scores(
        scores,
        [g.group_id for g, _ in kept],
        epsilon=epsilon,
        norm_adv_by_std=norm_adv_by_std,
    )
    per_token = (
        _token_advantages(
            kept,
            adv,
            scores,
            epsilon=epsilon,
            norm_adv_by_std=norm_adv_by_std,
            token_credit=token_credit,
        )
        if token_credit > 0
        else {}
    )
    samples = [
        TrainSample(
            group_id=g.group_id,
            prompt_token_ids=tuple(g.prompt_token_ids),
            token_ids=tuple(g.samples[i].token_ids),
            behaviour_logprobs=tuple(g.samples[i].logprobs),
            reward=float(scores[k]),
            advantage=float(adv[k]),
            loss_mask=_mask(g.samples[i]),
            token_advantages=per_token.get(k),
        )
        for k, (g, i) in enumerate(kept)
    ]
    groups_with = len({kept[k][0].group_id for k in per_token})
    return PreparedBatch(samples, dropped, zero_spread, groups_with)


def _token_advantages(
    kept: Sequence[tuple[ScoredGroup, int]],
    adv: torch.Tensor,
    scores: torch.Tensor,
    *,
    epsilon: float,
    norm_adv_by_std: bool,
    token_credit: float,
) -> dict[int, tuple[float, ...]]:
    """Per-token advantages by position in ``kept``, for the groups that can have them."""
    members: dict[str, list[int]] = {}
    for k, (g, _) in enumerate(kept):
        members.setdefault(g.group_id, []).append(k)
    out: dict[int, tuple[float, ...]] = {}
    for idx in members.values():
        rows = [kept[k][0].samples[kept[k][1]] for k in idx]
        rewards = [s.token_rewards for s in rows]
        if any(r is None for r in rewards) or len({len(r or ()) for r in rewards}) != 1:
            continue
        if any(float(scores[k]) != s.reward for k, s in zip(idx, rows, strict=True)):
            continue  # trains with truncated_reward / unparseable_reward: one reward per sample
        tok = token_normalized_scores(
            torch.tensor(rewards, dtype=torch.float64),
            epsilon=epsilon,
            norm_adv_by_std=norm_adv_by_std,
        )
        for row, k in enumerate(idx):
            mixed = (1.0 - token_credit) * adv[k] + token_credit * tok[row]
            out[k] = tuple(float(a) for a in mixed)
    return out
