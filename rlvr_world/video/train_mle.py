"""Maximum-likelihood (teacher-forced) training of the video world model on layout sequences.

What it does: ``train_mle`` minimises the token-mean cross-entropy of a causal LM on the labels of
``rlvr_world.video.layout.TokenSequence``s (labels are -100 on the history, so only the predicted
frame and its EOS, or the dynamics tokens of a multi-step layout, are trained). AdamW (decoupled
weight decay, none on norms and biases), linear warm-up then ``constant`` / ``cosine`` / ``linear``
decay over ``steps``, gradient clipping by global norm, shuffled batches drawn epoch by epoch from a
seeded generator. It stops after ``steps`` steps or after ``time_budget_s`` seconds of training,
whichever comes first, so "continue MLE for the same wall time as an RLVR run" is one call.
Each step appends a JSON line (step, loss, lr, grad norm, tokens, elapsed seconds) to ``log_path``.

Continuing: ``save_checkpoint`` writes the world-model directory (``world_model.save_with_spec``)
plus ``train_state.pt`` (optimizer state, step, elapsed seconds); ``train_mle(..., resume=dir)``
restores the optimizer and the step counter (so the schedule continues) for a model loaded from
that directory with ``load_world_model``. What it does not do: no evaluation (``evaluate``), no
data loading or frame tokenising (``encode_clips`` only glues the tokenizer, quantizer and layout).
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from rlvr_world.shapes import MATRIX_NDIM
from rlvr_world.video.anchor import hold_unchanged
from rlvr_world.video.data import Clip, ClipLike
from rlvr_world.video.layout import SingleStepVocab, TokenSequence, single_step

if TYPE_CHECKING:
    import torch
    from transformers import PreTrainedModel

    from rlvr_world.video.actions import ActionQuantizer
    from rlvr_world.video.tokenizer import FrameTokenizer
    from rlvr_world.video.world_model import WorldModelSpec

log = logging.getLogger(__name__)

TRAIN_STATE = "train_state.pt"
IGNORE = -100


class MLEConfig(BaseModel):
    """Optimisation settings of MLE training."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    steps: int = Field(default=1000, ge=1, description="optimizer steps (schedule length)")
    time_budget_s: float | None = Field(
        default=None, gt=0, description="stop after this many seconds of training"
    )
    batch_size: int = Field(default=8, ge=1, description="sequences per step")
    lr: float = Field(default=3e-4, gt=0, le=1.0, description="peak learning rate")
    min_lr_ratio: float = Field(default=0.1, ge=0, le=1.0, description="final lr / peak lr")
    warmup_steps: int = Field(default=20, ge=0, description="linear warm-up steps")
    schedule: Literal["constant", "cosine", "linear"] = Field(default="cosine")
    weight_decay: float = Field(default=0.01, ge=0, description="AdamW weight decay")
    betas: tuple[float, float] = Field(default=(0.9, 0.95), description="AdamW betas")
    grad_clip: float = Field(default=1.0, gt=0, description="max global gradient norm")
    seed: int = Field(default=0, ge=0, description="batch order seed")
    log_every: int = Field(default=10, ge=1, description="log to the console every n steps")


@dataclass
class MLEResult:
    """What a ``train_mle`` call did."""

    start_step: int
    step: int
    tokens: int
    seconds: float
    losses: list[float] = field(default_factory=list)
    optimizer: torch.optim.Optimizer | None = None  # for save_checkpoint

    @property
    def tokens_per_s(self) -> float:
        """Trained tokens per second of training (0.0 before any time passed)."""
        return self.tokens / self.seconds if self.seconds > 0 else 0.0

    def summary(self) -> dict[str, float]:
        """Steps, tokens, seconds, throughput and the last loss (NaN without one), as floats."""
        return {
            "start_step": float(self.start_step),
            "step": float(self.step),
            "tokens": float(self.tokens),
            "seconds": self.seconds,
            "tokens_per_s": self.tokens_per_s,
            "final_loss": self.losses[-1] if self.losses else math.nan,
        }


def lr_at(step: int, cfg: MLEConfig) -> float:
    """Learning rate for optimizer step ``step`` (0-based)."""
    if step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    if cfg.schedule == "constant":
        return cfg.lr
    span = max(1, cfg.steps - cfg.warmup_steps)
    frac = min(1.0, (step - cfg.warmup_steps) / span)
    floor = cfg.lr * cfg.min_lr_ratio
    if cfg.schedule == "linear":
        return floor + (cfg.lr - floor) * (1.0 - frac)
    return floor + (cfg.lr - floor) * 0.5 * (1.0 + math.cos(math.pi * frac))


