"""Scored groups -> per-sample GRPO advantages, with the validity rules of the trainer.

Samples whose status is not ``ok`` are excluded from the group statistics and from the loss.
A group left with fewer than two valid samples is dropped (reason ``too_few_valid``): its
advantage would be 0 (all-equal) or the raw reward (singleton rule), neither a useful signal.
Rewards reaching the advantage are finite by the schema's validation, so no NaN reaches the loss.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from rlvr_world.grpo.advantage import group_normalized_scores
from rlvr_world.queue.schema import ScoredGroup

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


@dataclass(frozen=True)
class PreparedBatch:
    """Valid samples with advantages, plus the groups that were dropped and why."""

    samples: list[TrainSample]
    dropped: dict[str, str] = field(default_factory=dict)

    @property
    def group_ids(self) -> list[str]:
        return sorted({s.group_id for s in self.samples})


def prepare_groups(
    groups: Sequence[ScoredGroup],
    *,
    epsilon: float = 1e-6,
    norm_adv_by_std: bool = True,
) -> PreparedBatch:
    """Compute advantages over the valid samples of each group; drop groups with < 2 valid."""
    kept: list[tuple[ScoredGroup, int]] = []
    dropped: dict[str, str] = {}
    for group in groups:
        valid = [i for i, s in enumerate(group.samples) if s.ok]
        if len(valid) < MIN_VALID_SAMPLES:
            dropped[group.group_id] = "too_few_valid"
            continue
        kept.extend((group, i) for i in valid)
    if not kept:
        return PreparedBatch([], dropped)
    scores = torch.tensor(
        [float(g.samples[i].reward) for g, i in kept],  # type: ignore[arg-type]
        dtype=torch.float64,
    )
    adv = group_normalized_scores(
        scores,
        [g.group_id for g, _ in kept],
        epsilon=epsilon,
        norm_adv_by_std=norm_adv_by_std,
    )
    samples = [
        TrainSample(
            group_id=g.group_id,
            prompt_token_ids=tuple(g.prompt_token_ids),
            token_ids=tuple(g.samples[i].token_ids),
            behaviour_logprobs=tuple(g.samples[i].logprobs),
            reward=float(scores[k]),
            advantage=float(adv[k]),
        )
        for k, (g, i) in enumerate(kept)
    ]
    return PreparedBatch(samples, dropped)
