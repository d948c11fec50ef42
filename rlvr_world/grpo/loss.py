"""GRPO loss terms as verl's ``core_algos`` computes them (docs/reference.md#grpo).

* ``kl_penalty``: per-token KL estimators ``kl``/``k1``, ``abs``, ``mse``/``k2``,
  ``low_var_kl``/``k3`` (clamped to ±10), with verl's ``+`` straight-through variants (k2
  gradient), and ``full_kl`` over the whole vocabulary when logits are available.
* ``agg_loss``: ``token-mean``, ``token-sum``, ``seq-mean-token-sum``, ``seq-mean-token-mean``,
  ``seq-mean-token-sum-norm``; fully masked rows are left out of sequence means (verl 0.9).
* ``policy_loss``: PPO clipped surrogate with asymmetric clip range and optional dual-clip (vid_wm
  fork: for A < 0 the loss is capped at ``-A * c``). The log-ratio is clamped to ±20 before
  ``exp`` (verl 0.9); the lang_wm fork had no dual-clip, select it with ``clip_ratio_c=None``.
  ``clipfrac_lower`` is the corrected metric (the fork always logged 0: docs/reference.md#quirks,
  Q11).
* ``entropy_from_logits`` and ``grpo_loss`` (pg - c_ent * entropy + beta * KL).

Pure torch, no I/O; does not compute log-probs from a model (the trainer does).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

import torch

KlType = Literal["kl", "k1", "abs", "mse", "k2", "low_var_kl", "k3", "k1+", "k3+", "low_var_kl+"]
AggMode = Literal[
    "token-mean",
    "token-sum",
    "seq-mean-token-sum",
    "seq-mean-token-mean",
    "seq-mean-token-sum-norm",
]
KL_TYPES: tuple[str, ...] = (*get_args(KlType), "full")
AGG_MODES: tuple[str, ...] = get_args(AggMode)


def masked_mean(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean over the positions where mask is 1 (0 when the mask is empty, never NaN)."""
    return (values * mask).sum() / mask.sum().clamp_min(1.0)


def _kl_forward(logprob: torch.Tensor, ref_logprob: torch.Tensor, kl_type: str) -> torch.Tensor:
    if kl_type in ("kl", "k1"):
        return logprob - ref_logprob
    if kl_type == "abs":
        return (logprob - ref_logprob).abs()
    if kl_type in ("mse", "k2"):
        return 0.5 * (logprob - ref_logprob).square()
    if kl_type in ("low_var_kl", "k3"):
        kl = torch.clamp(ref_logprob - logprob, min=-20.0, max=20.0)
        return torch.clamp(torch.exp(kl) - kl - 1.0, min=-10.0, max=10.0)
    raise ValueError(f"kl_type must be one of {KL_TYPES}, got {kl_type!r}")


def kl_penalty(logprob: torch.Tensor, ref_logprob: torch.Tensor, kl_type: str) -> torch.Tensor:
    """Per-token KL estimate between the policy and the reference (J. Schulman's k1/k2/k3)."""
    base = kl_type.removesuffix("+")
    forward = _kl_forward(logprob, ref_logprob, base)
    if not kl_type.endswith("+") or base in ("mse", "k2"):
        return forward
    backward = 0.5 * (logprob - ref_logprob).square()  # k2 gradient, forward value unchanged
    return backward - backward.detach() + forward.detach()


def full_kl(logits: torch.Tensor, ref_logits: torch.Tensor) -> torch.Tensor:
    """Exact per-token KL(pi || ref) over the vocabulary; logits have shape (..., V)."""
    logp = torch.log_softmax(logits.float(), dim=-1)
    ref_logp = torch.log_softmax(ref_logits.float(), dim=-1)
    return (logp.exp() * (logp - ref_logp)).sum(dim=-1)


def agg_loss(
    loss_mat: torch.Tensor,
    loss_mask: torch.Tensor,
    mode: str,
    loss_scale_factor: float | None = None,
) -> torch.Tensor:
    """Aggregate a (B, T) loss matrix into a scalar (verl ``agg_loss`` with dp_size 1)."""
    if mode == "token-mean":
        return (loss_mat * loss_mask).sum() / loss_mask.sum().clamp_min(1.0)
    if mode == "token-sum":
        return (loss_mat * loss_mask).sum()
    row_tokens = loss_mask.sum(dim=-1)
    rows = (row_tokens > 0).to(loss_mat.dtype)
    n_rows = rows.sum().clamp_min(1.0)
    if mode in ("seq-mean-token-sum", "seq-mean-token-sum-norm"):
        seq = (loss_mat * loss_mask).sum(dim=-1)
        loss = (seq * rows).sum() / n_rows
        if mode == "seq-mean-token-sum-norm":
            loss = loss / (loss_scale_factor or loss_mask.shape[-1])
        return loss
    if mode == "seq-mean-token-mean":
        seq = (loss_mat * loss_mask).sum(dim=-1) / (row_tokens + 1e-8)
        return (seq * rows).sum() / n_rows
    raise ValueError(f"loss_agg_mode must be one of {AGG_MODES}, got {mode!r}")


