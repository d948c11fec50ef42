"""The multi-step layout of the video world model, with either video tokenizer.

The layout is the reference's (docs/reference.md#sequence-layouts).

A clip of ``S + 2`` frames and ``S + 1`` actions (``data.clips(length=S + 2)``) becomes::

    ctx  [d1 a1] [d2 a2] ... [dS aS]

* ``ctx`` is the clip's first frame, offset into the context range of ``MultiStepVocab``:
  with the per-frame tokenizer, tokenized as the dynamics frames are (``dynamics_codes`` =
  ``context_codes`` = its codebook size); with the compressive tokenizer, into its many context
  tokens, the dynamics frames into few tokens given them (``rlvr_world.video.codec``; decoding
  a frame then needs the clip's context tokens: ``context_tokens``);
* ``d1..dS`` are frames ``1..S``, ``a_s`` the action taken at frame ``s`` (the one leading to
  frame ``s + 1``; iVideoGPT's ``actions[:, 1:]``). The clip's last frame is only there so that
  ``aS`` exists: the layout ends every block with its action.

The prompt is ``ctx d1 a1``; the response ``[d2 a2] .. [dS aS]`` is generated interleaved: the
rollout samples ``Pd`` dynamics tokens, then appends the ground-truth run ``a_{s}`` (``inserts``
= ``action_ids[1:]``), ``S - 1`` times, so the sample ends with the last insert and its
``loss_mask`` is 0 exactly on the actions (``layout.multi_step``). MLE trains on the labels of
``layout.multi_step`` (-100 on ``ctx``, ``d1`` and every action) with ``train_mle`` unchanged.

Here: ``encode_multistep_clips`` (beside ``train_mle.encode_clips``), ``multistep_item`` (the
orchestrator's item: ``S - 1`` true frames and the inserts), ``sample_multistep`` (the in-process
interactive rollout with the true actions inserted, batched over clips with a KV cache, sampling
as ``evaluate.sample_frames``) and ``evaluate_multistep`` (metrics averaged over the ``S - 1``
predicted frames of every clip, same keys as ``evaluate.evaluate`` plus per-step rewards).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import NDArray

from rlvr_world.items import PromptItem, video_item
from rlvr_world.rewards.video import repeated_frames
from rlvr_world.shapes import MATRIX_NDIM
from rlvr_world.video.codec import (
    VideoTokenizer,
    codebook_sizes,
    decode_future,
    dynamics_tokens_per_frame,
    encode_clip_tokens,
)
from rlvr_world.video.data import ClipArrays, ClipLike, Episode
from rlvr_world.video.evaluate import (
    EvalConfig,
    FrameScores,
    pick,
    prepare_clips,
    restrict_logits,
    reward_setup,
    score_frames,
    to_uint8,
)
from rlvr_world.video.layout import MIN_FRAMES, MultiStepVocab, TokenSequence, multi_step
from rlvr_world.video.train_mle import clip_arrays
from rlvr_world.video.world_model import visual_ids

if TYPE_CHECKING:
    from transformers import PreTrainedModel

    from rlvr_world.rewards.video import PerceptualScorer
    from rlvr_world.video.actions import ActionQuantizer

log = logging.getLogger(__name__)

#: Rank of the forced action runs of a batch of rollouts ``(N, T, D)``.
INSERTS_NDIM = 3


def clip_length(segment_frames: int) -> int:
    """Frames per clip for ``S`` dynamics frames: the context frame, ``S``, and one more."""
    if isinstance(segment_frames, bool) or not isinstance(segment_frames, int):
        raise ValueError(f"segment_frames: expected an int, got {segment_frames!r}")
    if segment_frames < MIN_FRAMES:
        raise ValueError(f"segment_frames: need at least 2 dynamics frames, got {segment_frames}")
    return segment_frames + 2


def context_clip_pairs(
    episodes: Sequence[Episode], segment_frames: int, context_range: int, seed: int
) -> list[ClipArrays]:
    """Multi-step clips whose context frame is drawn at random, as the reference loader does.

    For every segment start ``s`` (the index of ``d1``) that the contiguous clips have, the
    clip is ``frames[c], frames[s .. s + S]`` with ``c`` uniform in ``[max(0, s - R), s]``
    (docs/reference.md#sequence-layouts: ``R`` = 15), and the contiguous clip's actions
    ``actions[s - 1 .. s + S - 1]`` (row 0 is not used by the layout); seeded by ``seed``."""
    length = clip_length(segment_frames)
    if isinstance(context_range, bool) or not isinstance(context_range, int) or context_range < 0:
        raise ValueError(f"context_range: expected an int >= 0, got {context_range!r}")
    rng = np.random.default_rng(seed)
    out = []
    for ep in episodes:
        for s in range(1, ep.frames.shape[0] - length + 2):
            c = int(rng.integers(max(0, s - context_range), s + 1))
            frames = np.concatenate([ep.frames[c : c + 1], ep.frames[s : s + segment_frames + 1]])
            out.append((frames, ep.actions[s - 1 : s + segment_frames]))
    return out


def multistep_vocab(tokenizer: VideoTokenizer, action_bins: int) -> MultiStepVocab:
    """Dynamics and context ranges of the tokenizer's codebooks (both of the per-frame
    tokenizer's codebook size; the compressive tokenizer's own two)."""
    dynamics, context = codebook_sizes(tokenizer)
    return MultiStepVocab(dynamics_codes=dynamics, context_codes=context, action_bins=action_bins)


def encode_multistep_clips(
    clips: Sequence[ClipLike],
    tokenizer: VideoTokenizer,
    quantizer: ActionQuantizer | None,
    vocab: MultiStepVocab,
    segment_frames: int,
    *,
    batch_size: int = 64,
) -> list[TokenSequence]:
    """Multi-step ``TokenSequence``s of clips of ``S + 2`` frames and ``S + 1`` actions (module
    docstring). ``tokenizer`` is either video tokenizer (``codec``), ``quantizer`` an
    ``ActionQuantizer`` (the layout needs actions to insert). With the per-frame tokenizer,
    frames shared by overlapping clips are encoded once."""
    length = clip_length(segment_frames)
    if quantizer is None:
        raise ValueError("quantizer: the multi-step layout needs actions (ground-truth inserts)")
    if not clips:
        return []
    arrays = [clip_arrays(c) for c in clips]
    for i, (frames, actions) in enumerate(arrays):
        if (
            frames.shape[0] != length
            or actions.ndim != MATRIX_NDIM
            or actions.shape[0] != length - 1
        ):
            raise ValueError(
                f"clips[{i}]: expected {length} frames and {length - 1} action rows for "
                f"segment_frames {segment_frames}, got {frames.shape[0]} and {actions.shape}"
            )
    ctx, dyn = encode_clip_tokens(tokenizer, np.stack([f for f, _ in arrays]), batch_size)
    out = []
    for i, (_, actions) in enumerate(arrays):
        bins = quantizer.tokens(actions[1 : segment_frames + 1])
        out.append(multi_step(ctx[i], dyn[i, :segment_frames], bins, vocab))
    return out


def context_tokens(seq: TokenSequence, vocab: MultiStepVocab) -> list[int]:
    """The context frame's tokens of a multi-step sequence (the context offset removed)."""
    per, dims = frame_tokens(seq)
    return [int(t) - vocab.context_offset for t in seq.input_ids[: seq.prompt_length - per - dims]]


