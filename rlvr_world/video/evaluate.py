"""Held-out evaluation of the video world model: sample the next frame, decode, score, plot.

What it does: for single-step clips ``(frames uint8 (C+1,H,W,3), actions (C,D))`` it builds the
prompt ``[f0 a0]..[f_{C-1} a_{C-1}] BOS`` (``train_mle.encode_clips``), samples ``tokens_per_frame``
tokens per clip with a KV cache, batched over clips, with every non-visual id masked out of the
logits (greedy when ``temperature`` is 0, else temperature + top-k from a seeded generator; the
reference evaluation used temperature 1, top-k 100), decodes them with the frozen
``FrameTokenizer`` and scores them against the true frame with ``rlvr_world.rewards.video``
(L1, MSE, PSNR, SSIM) and a perceptual scorer from ``rlvr_world.rewards.perceptual`` (ST-LPIPS by
default: LPIPS needs ImageNet weights that are not shipped). Reported, as means over clips:

* the metrics and the paper's reward ``-(L1 + perceptual)`` (``reward``);
* ``repetition_rate``: clips whose decoded prediction copies the decoded last context frame (mean
  absolute difference <= ``repetition_threshold``, ``rewards.video.repeated_frames``), and
  ``token_copy_rate``: the fraction of predicted tokens equal to the last context frame's;
* ``changed_*`` (``change_stats``): tokens per frame that differ from the last context frame's in
  the truth (``changed_true``) and in the prediction (``changed_pred``); of the predicted changes,
  the share at a position whose true token changed too (``changed_precision``); of the true
  changes, the share predicted changed (``changed_recall``) and predicted exactly
  (``changed_exact``): where the model moves things, and whether it moves the right ones;
* ``recon_*``: the same metrics for the true frame's own tokens (the tokenizer's ceiling),
  ``copy_*``: for predicting the last context frame's tokens (the trivial baseline in the model's
  own output space: "nothing moves", through the same tokenizer), and ``raw_copy_*``: for the
  last context frame's pixels (no tokenizer; a tokenized model cannot beat it where the
  tokenizer's own error exceeds the motion between frames);
* with ``anchor_dilate`` set, every decoded frame (the prediction, ``recon_*``, ``copy_*``) is
  context-anchored (``rlvr_world.video.anchor``): the last context frame plus the decoded change
  where the tokens changed, its own pixels elsewhere, so ``copy_*`` equals ``raw_copy_*``;
* ``per_clip``: every metric per clip, in clip order (``per_clip_copy``: the same of ``copy_*``),
  for paired comparisons across models and seeds;
* with ``frame_scores`` given (``FrameScores``), the per-frame measures it returns for the
  predicted frames (and the baselines' frames) join the metrics under their own names
  (the video run's action-reading measures: ``rlvr_world.apps.video.reading``).

``write_grid`` writes a PNG: one row per clip, context frames | predicted | true (laid out by
``write_frame_grid``, which the MPC report's trajectory PNG uses too).
What it does not do: no multi-step rollouts (ground-truth actions between generated frames);
no training.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import NDArray
from pydantic import BaseModel, ConfigDict, Field

from rlvr_world.rewards.video import (
    VideoRewardConfig,
    frame_metrics,
    metric_losses,
    repeated_frames,
    validate_video,
)
from rlvr_world.shapes import MATRIX_NDIM
from rlvr_world.video.anchor import AnchorDilate, anchor_frames, last_context_tokens
from rlvr_world.video.data import ClipArrays, ClipLike
from rlvr_world.video.layout import SingleStepVocab, TokenSequence
from rlvr_world.video.train_mle import clip_arrays, encode_clips
from rlvr_world.video.world_model import visual_ids

if TYPE_CHECKING:
    import torch
    from transformers import PreTrainedModel

    from rlvr_world.rewards.video import PerceptualScorer
    from rlvr_world.video.actions import ActionQuantizer
    from rlvr_world.video.tokenizer import FrameTokenizer

log = logging.getLogger(__name__)

#: Extra per-frame measures of decoded frames: ``(M, H, W, 3)`` float in [0, 1], the predicted
#: frames in evaluation order (clip by clip; a multi-step clip's frames in time order), to
#: ``name -> (M,)`` values. The caller knows what the frames should show.
FrameScores = Callable[[NDArray[Any]], Mapping[str, NDArray[np.float64]]]


class EvalConfig(BaseModel):
    """How to sample and score held-out clips."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    temperature: float = Field(default=1.0, ge=0, description="0 is greedy")
    top_k: int = Field(default=100, ge=0, description="0 is off")
    seed: int = Field(default=0, ge=0, description="sampling seed")
    batch_size: int = Field(default=16, ge=1, description="clips generated together")
    perceptual: str = Field(default="stlpips", description="lpips | stlpips")
    net: str = Field(default="vgg", description="perceptual backbone: vgg | alex")
    repetition_threshold: float = Field(default=1e-3, ge=0, description="copy test, mean |diff|")
    grid_rows: int = Field(default=8, ge=0, description="clips drawn in the PNG grid")
    baselines: bool = Field(default=True, description="also score recon_* and copy_* (2x cost)")
    anchor_dilate: AnchorDilate = Field(
        default=None,
        description="context-anchored decoding (rlvr_world.video.anchor): the last context frame "
        "plus the decoded change where the predicted tokens, grown by this many grid positions, "
        "changed; None decodes every token",
    )