@dataclass(frozen=True)
class PolicyLoss:
    """Clipped surrogate loss and its diagnostics (all scalars)."""

    loss: torch.Tensor
    clipfrac: torch.Tensor
    ppo_kl: torch.Tensor
    clipfrac_lower: torch.Tensor


def policy_loss(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
    clip_ratio_c: float | None = 3.0,
    agg_mode: str = "token-mean",
) -> PolicyLoss:
    """PPO-clip loss with the importance ratio exp(log_prob - old_log_prob) per token."""
    if clip_ratio_c is not None and clip_ratio_c <= 1.0:
        raise ValueError(f"clip_ratio_c must be > 1 for dual-clip, got {clip_ratio_c}")
    log_ratio = torch.clamp(log_prob - old_log_prob, min=-20.0, max=20.0)
    ratio = torch.exp(log_ratio)
    ppo_kl = masked_mean(-log_ratio, mask)
    loss1 = -advantages * ratio
    loss2 = -advantages * torch.clamp(ratio, 1.0 - clip_low, 1.0 + clip_high)
    clipped = torch.maximum(loss1, loss2)
    clipfrac = masked_mean(torch.gt(loss2, loss1).float(), mask)
    if clip_ratio_c is None:
        per_token = clipped
        clipfrac_lower = torch.zeros((), dtype=clipped.dtype)
    else:
        loss3 = -advantages * clip_ratio_c
        negative = (advantages < 0).float()
        clipfrac_lower = masked_mean(torch.gt(clipped, loss3).float() * negative, mask)
        per_token = torch.where(advantages < 0, torch.minimum(loss3, clipped), clipped)
    loss = agg_loss(per_token, mask, agg_mode)
    return PolicyLoss(loss, clipfrac.detach(), ppo_kl.detach(), clipfrac_lower.detach())


def entropy_from_logits(logits: torch.Tensor) -> torch.Tensor:
    """Per-position entropy of the categorical distribution given by logits (..., V)."""
    logits = logits.float()
    probs = torch.softmax(logits, dim=-1)
    return torch.logsumexp(logits, dim=-1) - (probs * logits).sum(dim=-1)


@dataclass(frozen=True)
class GrpoLossConfig:
    """The coefficients of the GRPO objective (docs/reference.md#grpo defaults)."""

    clip_low: float = 0.2
    clip_high: float = 0.2
    clip_ratio_c: float | None = 3.0
    kl_type: str = "low_var_kl"
    kl_coef: float = 0.001
    entropy_coef: float = 0.0
    agg_mode: str = "token-mean"


@dataclass(frozen=True)
class GrpoLoss:
    """The total loss to backpropagate and its detached parts."""

    loss: torch.Tensor
    pg_loss: torch.Tensor
    kl: torch.Tensor
    entropy: torch.Tensor
    clipfrac: torch.Tensor
    ppo_kl: torch.Tensor
    clipfrac_lower: torch.Tensor


def grpo_loss(
    cfg: GrpoLossConfig,
    *,
    log_prob: torch.Tensor,
    old_log_prob: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    kl_tokens: torch.Tensor | None = None,
    entropy_tokens: torch.Tensor | None = None,
) -> GrpoLoss:
    """pg_loss - entropy_coef * entropy + kl_coef * KL, each aggregated with ``cfg.agg_mode``.

    ``kl_tokens`` is the per-token KL (``kl_penalty`` or ``full_kl``); None means no KL term.
    """
    pg = policy_loss(
        old_log_prob,
        log_prob,
        advantages,
        mask,
        clip_low=cfg.clip_low,
        clip_high=cfg.clip_high,
        clip_ratio_c=cfg.clip_ratio_c,
        agg_mode=cfg.agg_mode,
    )
    zero = torch.zeros((), dtype=pg.loss.dtype, device=pg.loss.device)
    kl = agg_loss(kl_tokens, mask, cfg.agg_mode) if kl_tokens is not None else zero
    ent = agg_loss(entropy_tokens, mask, cfg.agg_mode) if entropy_tokens is not None else zero
    total = pg.loss + cfg.kl_coef * kl - cfg.entropy_coef * ent
    return GrpoLoss(
        total,
        pg.loss.detach(),
        kl.detach(),
        ent.detach(),
        pg.clipfrac,
        pg.ppo_kl,
        pg.clipfrac_lower,
    )