def rollout_inserts(seq: TokenSequence) -> list[list[int]]:
    """The forced runs of the interactive rollout: ``a2 .. aS`` (offset ids)."""
    return [list(run) for run in seq.action_ids[1:]]


def frame_tokens(seq: TokenSequence) -> tuple[int, int]:
    """``(tokens per frame, action dims)`` of a multi-step sequence."""
    dims = len(seq.action_ids[0])
    steps = len(seq.action_ids) - 1
    per = seq.response_length // steps - dims
    return per, dims


def multistep_item(
    prompt_id: str,
    seq: TokenSequence,
    frames: NDArray[np.uint8],
    context: Sequence[int] = (),
) -> PromptItem:
    """The orchestrator's item of one clip: prompt ``ctx d1 a1``, true frames ``2..S``, the
    previous frame ``d1`` (repetition check) and the inserts ``a2..aS``; ``context``: the
    context frame's tokens the decoder conditions on (compressive tokenizer; ``context_tokens``),
    empty for the per-frame tokenizer."""
    per, dims = frame_tokens(seq)
    steps = len(seq.action_ids) - 1
    response = np.asarray(seq.response_ids).reshape(steps, per + dims)[:, :per]
    return video_item(
        prompt_id,
        seq.prompt_ids,
        np.asarray(frames[2 : steps + 2]),
        np.asarray(frames[1]),
        target_tokens=response.reshape(-1).tolist(),
        inserts=rollout_inserts(seq),
        segment_tokens=per,
        context_tokens=context,
    )


