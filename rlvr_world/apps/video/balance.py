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

``rl.balance_mode: action_terms`` keeps the pixel terms' weights as given and scales only the
action-following terms (``idm``, ``state``) to the pixel terms' scale:

    p   = mean over the positive pixel terms of w_m * s_m
    w'_a = w_a * p / s_a                       (a in idm, state with w_a > 0)

so ``w_a = 1`` makes the action term move the reward within a group as much as an average pixel
term does (``balanced_action_weights``).

``balanced_weights`` and ``balanced_action_weights`` are the formulas (pure); ``measure_spread``
does the sampling and scoring: frames sampled as the rollout samples them, context-anchored where
the run anchors (``model.anchor_dilate``), the action terms' losses computed from the clips'
true actions and states with the run's IDM (``apps.video.reading.frame_scores``), exactly as the
reward service computes them; ``run_weights`` is the phase. Terms with zero spread (no sample
differed) keep their weight. What it does not do: no training; the weights are measured once,
from the MLE model, and used by every seed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import NDArray

from rlvr_world.apps.video.evaluation import reward_weights
from rlvr_world.rewards.video_action import ACTION_TERMS
from rlvr_world.shapes import FRAMES_NDIM, MATRIX_NDIM

if TYPE_CHECKING:
    from pathlib import Path

    from transformers import PreTrainedModel

    from rlvr_world.apps.video.config import VideoPipelineConfig, VideoRl
    from rlvr_world.apps.video.reading import FrameScores
    from rlvr_world.apps.video.setup import VideoSetup
    from rlvr_world.rewards.video import PerceptualScorer
    from rlvr_world.rewards.video_action import ActionReader
    from rlvr_world.video.codec import VideoTokenizer
    from rlvr_world.video.layout import LayoutVocab, TokenSequence
    from rlvr_world.video.tokenizer import FrameTokenizer

#: The losses ``reading.frame_scores`` reports for the action terms.
ACTION_LOSSES = {"idm": "idm_error", "state": "state_error"}

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


def balanced_action_weights(
    weights: Mapping[str, float], spread: Mapping[str, float]
) -> dict[str, float]:
    """``weights`` with each positive action term (``idm``, ``state``) scaled to the pixel
    terms' mean weighted ``spread`` (module docstring); the pixel weights are kept. An action
    term without a positive, finite spread keeps its weight; ``ValueError`` without a pixel term
    to scale to or a measurement of one."""
    pixel = {k: w for k, w in weights.items() if w > 0 and k not in ACTION_TERMS}
    action = {k: w for k, w in weights.items() if w > 0 and k in ACTION_TERMS}
    missing = sorted(k for k in (*pixel, *action) if k not in spread)
    if missing:
        raise ValueError(f"spread: no measurement for {', '.join(missing)}")
    if not pixel:
        raise ValueError("weights: no positive pixel term to scale the action terms to")
    scale = float(np.mean([w * spread[k] for k, w in pixel.items()]))
    out = {k: float(w) for k, w in weights.items()}
    for k, w in action.items():
        if np.isfinite(spread[k]) and spread[k] > 0 and scale > 0:
            out[k] = w * scale / spread[k]
    return out


def group_spread(losses: NDArray[np.float64]) -> float:
    """Mean over groups of the within-group standard deviation of ``losses (groups, G)``."""
    if losses.ndim != MATRIX_NDIM or losses.shape[1] < MIN_GROUP_SIZE:
        raise ValueError(f"losses: expected (groups, G >= 2), got shape {losses.shape}")
    return float(losses.std(axis=1).mean())


def measure_spread(  # noqa: PLR0913 (the model and its data, then one keyword per option)
    model: PreTrainedModel,
    frame_tokenizer: VideoTokenizer,
    vocab: LayoutVocab,
    sequences: Sequence[TokenSequence],
    truths: NDArray[np.uint8],
    *,
    perceptual: PerceptualScorer,
    rl: VideoRl,
    seed: int,
    anchor: Anchor | None = None,
    actions: FrameScores | None = None,
) -> dict[str, float]:
    """``group_spread`` of each positively weighted term of ``rl.weights`` (``perceptual``
    resolved to the scorer's metric) over ``rl.group_size`` samples per sequence, sampled as the
    rollout does (``rl.temperature``, no top-k) from ``seed``.

    ``truths`` are the true frames: ``(N, H, W, 3)`` for single-step sequences, ``(N, T, H, W,
    3)`` for multi-step ones (the loss is then the mean over the T frames, as the reward's).
    ``anchor`` (single-step): the samples are context-anchored as the run's reward sees them.
    ``actions``: the action terms' measures of the sampled frames, built for the sequences'
    clips each repeated ``group_size`` times (``reading.frame_scores``); needed when ``idm``
    or ``state`` is weighted."""
    from rlvr_world.rewards.video import frame_metrics, metric_losses
    from rlvr_world.video.codec import per_frame
    from rlvr_world.video.evaluate import EvalConfig, sample_frames
    from rlvr_world.video.layout import MultiStepVocab
    from rlvr_world.video.multistep import predicted_multistep
    from rlvr_world.video.world_model import visual_ids

    if len(sequences) != len(truths) or not sequences:
        raise ValueError(f"{len(sequences)} sequences for {len(truths)} true frames")
    names = [k for k, w in reward_weights(rl, perceptual.metric).items() if w > 0]
    if actions is None and any(k in ACTION_TERMS for k in names):
        raise ValueError("actions: the idm / state weights need their measures (frame_scores)")
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
        decoded = tokenizer.decode_tokens(tokens)
        if anchor is not None:
            decoded = _anchored(decoded, (tokens, prompts), tokenizer, anchor, group_size)
        pred = np.asarray(decoded, dtype=np.float64)[:, None]
    target = np.repeat(np.asarray(truths), group_size, axis=0).astype(np.float64) / 255.0
    if target.ndim == FRAMES_NDIM:  # single-step truths (N, H, W, 3): one step each
        target = target[:, None]
    steps = pred.shape[1]
    flat_pred = np.clip(pred.reshape(-1, *pred.shape[2:]), 0.0, 1.0)
    flat = frame_metrics(
        flat_pred, target.reshape(-1, *target.shape[2:]), {perceptual.metric: perceptual}
    )
    pixel = tuple(k for k in names if k not in ACTION_TERMS)
    losses = metric_losses(flat, pixel)
    if actions is not None and len(pixel) < len(names):
        measured = actions(flat_pred)
        losses |= {k: measured[ACTION_LOSSES[k]] for k in names if k in ACTION_TERMS}
    out = {}
    for name, values in losses.items():
        per_sample = values.reshape(-1, steps).mean(axis=1)
        out[name] = group_spread(per_sample.reshape(len(sequences), group_size))
    return out