def collate(sequences: Sequence[TokenSequence], pad_id: int) -> dict[str, torch.Tensor]:
    """Right-padded ``input_ids``/``labels``/``attention_mask``/``position_ids`` of sequences."""
    import torch

    width = max(len(s.input_ids) for s in sequences)
    rows: dict[str, list[list[int]]] = {
        "input_ids": [],
        "labels": [],
        "attention_mask": [],
        "position_ids": [],
    }
    for s in sequences:
        pad = width - len(s.input_ids)
        rows["input_ids"].append(list(s.input_ids) + [pad_id] * pad)
        rows["labels"].append(list(s.labels) + [IGNORE] * pad)
        rows["attention_mask"].append(list(s.attention_mask) + [0] * pad)
        last = s.position_ids[-1] if s.position_ids else -1
        rows["position_ids"].append(list(s.position_ids) + list(range(last + 1, last + 1 + pad)))
    return {k: torch.tensor(v, dtype=torch.long) for k, v in rows.items()}


def batches(n: int, batch_size: int, seed: int, start_step: int) -> Iterator[list[int]]:
    """Endless index batches: a fresh permutation per epoch, skipping ``start_step`` batches."""
    rng = np.random.default_rng(seed)
    per_epoch = max(1, n // batch_size) if n >= batch_size else 1
    step = 0
    while True:
        order = rng.permutation(n)
        for b in range(per_epoch):
            idx = order[b * batch_size : (b + 1) * batch_size]
            if len(idx) < batch_size:  # fewer sequences than a batch: wrap around
                idx = np.resize(order, batch_size)
            if step >= start_step:
                yield [int(i) for i in idx]
            step += 1


def make_optimizer(model: torch.nn.Module, cfg: MLEConfig) -> torch.optim.AdamW:
    """AdamW with weight decay on matrices only (not norms or biases)."""
    import torch

    decay = [p for p in model.parameters() if p.requires_grad and p.ndim >= MATRIX_NDIM]
    rest = [p for p in model.parameters() if p.requires_grad and p.ndim < MATRIX_NDIM]
    groups = [
        {"params": decay, "weight_decay": cfg.weight_decay},
        {"params": rest, "weight_decay": 0.0},
    ]
    return torch.optim.AdamW(groups, lr=cfg.lr, betas=cfg.betas)


def _validate(sequences: Sequence[TokenSequence]) -> None:
    if not sequences:
        raise ValueError("sequences: empty")
    for i, s in enumerate(sequences):
        lengths = {len(s.input_ids), len(s.labels), len(s.attention_mask), len(s.position_ids)}
        if len(lengths) != 1:
            raise ValueError(f"sequences[{i}]: input_ids/labels/masks/positions differ in length")
        if all(label == IGNORE for label in s.labels):
            raise ValueError(f"sequences[{i}]: every label is -100, nothing to train")


def train_mle(
    model: PreTrainedModel,
    sequences: Sequence[TokenSequence],
    cfg: MLEConfig,
    *,
    pad_id: int,
    log_path: Path | None = None,
    resume: Path | None = None,
    max_new_steps: int | None = None,
) -> MLEResult:
    """Train ``model`` in place on ``sequences`` (module docstring); returns the losses.

    ``max_new_steps`` stops this call after that many steps without changing the schedule
    (which always spans ``cfg.steps``)."""
    import torch

    _validate(sequences)
    device = next(model.parameters()).device
    optimizer = make_optimizer(model, cfg)
    start = 0
    if resume is not None:
        start = load_train_state(resume, optimizer)
    result = MLEResult(start_step=start, step=start, tokens=0, seconds=0.0, optimizer=optimizer)
    model.train()
    t0 = time.perf_counter()
    log_file = log_path.open("a") if log_path is not None else None
    try:
        for idx in batches(len(sequences), cfg.batch_size, cfg.seed, start):
            if result.step >= cfg.steps:
                break
            if max_new_steps is not None and result.step - start >= max_new_steps:
                break
            if cfg.time_budget_s is not None and time.perf_counter() - t0 >= cfg.time_budget_s:
                break
            batch = {
                k: v.to(device) for k, v in collate([sequences[i] for i in idx], pad_id).items()
            }
            lr = lr_at(result.step, cfg)
            for group in optimizer.param_groups:
                group["lr"] = lr
            loss = model(**batch).loss
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            norm = torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
            optimizer.step()
            value = float(loss.detach())
            if not math.isfinite(value):
                raise FloatingPointError(f"MLE loss is {value} at step {result.step}")
            result.step += 1
            result.tokens += int(batch["attention_mask"].sum())
            result.seconds = time.perf_counter() - t0
            result.losses.append(value)
            row = {
                "step": result.step,
                "loss": value,
                "lr": lr,
                "grad_norm": float(norm),
                "tokens": result.tokens,
                "elapsed_s": result.seconds,
            }
            if log_file is not None:
                log_file.write(json.dumps(row) + "\n")
                log_file.flush()
            if result.step % cfg.log_every == 0:
                log.info("mle step %d loss %.4f lr %.2e", result.step, value, lr)
    finally:
        if log_file is not None:
            log_file.close()
        model.eval()  # type: ignore[no-untyped-call]  # transformers: eval() is unannotated
    result.seconds = time.perf_counter() - t0
    return result


def save_checkpoint(
    folder: Path, model: PreTrainedModel, spec: WorldModelSpec, result: MLEResult
) -> Path:
    """World-model directory + ``train_state.pt`` (optimizer, step) for ``resume``."""
    import torch

    from rlvr_world.video.world_model import save_with_spec

    if result.optimizer is None:
        raise ValueError("result: it holds no optimizer (save_checkpoint needs train_mle's result)")
    save_with_spec(model, spec, folder)
    state = {"step": result.step, "optimizer": result.optimizer.state_dict()}
    torch.save(state, folder / TRAIN_STATE)
    return folder


def load_train_state(folder: Path, optimizer: torch.optim.Optimizer) -> int:
    """Restore the optimizer from ``folder/train_state.pt``; returns the step to continue from.

    A world-model directory without one (e.g. written by the GRPO trainer) continues at step 0
    with a fresh optimizer."""
    import torch

    path = folder / TRAIN_STATE
    if not path.is_file():
        log.warning("%s: no %s, fresh optimizer from step 0", folder, TRAIN_STATE)
        return 0
    state = torch.load(path, map_location="cpu", weights_only=True)
    optimizer.load_state_dict(state["optimizer"])
    return int(state["step"])


def clip_arrays(clip: ClipLike) -> tuple[np.ndarray, np.ndarray]:
    """``(frames, actions)`` of a ``data.Clip`` or of a ``(frames, actions)`` pair."""
    if isinstance(clip, Clip):
        return np.asarray(clip.frames), np.asarray(clip.actions)
    frames, actions = clip
    return np.asarray(frames), np.asarray(actions)


def unique_encode(frames: np.ndarray, tokenizer: FrameTokenizer, batch_size: int) -> np.ndarray:
    """``tokenizer.encode_frames(frames)``, encoding each distinct frame (by bytes) once."""
    index: dict[bytes, int] = {}
    where = np.empty(len(frames), dtype=np.int64)
    for i, frame in enumerate(frames):
        key = hashlib.blake2b(np.ascontiguousarray(frame).tobytes(), digest_size=16).digest()
        where[i] = index.setdefault(key, len(index))
    first = np.zeros(len(index), dtype=np.int64)
    first[where] = np.arange(len(frames))  # any occurrence: equal bytes, equal tokens
    unique = tokenizer.encode_frames(frames[first], batch_size=batch_size)
    return np.asarray(unique)[where]


def encode_clips(
    clips: Sequence[ClipLike],
    tokenizer: FrameTokenizer,
    quantizer: ActionQuantizer | None,
    vocab: SingleStepVocab,
    *,
    batch_size: int = 64,
    hold_below: int | None = None,
) -> list[TokenSequence]:
    """Single-step ``TokenSequence``s of clips (``data.Clip`` or pairs ``(frames uint8 (C+1,H,W,3),
    actions (C,D))``).

    ``tokenizer`` is a ``FrameTokenizer`` (``encode_frames``), ``quantizer`` an ``ActionQuantizer``
    or None when the clips have no actions (D = 0). Frames shared by overlapping clips (same
    bytes) are encoded once. ``hold_below``: patches that changed by at most this many pixel
    levels keep the previous frame's token within each clip (``anchor.hold_unchanged``)."""
    if not clips:
        return []
    arrays = [clip_arrays(c) for c in clips]
    frames = np.concatenate([f for f, _ in arrays])
    tokens = unique_encode(frames, tokenizer, batch_size)
    out = []
    at = 0
    for frames_i, actions_i in arrays:
        n = frames_i.shape[0]
        bins = (
            quantizer.tokens(actions_i)
            if quantizer is not None
            else np.zeros((n - 1, 0), dtype=np.int64)
        )
        clip_tokens = tokens[at : at + n]
        if hold_below is not None:
            clip_tokens = hold_unchanged(clip_tokens, frames_i, tokenizer.grid, hold_below)
        out.append(single_step(clip_tokens, bins, vocab))
        at += n
    return out