# --------------------------------------------------------------------------------------------
# Sampling


def restrict_logits(logits: torch.Tensor, allowed: range) -> torch.Tensor:
    """``logits`` with every id outside ``allowed`` (a contiguous id range) set to -inf."""
    out = logits.clone()
    out[:, : allowed.start] = float("-inf")
    out[:, allowed.stop :] = float("-inf")
    return out


def pick(
    logits: torch.Tensor, temperature: float, top_k: int, generator: torch.Generator | None
) -> torch.Tensor:
    """Next ids ``(B,)``: argmax when ``temperature`` is 0, else a top-k tempered sample."""
    import torch

    if temperature == 0:
        return logits.argmax(dim=-1)
    scaled = logits / temperature
    if 0 < top_k < scaled.shape[-1]:
        kth = torch.topk(scaled, top_k, dim=-1).values[:, -1:]
        scaled = scaled.masked_fill(scaled < kth, float("-inf"))
    probs = torch.softmax(scaled, dim=-1)
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1)


def sample_frames(
    model: PreTrainedModel,
    prompts: NDArray[np.int64],
    n_tokens: int,
    allowed: range,
    cfg: EvalConfig,
) -> NDArray[np.int64]:
    """``(N, n_tokens)`` ids restricted to ``allowed`` after equal-length prompts ``(N, L)``."""
    import torch

    device = next(model.parameters()).device
    generator = torch.Generator(device=device).manual_seed(cfg.seed)
    out = np.empty((prompts.shape[0], n_tokens), dtype=np.int64)
    model.eval()  # type: ignore[no-untyped-call]  # transformers: eval() is unannotated
    with torch.inference_mode():
        for start in range(0, prompts.shape[0], cfg.batch_size):
            ids = torch.from_numpy(prompts[start : start + cfg.batch_size]).to(device)
            step = model(input_ids=ids, use_cache=True)
            cache = step.past_key_values
            for t in range(n_tokens):
                logits = restrict_logits(step.logits[:, -1, :].float(), allowed)
                nxt = pick(logits, cfg.temperature, cfg.top_k, generator)
                out[start : start + ids.shape[0], t] = nxt.cpu().numpy()
                if t + 1 < n_tokens:
                    step = model(input_ids=nxt[:, None], past_key_values=cache, use_cache=True)
                    cache = step.past_key_values
    return out


# --------------------------------------------------------------------------------------------
# Scoring


def score_frames(
    pred: NDArray[Any],
    target: NDArray[Any],
    config: VideoRewardConfig,
    scorers: Mapping[str, PerceptualScorer],
    extra: FrameScores | None = None,
) -> dict[str, NDArray[np.float64]]:
    """Per-clip metrics ``(N,)`` and ``reward = -sum_m w_m loss_m`` for frames ``(N, H, W, 3)``;
    ``extra``'s measures of the same frames beside them (they do not enter the reward)."""
    p, t, _ = validate_video(pred, target)
    metrics = frame_metrics(p, t, scorers)
    losses = metric_losses(metrics, config.active())
    loss = sum((config.weights[name] * values for name, values in losses.items()), np.zeros(len(p)))
    added = {} if extra is None else {k: np.asarray(v, np.float64) for k, v in extra(p).items()}
    return {**metrics, **added, "reward": -loss}


def change_stats(
    pred: NDArray[np.integer[Any]], last: NDArray[np.integer[Any]], truth: NDArray[np.integer[Any]]
) -> dict[str, float | None]:
    """Token changes against the last context frame, pooled over clips (module docstring);
    a share with nothing to count (no predicted or no true change) is None."""
    moved, real = pred != last, truth != last
    n_moved, n_real = int(moved.sum()), int(real.sum())
    return {
        "changed_true": float(real.sum(axis=-1).mean()),
        "changed_pred": float(moved.sum(axis=-1).mean()),
        "changed_precision": float((moved & real).sum() / n_moved) if n_moved else None,
        "changed_recall": float((moved & real).sum() / n_real) if n_real else None,
        "changed_exact": float((real & (pred == truth)).sum() / n_real) if n_real else None,
    }


def _means(prefix: str, metrics: Mapping[str, NDArray[np.float64]]) -> dict[str, float]:
    return {f"{prefix}{name}": float(values.mean()) for name, values in metrics.items()}