@dataclass(frozen=True)
class Anchor:
    """Context-anchored samples (single-step): each sequence's last true context frame ``(N,
    H, W, 3)`` uint8, the dilation (``model.anchor_dilate``) and the action ids per step."""

    frames: NDArray[np.uint8]
    dilate: int
    action_dims: int


def _anchored(
    decoded: NDArray[np.float32],
    samples: tuple[NDArray[np.int64], NDArray[np.int64]],
    tokenizer: FrameTokenizer,
    anchor: Anchor,
    group_size: int,
) -> NDArray[np.float32]:
    """Single-step samples anchored on their sequence's last true context frame."""
    from rlvr_world.video.anchor import anchor_frames, last_context_tokens

    tokens, prompts = samples
    per = tokenizer.tokens_per_frame
    last = np.array([last_context_tokens(p, per, anchor.action_dims) for p in prompts])
    context = tokenizer.decode_tokens(last)
    frames = np.repeat(np.asarray(anchor.frames), group_size, axis=0)
    return anchor_frames(
        decoded, context, frames, tokens, last, grid=tokenizer.grid, dilate=anchor.dilate
    )


def run_weights(
    cfg: VideoPipelineConfig, s: VideoSetup, mle_dir: Path, reader: ActionReader | None
) -> tuple[dict[str, float], dict[str, Any] | None]:
    """The RL reward's weights: ``rl.weights`` (``perceptual`` resolved), balanced on
    ``rl.balance_prompts`` train prompts with the MLE model in ``mle_dir`` when set (as
    ``rl.balance_mode`` says), and what was measured (None when nothing was)."""
    import torch

    from rlvr_world.apps.video.episodes import spread
    from rlvr_world.apps.video.reading import frame_scores
    from rlvr_world.apps.video.setup import predicted_rows
    from rlvr_world.video.world_model import load_world_model

    rl = cfg.rl
    weights = reward_weights(rl, s.perceptual.metric)
    if rl.balance_prompts == 0:
        return weights, None
    torch.set_num_threads(cfg.mle.torch_threads)
    model, _ = load_world_model(mle_dir, device=cfg.run.device)
    picked = spread(range(len(s.train_clips)), rl.balance_prompts, cfg.run.seed)
    rows = predicted_rows(cfg)
    clips = [s.train_clips[i] for i in picked]
    truths = np.stack(
        [c[0][rows[0]] if cfg.model.layout == "multi_step" else c[0][-1] for c in clips]
    )
    states = None if s.train_states is None else [s.train_states[i] for i in picked]
    group = rl.group_size
    measure = frame_scores(
        [c for c in clips for _ in range(group)],
        rows,
        None if states is None else [x for x in states for _ in range(group)],
        reader,
    )
    anchor = None
    if cfg.model.anchor_dilate is not None:
        anchor = Anchor(
            np.stack([c[0][-2] for c in clips]), cfg.model.anchor_dilate, s.quantizer.dims
        )
    measured = measure_spread(
        model,
        s.frame_tokenizer,
        s.vocab,
        [s.train_sequences[i] for i in picked],
        truths,
        perceptual=s.perceptual,
        rl=rl,
        seed=cfg.run.seed,
        anchor=anchor,
        actions=measure,
    )
    if rl.balance_mode == "action_terms":
        balanced = balanced_action_weights(weights, measured)
    else:
        balanced = balanced_weights(weights, measured)
    info = {
        "prompts": len(picked),
        "mode": rl.balance_mode,
        "configured": weights,
        "spread": measured,
        "weights": balanced,
    }
    return balanced, info