def sample_multistep(
    model: PreTrainedModel,
    prompts: NDArray[np.int64],
    inserts: NDArray[np.int64],
    tokens_per_frame: int,
    allowed: range,
    *,
    cfg: EvalConfig,
) -> NDArray[np.int64]:
    """``(N, T, tokens_per_frame)`` ids: per clip, T frames sampled inside ``allowed`` with the
    forced runs ``inserts (N, T, D)`` fed after each (the last run is not needed and not fed).
    Equal-length prompts ``(N, L)``; sampling as ``evaluate.sample_frames`` (seeded)."""
    import torch

    if inserts.ndim != INSERTS_NDIM or inserts.shape[0] != prompts.shape[0]:
        raise ValueError(f"inserts: expected (N, T, D) for {prompts.shape[0]} prompts")
    n, steps = prompts.shape[0], inserts.shape[1]
    device = next(model.parameters()).device
    generator = torch.Generator(device=device).manual_seed(cfg.seed)
    out = np.empty((n, steps, tokens_per_frame), dtype=np.int64)
    model.eval()  # type: ignore[no-untyped-call]  # transformers: eval() is unannotated
    with torch.inference_mode():
        for start in range(0, n, cfg.batch_size):
            ids = torch.from_numpy(prompts[start : start + cfg.batch_size]).to(device)
            rows = slice(start, start + ids.shape[0])
            step = model(input_ids=ids, use_cache=True)
            cache = step.past_key_values
            for t in range(steps):
                for j in range(tokens_per_frame):
                    logits = restrict_logits(step.logits[:, -1, :].float(), allowed)
                    nxt = pick(logits, cfg.temperature, cfg.top_k, generator)
                    out[rows, t, j] = nxt.cpu().numpy()
                    if j + 1 < tokens_per_frame:
                        feed = nxt[:, None]
                    elif t + 1 < steps:  # the frame's last token, then its true action
                        run = torch.from_numpy(inserts[rows, t]).to(device)
                        feed = torch.cat([nxt[:, None], run], dim=1)
                    else:
                        break
                    step = model(input_ids=feed, past_key_values=cache, use_cache=True)
                    cache = step.past_key_values
    return out


def _prompts_and_inserts(
    sequences: Sequence[TokenSequence],
) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    prompts = np.array([s.prompt_ids for s in sequences], dtype=np.int64)
    inserts = np.array([rollout_inserts(s) for s in sequences], dtype=np.int64)
    return prompts, inserts


def predicted_multistep(
    model: PreTrainedModel,
    tokenizer: VideoTokenizer,
    sequences: Sequence[TokenSequence],
    vocab: MultiStepVocab,
    cfg: EvalConfig,
) -> tuple[NDArray[np.int64], NDArray[np.float32]]:
    """Sampled tokens ``(N, T, P)`` and decoded frames ``(N, T, H, W, 3)`` of the sequences."""
    per = dynamics_tokens_per_frame(tokenizer)
    prompts, inserts = _prompts_and_inserts(sequences)
    tokens = sample_multistep(model, prompts, inserts, per, visual_ids(vocab), cfg=cfg)
    ctx = np.array([context_tokens(s, vocab) for s in sequences], dtype=np.int64)
    return tokens, decode_future(tokenizer, ctx, tokens, batch_size=cfg.batch_size)