def _per_clip(metrics: Mapping[str, NDArray[np.float64]]) -> dict[str, list[float]]:
    return {name: [float(v) for v in values] for name, values in metrics.items()}


def reward_setup(
    model: PreTrainedModel, cfg: EvalConfig, perceptual: PerceptualScorer | None
) -> tuple[VideoRewardConfig, dict[str, PerceptualScorer]]:
    """The paper's -(L1 + perceptual) config and its scorer (built on the model's device when
    ``perceptual`` is None)."""
    if perceptual is None:
        from rlvr_world.rewards.perceptual import make_perceptual

        device = str(next(model.parameters()).device)
        perceptual = make_perceptual(cfg.perceptual, cfg.net, device=device)
    config = VideoRewardConfig(weights={"l1": 1.0, perceptual.metric: 1.0}, lpips_net=cfg.net)
    return config, {perceptual.metric: perceptual}


def prepare_clips(
    clips: Sequence[ClipLike],
    sequences: Sequence[TokenSequence] | None,
    encode: Callable[[], Sequence[TokenSequence]],
) -> tuple[list[ClipArrays], Sequence[TokenSequence]]:
    """The clips as arrays and their token sequences (``encode()`` when not given), checked:
    ``ValueError`` for no clips or a sequence count that differs from the clips'."""
    if not clips:
        raise ValueError("clips: empty")
    arrays = [clip_arrays(c) for c in clips]
    if sequences is None:
        sequences = encode()
    if len(sequences) != len(clips):
        raise ValueError(f"sequences: {len(sequences)} for {len(clips)} clips")
    return arrays, sequences


def evaluate(  # noqa: PLR0913 (the last three keywords are optional extras)
    model: PreTrainedModel,
    frame_tokenizer: FrameTokenizer,
    clips: Sequence[ClipLike],
    cfg: EvalConfig,
    *,
    vocab: SingleStepVocab,
    quantizer: ActionQuantizer | None,
    perceptual: PerceptualScorer | None = None,
    out_dir: Path | None = None,
    sequences: Sequence[TokenSequence] | None = None,
    frame_scores: FrameScores | None = None,
) -> dict[str, Any]:
    """Report dict for held-out ``clips`` (module docstring); writes ``eval.json`` and
    ``grid.png`` into ``out_dir`` when given. ``perceptual`` defaults to ``make_perceptual``;
    ``sequences`` (``encode_clips`` of the same clips) skips re-encoding them on every call;
    ``frame_scores``: extra measures of the predicted frames (``FrameScores``)."""
    t0 = time.perf_counter()
    arrays, sequences = prepare_clips(
        clips, sequences, lambda: encode_clips(clips, frame_tokenizer, quantizer, vocab)
    )
    config, scorers = reward_setup(model, cfg, perceptual)
    per_frame = int(frame_tokenizer.tokens_per_frame)
    prompts = np.array([s.input_ids[: s.prompt_length] for s in sequences], dtype=np.int64)
    truth_tokens = np.array(
        [s.input_ids[s.prompt_length : s.prompt_length + per_frame] for s in sequences]
    )
    dims = int(arrays[0][1].shape[-1]) if arrays[0][1].ndim == MATRIX_NDIM else 0
    last_tokens = np.array([last_context_tokens(p, per_frame, dims) for p in prompts])
    t_gen = time.perf_counter()
    pred_tokens = sample_frames(model, prompts, per_frame, visual_ids(vocab), cfg)
    gen_s = time.perf_counter() - t_gen
    pred = frame_tokenizer.decode_tokens(pred_tokens, batch_size=cfg.batch_size)
    last = frame_tokenizer.decode_tokens(last_tokens, batch_size=cfg.batch_size)
    decoded_last = last
    truth = np.stack([frames[-1] for frames, _ in arrays])
    raw = np.stack([frames[-2] for frames, _ in arrays])
    if cfg.anchor_dilate is not None:
        grid, dilate = frame_tokenizer.grid, cfg.anchor_dilate
        pred = anchor_frames(pred, last, raw, pred_tokens, last_tokens, grid=grid, dilate=dilate)
        last = anchor_frames(last, last, raw, last_tokens, last_tokens, grid=grid, dilate=dilate)
    model_metrics = score_frames(pred, truth, config, scorers, frame_scores)
    repeats = np.array(
        [
            repeated_frames(
                np.clip(pred[i : i + 1], 0, 1).astype(np.float64),
                np.clip(last[i], 0, 1).astype(np.float64),
                cfg.repetition_threshold,
            )[0]
            for i in range(len(clips))
        ]
    )
    report: dict[str, Any] = {
        "n_clips": len(clips),
        **_means("", model_metrics),
        "per_clip": _per_clip(model_metrics),
        "repetition_rate": float(repeats.mean()),
        "token_copy_rate": float((pred_tokens == last_tokens).mean()),
        **change_stats(pred_tokens, last_tokens, truth_tokens),
        "perceptual": next(iter(scorers)),
        "sampling": {"temperature": cfg.temperature, "top_k": cfg.top_k, "seed": cfg.seed},
        "anchor_dilate": cfg.anchor_dilate,
        "generate_s": gen_s,
    }
    if cfg.baselines:
        recon = frame_tokenizer.decode_tokens(truth_tokens, batch_size=cfg.batch_size)
        if cfg.anchor_dilate is not None:
            recon = anchor_frames(
                recon,
                decoded_last,
                raw,
                truth_tokens,
                last_tokens,
                grid=frame_tokenizer.grid,
                dilate=cfg.anchor_dilate,
            )
        report.update(_means("recon_", score_frames(recon, truth, config, scorers, frame_scores)))
        copied = score_frames(last, truth, config, scorers, frame_scores)
        report.update(_means("copy_", copied))
        report.update(_means("raw_copy_", score_frames(raw, truth, config, scorers, frame_scores)))
        report["per_clip_copy"] = _per_clip(copied)
    report["seconds"] = time.perf_counter() - t0
    report["seconds_per_clip"] = report["seconds"] / len(clips)
    if out_dir is not None:
        out_dir.mkdir(parents=True, exist_ok=True)
        (out_dir / "eval.json").write_text(json.dumps(report, indent=2) + "\n")
        rows = min(cfg.grid_rows, len(clips))
        if rows:
            context = [frames[:-1] for frames, _ in arrays[:rows]]
            write_grid(out_dir / "grid.png", context, pred[:rows], truth[:rows])
    log.info("eval: %s", {k: v for k, v in report.items() if isinstance(v, float)})
    return report


