"""One GRPO optimizer step over prepared samples: micro-batches, gradient accumulation, clipping.

Loss per micro-batch as verl computes it (docs/reference.md#grpo), divided by the number of
micro-batches, backward per micro-batch, then grad-norm clipping and one AdamW step. The
importance ratio uses the behaviour log-probs stored with each sample. Non-finite gradient norms
skip the update (as verl does) and are reported.

Diagnostics are computed at every step whatever the loss coefficients: the policy entropy, and the
KL to the reference whenever a reference is given (``ref_logits``; the trainer passes one when
``grpo.kl_coef > 0`` or ``grpo.log_ref_kl``). Terms whose coefficient is 0 are computed detached,
so they cost a softmax (entropy) or one no-grad forward (reference), never a backward pass.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import torch

from rlvr_world.devices import autocast
from rlvr_world.grpo.groups import TrainSample
from rlvr_world.grpo.loss import (
    GrpoLossConfig,
    entropy_from_logits,
    full_kl,
    grpo_loss,
    kl_penalty,
)
from trainer.config import TrainerConfig
from trainer.model import PackedBatch, pack, response_logits, token_logprobs

RefLogits = Callable[[PackedBatch], torch.Tensor]


@dataclass(frozen=True)
class StepStats:
    """Scalars of one optimizer step (averaged over micro-batches)."""

    loss: float
    pg_loss: float
    kl: float  # KL to the reference (token mean); 0.0 when no reference was given
    entropy: float  # policy entropy per response token
    clipfrac: float
    clipfrac_lower: float
    ppo_kl: float
    grad_norm: float
    reward_mean: float
    tokens: int
    seconds: float
    skipped: bool


def loss_config(cfg: TrainerConfig) -> GrpoLossConfig:
    """The loss settings of ``cfg.grpo`` (``clip_ratio_c`` only with ``dual_clip``)."""
    g = cfg.grpo
    return GrpoLossConfig(
        clip_low=g.clip_low,
        clip_high=g.clip_high,
        clip_ratio_c=g.clip_ratio_c if g.dual_clip else None,
        kl_type=g.kl_type,
        kl_coef=g.kl_coef,
        entropy_coef=g.entropy_coef,
        agg_mode=g.loss_agg_mode,
    )


def _chunks(samples: Sequence[TrainSample], size: int) -> Iterator[Sequence[TrainSample]]:
    for i in range(0, len(samples), size):
        yield samples[i : i + size]


def _kl_tokens(
    lcfg: GrpoLossConfig,
    logits: torch.Tensor,
    logp: torch.Tensor,
    batch: PackedBatch,
    *,
    ref_logits: RefLogits | None,
    device: torch.device,
    precision: str,
) -> torch.Tensor | None:
    """Per-token KL to the reference (None without one); detached when ``kl_coef`` is 0."""
    if ref_logits is None:
        return None
    with torch.no_grad(), autocast(device, precision):
        ref = ref_logits(batch)
    if lcfg.kl_coef <= 0:
        logits, logp = logits.detach(), logp.detach()
    if lcfg.kl_type == "full":
        return full_kl(logits, ref)
    return kl_penalty(logp, token_logprobs(ref, batch.response_ids), lcfg.kl_type)


def train_step(
    cfg: TrainerConfig,
    policy: torch.nn.Module,
    ref_logits: RefLogits | None,
    optimizer: torch.optim.Optimizer,
    samples: Sequence[TrainSample],
    *,
    device: torch.device,
    precision: str = "fp32",
) -> StepStats:
    """Forward/backward every micro-batch, clip, step. ``ref_logits`` None: no KL term and no KL
    diagnostic; given with ``kl_coef`` 0: the KL is measured, not trained on. ``precision``
    (resolved: ``fp32`` or ``bf16``): with ``bf16`` the forward passes run under bf16 autocast,
    while the weights, gradients and optimizer state stay float32 and the loss is taken in
    float32 (``response_logits`` casts the gathered logits)."""
    start = time.perf_counter()
    lcfg = loss_config(cfg)
    micro = list(_chunks(samples, cfg.batch.micro_batch_size))
    policy.train()
    optimizer.zero_grad(set_to_none=True)
    sums = dict.fromkeys(
        ("loss", "pg_loss", "kl", "entropy", "clipfrac", "clipfrac_lower", "ppo_kl"), 0.0
    )
    tokens = 0
    for mb in micro:
        batch = pack(mb, device)
        with autocast(device, precision):
            logits = response_logits(policy, batch, cfg.model.temperature)
        logp = token_logprobs(logits, batch.response_ids)
        kl_tokens = _kl_tokens(
            lcfg, logits, logp, batch, ref_logits=ref_logits, device=device, precision=precision
        )
        entropy = entropy_from_logits(logits if lcfg.entropy_coef > 0 else logits.detach())
        out = grpo_loss(
            lcfg,
            log_prob=logp,
            old_log_prob=batch.old_logprobs,
            advantages=batch.advantages,
            mask=batch.response_mask,
            kl_tokens=kl_tokens,
            entropy_tokens=entropy,
        )
        torch.autograd.backward(out.loss / len(micro))  # Tensor.backward is unannotated
        tokens += int(batch.response_mask.sum().item())
        for key in sums:
            sums[key] += float(getattr(out, key).detach()) / len(micro)
    params = [p for p in policy.parameters() if p.requires_grad]
    grad_norm = float(torch.nn.utils.clip_grad_norm_(params, cfg.optim.grad_clip))
    skipped = not math.isfinite(grad_norm)
    if skipped:
        optimizer.zero_grad(set_to_none=True)
    else:
        optimizer.step()
    return StepStats(
        **sums,
        grad_norm=grad_norm,
        reward_mean=sum(s.reward for s in samples) / len(samples),
        tokens=tokens,
        seconds=time.perf_counter() - start,
        skipped=skipped,
    )