def _true_tokens(seq: TokenSequence) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """``(d1 (P,), d2..dS (T, P))`` dynamics tokens of a sequence."""
    per, dims = frame_tokens(seq)
    steps = len(seq.action_ids) - 1
    start = seq.prompt_length - per - dims
    first = np.asarray(seq.input_ids[start : start + per], dtype=np.int64)
    rest = np.asarray(seq.response_ids, dtype=np.int64).reshape(steps, per + dims)[:, :per]
    return first, rest


def evaluate_multistep(  # noqa: PLR0913 (evaluate's keywords, and segment_frames)
    model: PreTrainedModel,
    tokenizer: VideoTokenizer,
    clips: Sequence[ClipLike],
    cfg: EvalConfig,
    *,
    vocab: MultiStepVocab,
    quantizer: ActionQuantizer | None,
    segment_frames: int,
    perceptual: PerceptualScorer | None = None,
    out_dir: Path | None = None,
    sequences: Sequence[TokenSequence] | None = None,
    frame_scores: FrameScores | None = None,
) -> dict[str, Any]:
    """Held-out multi-step rollouts (true actions inserted), scored frame by frame against the
    true frames ``2..S``; every metric is the mean over all predicted frames of all clips
    (``reward`` = ``-mean_t (L1_t + perceptual_t)``, the paper's aggregation), plus
    ``reward_per_step`` / ``l1_per_step``. ``repetition_rate``: predicted frames that copy the
    frame before them (``d1`` for the first); ``recon_*``: the true tokens decoded; ``copy_*``:
    ``d1``'s tokens decoded and repeated; ``raw_copy_*``: ``d1``'s own pixels repeated;
    ``per_clip`` / ``per_clip_copy``: each metric per clip (its mean over the predicted frames);
    ``frame_scores``: extra measures of the predicted frames, flattened clip by clip
    (``evaluate.FrameScores``), averaged like the metrics. Writes ``eval.json`` and ``grid.png``
    into ``out_dir`` when given."""
    t0 = time.perf_counter()
    arrays, sequences = prepare_clips(
        clips,
        sequences,
        lambda: encode_multistep_clips(clips, tokenizer, quantizer, vocab, segment_frames),
    )
    config, scorers = reward_setup(model, cfg, perceptual)
    steps = segment_frames - 1
    t_gen = time.perf_counter()
    pred_tokens, pred = predicted_multistep(model, tokenizer, sequences, vocab, cfg)
    gen_s = time.perf_counter() - t_gen
    n, shape = len(clips), pred.shape[2:]
    truth = np.stack([frames[2 : steps + 2] for frames, _ in arrays])
    firsts = np.stack([_true_tokens(s)[0] for s in sequences])
    true_rest = np.stack([_true_tokens(s)[1] for s in sequences])
    ctx = np.array([context_tokens(s, vocab) for s in sequences], dtype=np.int64)
    d1 = decode_future(tokenizer, ctx, firsts[:, None], batch_size=cfg.batch_size)[:, 0]
    flat = pred.reshape(-1, *shape)
    metrics = score_frames(flat, truth.reshape(-1, *shape), config, scorers, frame_scores)
    per_step = {k: v.reshape(n, steps) for k, v in metrics.items()}
    repeats = np.stack(
        [
            repeated_frames(
                np.clip(pred[i], 0, 1).astype(np.float64),
                np.clip(d1[i], 0, 1).astype(np.float64),
                cfg.repetition_threshold,
            )
            for i in range(n)
        ]
    )
    before = np.concatenate([firsts[:, None], pred_tokens[:, :-1]], axis=1)
    report: dict[str, Any] = {
        "n_clips": n,
        "layout": "multi_step",
        "predicted_frames": steps,
        **{name: float(values.mean()) for name, values in metrics.items()},
        "per_clip": {k: v.mean(axis=1).tolist() for k, v in per_step.items()},
        "reward_per_step": per_step["reward"].mean(axis=0).tolist(),
        "l1_per_step": per_step["l1"].mean(axis=0).tolist(),
        "repetition_rate": float(np.asarray(repeats, dtype=np.float64).mean()),
        "token_copy_rate": float((pred_tokens == before).mean()),
        "perceptual": next(iter(scorers)),
        "sampling": {"temperature": cfg.temperature, "top_k": cfg.top_k, "seed": cfg.seed},
        "generate_s": gen_s,
    }
    if cfg.baselines:
        recon = decode_future(tokenizer, ctx, true_rest, batch_size=cfg.batch_size)
        recon = recon.reshape(-1, *shape)
        copy = np.repeat(d1[:, None], steps, axis=1).reshape(-1, *shape)
        # d1's own pixels, no tokenizer: "nothing moves" without the tokenizer's loss
        raw = np.stack([np.repeat(clip[1:2], steps, axis=0) for clip, _ in arrays])
        raw = raw.reshape(-1, *shape)
        flat_truth = truth.reshape(-1, *shape)
        for prefix, frames in (("recon_", recon), ("copy_", copy), ("raw_copy_", raw)):
            scored = score_frames(np.asarray(frames), flat_truth, config, scorers, frame_scores)
            report.update({f"{prefix}{k}": float(v.mean()) for k, v in scored.items()})
            if prefix == "copy_":
                report["per_clip_copy"] = {
                    k: v.reshape(n, steps).mean(axis=1).tolist() for k, v in scored.items()
                }
    report["seconds"] = time.perf_counter() - t0
    report["seconds_per_clip"] = report["seconds"] / n
    if out_dir is not None:
        out_dir.mkdir(parents=True, exist_ok=True)
        (out_dir / "eval.json").write_text(json.dumps(report, indent=2) + "\n")
        rows = min(cfg.grid_rows, n)
        if rows:
            write_rollout_grid(out_dir / "grid.png", [f for f, _ in arrays[:rows]], pred[:rows])
    log.info("multi-step eval: %s", {k: v for k, v in report.items() if isinstance(v, float)})
    return report


