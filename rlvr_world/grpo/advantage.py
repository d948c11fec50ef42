"""Group-normalised outcome advantage (GRPO), as verl's ``compute_grpo_outcome_advantage``.

For each group g (samples sharing a prompt): ``A_i = (s_i - mean_g) / (std_g + eps)`` with the
*unbiased* std (N-1); a group of one has mean 0 and std 1 (so A = s); an all-equal group gets
A = 0. ``norm_adv_by_std=False`` gives ``A_i = s_i - mean_g`` (Dr. GRPO). ``uniform_std`` (the
vid_wm fork's option, off in the released scripts) divides by the mean of the groups' stds.

Samples marked invalid are excluded from the group statistics and get advantage 0. This module
does not drop groups; ``rlvr_world.grpo.groups`` does.

``token_normalized_scores`` is the per-token form for samples that carry a reward per token
(a video frame scored per patch): for one group's rewards ``r (n, L)``, each position is centred
on the group, ``c_it = r_it - mean_i r_it``, and divided by one scale for the whole group, the
root of the mean over positions of the unbiased per-position variance: ``A_it = c_it / (s + eps)``,
``s^2 = sum_it c_it^2 / ((n - 1) L)``. A token whose patch came out the same in every sample gets
0, and the group's advantages keep GRPO's unit variance (not verl; our extension).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

import torch


def _group_stats(scores: torch.Tensor, members: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    if len(members) == 1:
        return torch.tensor(0.0, dtype=scores.dtype), torch.tensor(1.0, dtype=scores.dtype)
    group = scores[members]
    return group.mean(), group.std()  # torch.std is unbiased by default


def group_normalized_scores(
    scores: torch.Tensor,
    index: Sequence[Hashable],
    *,
    epsilon: float = 1e-6,
    norm_adv_by_std: bool = True,
    uniform_std: bool = False,
    valid: torch.Tensor | None = None,
) -> torch.Tensor:
    """Per-sample advantage from scalar scores (shape (B,)) and group ids (length B)."""
    if scores.dim() != 1 or len(index) != scores.shape[0]:
        raise ValueError(f"scores must be 1-D with one group id each, got {tuple(scores.shape)}")
    valid_mask = torch.ones_like(scores, dtype=torch.bool) if valid is None else valid.bool()
    members: dict[Hashable, list[int]] = {}
    for i, gid in enumerate(index):
        if bool(valid_mask[i]):
            members.setdefault(gid, []).append(i)
    stats = {gid: _group_stats(scores, idx) for gid, idx in members.items()}
    out = torch.zeros_like(scores)
    if not stats:
        return out
    shared_std = torch.stack([std for _, std in stats.values()]).mean() if uniform_std else None
    for gid, idx in members.items():
        mean, std = stats[gid]
        denom = (shared_std if shared_std is not None else std) + epsilon
        centred = scores[idx] - mean
        out[idx] = centred / denom if norm_adv_by_std else centred
    return out


def grpo_outcome_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: Sequence[Hashable],
    *,
    epsilon: float = 1e-6,
    norm_adv_by_std: bool = True,
    uniform_std: bool = False,
) -> torch.Tensor:
    """verl's signature: (B, T) token rewards summed per row, advantage broadcast over the mask."""
    with torch.no_grad():
        scores = token_level_rewards.sum(dim=-1)
        adv = group_normalized_scores(
            scores,
            index,
            epsilon=epsilon,
            norm_adv_by_std=norm_adv_by_std,
            uniform_std=uniform_std,
        )
        return adv.unsqueeze(-1) * response_mask


def token_normalized_scores(
    rewards: torch.Tensor, *, epsilon: float = 1e-6, norm_adv_by_std: bool = True
) -> torch.Tensor:
    """Per-token advantages ``(n, L)`` of one group's per-token rewards ``(n, L)``, n >= 2
    (module docstring); ``norm_adv_by_std=False`` keeps the centred rewards."""
    if rewards.dim() != 2 or rewards.shape[0] < 2 or rewards.shape[1] < 1:  # noqa: PLR2004
        raise ValueError(
            f"rewards must be (n >= 2 samples, L >= 1 tokens), got {tuple(rewards.shape)}"
        )
    centred = rewards - rewards.mean(dim=0, keepdim=True)
    if not norm_adv_by_std:
        return centred
    n, length = rewards.shape
    scale = torch.sqrt(centred.square().sum() / ((n - 1) * length))
    return centred / (scale + epsilon)
