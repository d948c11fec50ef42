"""Balancing the terms of the video reward before RLVR.

GRPO ranks the samples of a group by their reward; when one term of ``-(sum_m w_m loss_m)``
varies much more within groups than the others, it alone decides the ranking (at 64x64 PushT the
perceptual distance moved about seven times as much as L1). With ``rl.balance_prompts`` > 0 the
run samples ``rl.group_size`` frames per train prompt with the MLE model, as the rollout would
(temperature ``rl.temperature``, no top-k), scores each term, and rescales the configured weights
so that every weighted term has the same mean within-group standard deviation, keeping the sum
of the weights:

    s_m = mean over groups of std_within_group(loss_m)
    w'_m = w_m * c / s_m,  with c such that sum_m w'_m = sum_m w_m

``balanced_weights`` is that formula (pure); ``measure_spread`` does the sampling and scoring.
Terms with zero spread (no sample differed) keep their weight. What it does not do: no
training; the weights are measured once, from the MLE model, and used by every seed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import NDArray

from rlvr_world.apps.video.evaluation import reward_weights
from rlvr_world.shapes import FRAMES_NDIM, MATRIX_NDIM

if TYPE_CHECKING:
    from transformers import PreTrainedModel

    from rlvr_world.apps.video.config import VideoRl
    from rlvr_world.rewards.video import PerceptualScorer
    from rlvr_world.video.codec import VideoTokenizer
    from rlvr_world.video.layout import LayoutVocab, TokenSequence

#: Samples per group a within-group standard deviation needs.
MIN_GROUP_SIZE = 2


def balanced_weights(weights: Mapping[str, float], spread: Mapping[str, float]) -> dict[str, float]:
    """``weights`` rescaled so every positive term has the same weighted ``spread`` (module
    docstring); their sum is kept. A term without a positive, finite spread keeps its weight."""
    active = {k: w for k, w in weights.items() if w > 0}
    if not active:
        raise ValueError("weights: no positive weight to balance")
    missing = sorted(k for k in active if k not in spread)
    if missing:
        raise ValueError(f"spread: no measurement for {', '.join(missing)}")
    usable = {k: w for k, w in active.items() if np.isfinite(spread[k]) and spread[k] > 0}
    if not usable:
        return dict(weights)
    raw = {k: w / spread[k] for k, w in usable.items()}
    scale = sum(usable.values()) / sum(raw.values())
    return {k: (raw[k] * scale if k in raw else float(w)) for k, w in weights.items()}


def group_spread(losses: NDArray[np.float64]) -> float:
    """Mean over groups of the within-group standard deviation of ``losses (groups, G)``."""
    if losses.ndim != MATRIX_NDIM or losses.shape[1] < MIN_GROUP_SIZE:
        raise ValueError(f"losses: expected (groups, G >= 2), got shape {losses.shape}")
    return float(losses.std(axis=1).mean())


def measure_spread(
    model: PreTrainedModel,
    frame_tokenizer: VideoTokenizer,
    vocab: LayoutVocab,
    sequences: Sequence[TokenSequence],
    truths: NDArray[np.uint8],
    *,
    perceptual: PerceptualScorer,
    rl: VideoRl,
    seed: int,
) -> dict[str, float]:
    """``group_spread`` of each positively weighted term of ``rl.weights`` (``perceptual``
    resolved to the scorer's metric) over ``rl.group_size`` samples per sequence, sampled as the
    rollout does (``rl.temperature``, no top-k) from ``seed``.

    ``truths`` are the true frames: ``(N, H, W, 3)`` for single-step sequences, ``(N, T, H, W,
    3)`` for multi-step ones (the loss is then the mean over the T frames, as the reward's)."""
    from rlvr_world.rewards.video import frame_metrics, metric_losses
    from rlvr_world.video.codec import per_frame
    from rlvr_world.video.evaluate import EvalConfig, sample_frames
    from rlvr_world.video.layout import MultiStepVocab
    from rlvr_world.video.multistep import predicted_multistep
    from rlvr_world.video.world_model import visual_ids

    if len(sequences) != len(truths) or not sequences:
        raise ValueError(f"{len(sequences)} sequences for {len(truths)} true frames")
    names = [k for k, w in reward_weights(rl, perceptual.metric).items() if w > 0]
    group_size = rl.group_size
    cfg = EvalConfig(temperature=rl.temperature, top_k=0, seed=seed, baselines=False)
    repeated = [seq for seq in sequences for _ in range(group_size)]
    if isinstance(vocab, MultiStepVocab):
        _, frames = predicted_multistep(model, frame_tokenizer, repeated, vocab, cfg)
        pred = np.asarray(frames, dtype=np.float64)
    else:
        tokenizer = per_frame(frame_tokenizer, "the single-step layout")
        prompts = np.array([s.prompt_ids for s in repeated], dtype=np.int64)
        tokens = sample_frames(model, prompts, tokenizer.tokens_per_frame, visual_ids(vocab), cfg)
        pred = np.asarray(tokenizer.decode_tokens(tokens), dtype=np.float64)[:, None]
    target = np.repeat(np.asarray(truths), group_size, axis=0).astype(np.float64) / 255.0
    if target.ndim == FRAMES_NDIM:  # single-step truths (N, H, W, 3): one step each
        target = target[:, None]
    steps = pred.shape[1]
    flat = frame_metrics(
        np.clip(pred.reshape(-1, *pred.shape[2:]), 0.0, 1.0),
        target.reshape(-1, *target.shape[2:]),
        {perceptual.metric: perceptual},
    )
    losses = metric_losses(flat, tuple(names))
    out = {}
    for name, values in losses.items():
        per_sample = values.reshape(-1, steps).mean(axis=1)
        out[name] = group_spread(per_sample.reshape(len(sequences), group_size))
    return out