def write_rollout_grid(
    path: Path,
    clips: Sequence[NDArray[Any]],
    predicted: NDArray[Any],
    *,
    scale: int = 2,
    gap: int = 4,
) -> Path:
    """PNG: one row per clip: ctx, d1, the T predicted frames, then the T true frames."""
    from PIL import Image, ImageDraw

    if len(clips) != len(predicted) or not len(clips):
        raise ValueError("write_rollout_grid: clips and predicted need the same non-zero length")
    steps = predicted.shape[1]
    h, w = predicted.shape[2:4]
    labels = ["ctx", "d1"] + [f"pred {t + 2}" for t in range(steps)]
    labels += [f"true {t + 2}" for t in range(steps)]
    cell_w, cell_h, header = w * scale + gap, h * scale + gap, 14
    canvas = Image.new("RGB", (len(labels) * cell_w + gap, header + len(clips) * cell_h), "white")
    draw = ImageDraw.Draw(canvas)
    for c, label in enumerate(labels):
        draw.text((gap + c * cell_w, 1), label, fill="black")
    for r, frames in enumerate(clips):
        row = [frames[0], frames[1], *predicted[r], *frames[2 : steps + 2]]
        for c, frame in enumerate(row):
            img = Image.fromarray(to_uint8(np.asarray(frame))).resize(
                (w * scale, h * scale), Image.Resampling.NEAREST
            )
            canvas.paste(img, (gap + c * cell_w, header + r * cell_h))
    path.parent.mkdir(parents=True, exist_ok=True)
    canvas.save(path)
    return path