# --------------------------------------------------------------------------------------------
# Plot


#: A frame grid's label header (its height) and row-label margin (its width), in pixels.
GRID_HEADER, GRID_ROW_LABELS = 14, 70


def to_uint8(frames: NDArray[Any]) -> NDArray[np.uint8]:
    """uint8 frames as they are; float frames in [0, 1] scaled and rounded."""
    if frames.dtype == np.uint8:
        return np.asarray(frames, dtype=np.uint8)
    return np.asarray(np.clip(np.rint(frames * 255.0), 0, 255), dtype=np.uint8)


def write_grid(
    path: Path,
    context: Sequence[NDArray[Any]],
    predicted: NDArray[Any],
    truth: NDArray[Any],
    *,
    scale: int = 2,
    gap: int = 4,
) -> Path:
    """PNG: one row per clip, its context frames, then predicted, then true; a label header."""
    if not (len(context) == len(predicted) == len(truth)) or not len(truth):
        raise ValueError("write_grid: context, predicted and truth need the same non-zero length")
    labels = [f"context {i}" for i in range(len(context[0]))] + ["predicted", "true"]
    rows = [[*context[r], predicted[r], truth[r]] for r in range(len(truth))]
    return write_frame_grid(path, rows, labels, hw=truth.shape[1:3], scale=scale, gap=gap)


def write_frame_grid(
    path: Path,
    rows: Sequence[Sequence[NDArray[Any] | None]],
    labels: Sequence[str],
    *,
    hw: tuple[int, int],
    row_labels: Sequence[str] | None = None,
    scale: int = 2,
    gap: int = 4,
) -> Path:
    """PNG: ``labels`` over the columns, then ``rows`` of frames (None: an empty cell), each
    ``hw`` frame enlarged ``scale`` times (nearest neighbour), ``gap`` pixels apart;
    ``row_labels`` in a margin on the left."""
    from PIL import Image, ImageDraw

    h, w = hw
    left = GRID_ROW_LABELS if row_labels is not None else 0
    cell_w, cell_h = w * scale + gap, h * scale + gap
    size = (len(labels) * cell_w + gap + left, GRID_HEADER + len(rows) * cell_h + gap)
    canvas = Image.new("RGB", size, "white")
    draw = ImageDraw.Draw(canvas)
    for c, label in enumerate(labels):
        draw.text((left + gap + c * cell_w, 1), label, fill="black")
    for r, row in enumerate(rows):
        top = GRID_HEADER + gap + r * cell_h
        if row_labels is not None:
            draw.text((2, top + cell_h // 2), row_labels[r], fill="black")
        for c, frame in enumerate(row):
            if frame is None:
                continue
            img = Image.fromarray(to_uint8(np.asarray(frame))).resize(
                (w * scale, h * scale), Image.Resampling.NEAREST
            )
            canvas.paste(img, (left + gap + c * cell_w, top))
    path.parent.mkdir(parents=True, exist_ok=True)
    canvas.save(path)
    return path
