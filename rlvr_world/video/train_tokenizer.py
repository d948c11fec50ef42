"""Train a ``FrameTokenizer`` on uint8 frames: L1 + perceptual loss, Adam, held-out PSNR and L1.

What it does: ``train_tokenizer`` draws random mini-batches (seeded) from the training frames,
minimises ``l1_weight * L1 + perceptual_weight * ST-LPIPS`` of the straight-through reconstruction
with Adam (linear warm-up, then cosine decay to 10% of the learning rate), and afterwards encodes
and decodes the held-out frames through the real token path (``encode_frames`` /
``decode_tokens``) to report L1, MSE, PSNR and SSIM (``rlvr_world.rewards.video``), the share of
the codebook in use, and the wall time.

Foreground: in scenes like PushT the objects that move cover about 5% of the pixels, so a plain
L1 is nearly all background and the tokenizer learns the static scene first and the objects last.
With ``foreground_weight`` w > 0 the L1 term weights each pixel by ``1 + w`` where the frame
differs from the background (the per-pixel median of the training frames) by more than
``foreground_threshold`` (summed over RGB), and by 1 elsewhere, normalised by the weight sum. The
held-out report always has ``eval_foreground_psnr`` / ``eval_foreground_l1``: the error over the
pixels where the original or the reconstruction differs from that background, i.e. the objects.

It writes into ``out_dir``: the checkpoint
(``config.json`` + ``model.safetensors``, readable with ``FrameTokenizer.load(out_dir)``),
``recon.png`` (top row held-out originals, bottom row their reconstructions) and ``metrics.json``.

The perceptual term is shift-tolerant LPIPS from ``stlpips_pytorch`` (its weights ship in the
wheel), loaded with ``rlvr_world.rewards.perceptual.load_stlpips`` and frozen; AlexNet by default
because on one CPU thread VGG costs about five times as much per step. The reference tokenizer also
used a GAN loss from step 10k of 600k; at the step counts a CPU allows it would not start, so there
is none.

What it does not do: no data loading or resizing (callers pass frames of the configured size), no
augmentation, no thread settings (callers call ``torch.set_num_threads``).
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
from numpy.typing import NDArray
from pydantic import BaseModel
from torch import nn

from rlvr_world.rewards.perceptual import load_stlpips
from rlvr_world.rewards.video import frame_metrics
from rlvr_world.shapes import CLIPS_NDIM, RGB_CHANNELS
from rlvr_world.video.compressive import MIN_CLIP_FRAMES, CompressiveConfig, CompressiveTokenizer
from rlvr_world.video.tokenizer import FrameTokenizer, TokenizerConfig, check_frame_array

logger = logging.getLogger(__name__)

METRICS_FILE = "metrics.json"
GRID_FILE = "recon.png"
GRID_SCALE = 2
#: Smallest frame side ST-LPIPS (its blur-pool padding) accepts.
PERCEPTUAL_MIN_SIDE = 24
#: Final learning rate as a fraction of the peak (cosine decay).
LR_FLOOR = 0.1


@dataclass(frozen=True)
class TrainSettings:
    """Optimisation settings; defaults: the CPU demo (~5 CPU-minutes on one thread at 64x64)."""

    steps: int = 900
    batch_size: int = 8
    lr: float = 2e-3
    warmup_steps: int = 20
    l1_weight: float = 1.0
    perceptual_weight: float = 1.0
    perceptual_net: str = "alex"
    #: Frames of each batch the perceptual term sees (0: all); it costs more than the tokenizer.
    perceptual_frames: int = 0
    #: Extra L1 weight of pixels that differ from the median background (0: plain L1).
    foreground_weight: float = 0.0
    #: Summed-RGB difference from the background (pixels in [0, 1]) that counts as foreground.
    foreground_threshold: float = 0.15
    eval_fraction: float = 0.1
    grid_frames: int = 8
    log_every: int = 50
    #: Also measure held-out PSNR/L1 every this many steps (0: only at the end); not timed.
    eval_every: int = 0
    seed: int = 0

    def check_frame_size(self, hw: tuple[int, int]) -> None:
        """The perceptual loss needs frames of at least ``PERCEPTUAL_MIN_SIDE`` pixels."""
        if self.perceptual_weight > 0 and min(hw) < PERCEPTUAL_MIN_SIDE:
            raise ValueError(
                f"perceptual_weight: ST-LPIPS needs frames of at least {PERCEPTUAL_MIN_SIDE} "
                f"pixels a side, got {hw}; use perceptual_weight=0 for smaller frames"
            )

    def __post_init__(self) -> None:
        if self.steps < 1 or self.batch_size < 1 or self.warmup_steps < 0 or self.log_every < 1:
            raise ValueError(
                "steps, batch_size and log_every must be >= 1 and warmup_steps >= 0, got "
                f"{self.steps}, {self.batch_size}, {self.log_every}, {self.warmup_steps}"
            )
        if self.lr <= 0 or self.l1_weight < 0 or self.perceptual_weight < 0:
            raise ValueError("lr must be > 0 and the loss weights >= 0")
        # the largest summed-RGB difference of pixels in [0, 1] is one per channel
        if self.foreground_weight < 0 or not 0.0 < self.foreground_threshold < RGB_CHANNELS:
            raise ValueError(
                "foreground_weight must be >= 0 and foreground_threshold in (0, 3), got "
                f"{self.foreground_weight}, {self.foreground_threshold}"
            )
        if self.perceptual_frames < 0:
            raise ValueError(f"perceptual_frames: must be >= 0, got {self.perceptual_frames}")
        if self.perceptual_net not in ("alex", "vgg"):
            raise ValueError(f"perceptual_net: 'alex' or 'vgg', got {self.perceptual_net!r}")
        if not 0.0 < self.eval_fraction < 1.0:
            raise ValueError(f"eval_fraction: must be in (0, 1), got {self.eval_fraction}")
        if self.eval_every < 0:
            raise ValueError(f"eval_every: must be >= 0, got {self.eval_every}")
        if self.grid_frames < 1:
            raise ValueError(f"grid_frames: must be >= 1, got {self.grid_frames}")


def split_frames(
    frames: NDArray[np.uint8], eval_fraction: float
) -> tuple[NDArray[np.uint8], NDArray[np.uint8]]:
    """``(train, held_out)``: the held-out set is the last ``eval_fraction`` of ``frames``.

    Pass frames ordered by episode so that the held-out frames come from unseen episodes.
    """
    n_eval = max(1, round(frames.shape[0] * eval_fraction))
    if n_eval >= frames.shape[0]:
        raise ValueError(f"frames: {frames.shape[0]} frames are too few to hold out {n_eval}")
    return frames[:-n_eval], frames[-n_eval:]


def lr_factor(step: int, settings: TrainSettings) -> float:
    """Multiplier of the peak learning rate at ``step`` (0-based): warm-up, then cosine."""
    if step < settings.warmup_steps:
        return (step + 1) / settings.warmup_steps
    span = max(1, settings.steps - settings.warmup_steps)
    progress = min(1.0, (step - settings.warmup_steps) / span)
    return LR_FLOOR + (1.0 - LR_FLOOR) * 0.5 * (1.0 + math.cos(math.pi * progress))


#: Frames the background median is taken over (evenly spaced); enough for a stable median.
BACKGROUND_SAMPLES = 512


def background_of(frames: NDArray[np.uint8]) -> NDArray[np.float32]:
    """Per-pixel median ``(H, W, 3)`` in [0, 1] of up to ``BACKGROUND_SAMPLES`` of ``frames``."""
    step = max(1, frames.shape[0] // BACKGROUND_SAMPLES)
    median: NDArray[np.float64] = np.median(frames[::step], axis=0)
    return (median / 255.0).astype(np.float32)


def foreground_metrics(
    recon: NDArray[np.float32],
    frames: NDArray[np.uint8],
    background: NDArray[np.float32],
    threshold: float,
) -> dict[str, float]:
    """L1 and PSNR over the pixels where ``frames`` or ``recon`` differ from ``background``.

    ``recon`` float ``(N, H, W, 3)`` in [0, 1]. Both are NaN when no pixel is foreground.
    """
    x = frames.astype(np.float32) / 255.0
    mask = (np.abs(x - background).sum(-1) > threshold) | (
        np.abs(recon - background).sum(-1) > threshold
    )
    n = 3 * int(mask.sum())
    if n == 0:
        return {"foreground_l1": math.nan, "foreground_psnr": math.nan, "foreground_fraction": 0.0}
    err = recon - x
    mse = float((err**2).sum(-1)[mask].sum()) / n
    return {
        "foreground_l1": float(np.abs(err).sum(-1)[mask].sum()) / n,
        "foreground_psnr": 10.0 * math.log10(1.0 / max(mse, 1e-10)),
        "foreground_fraction": float(mask.mean()),
    }


def evaluate_tokenizer(
    model: FrameTokenizer,
    frames: NDArray[np.uint8],
    batch_size: int = 64,
    *,
    background: NDArray[np.float32] | None = None,
    threshold: float = TrainSettings.foreground_threshold,
) -> dict[str, float]:
    """Held-out reconstruction metrics through tokens: means of l1, mse, psnr, ssim; code usage.

    With ``background`` also ``eval_foreground_*`` (``foreground_metrics``).
    """
    with _eval_mode(model):
        tokens = model.encode_frames(frames, batch_size)
        recon = model.decode_tokens(tokens, batch_size)
    out = _mean_metrics(recon, frames, "eval_")
    out["eval_code_usage"] = len(np.unique(tokens)) / model.codebook_size
    if background is not None:
        fg = foreground_metrics(recon, frames, background, threshold)
        out |= {f"eval_{k}": v for k, v in fg.items()}
    return out


def evaluate_compressive(
    model: CompressiveTokenizer, clips: NDArray[np.uint8], batch_size: int = 16
) -> dict[str, float]:
    """Held-out metrics of the future frames (``eval_*``) and the context (``eval_context_*``)."""
    with _eval_mode(model):
        ctx, dyn = model.encode_clips(clips, batch_size)
        recon = model.decode_clips(ctx, dyn, batch_size)
    future = _mean_metrics(recon[:, 1:].reshape(-1, *recon.shape[2:]), _frames_of(clips[:, 1:]))
    out = {f"eval_{k}": v for k, v in future.items()}
    out |= _mean_metrics(recon[:, 0], clips[:, 0], "eval_context_")
    return out


def _frames_of(clips: NDArray[np.uint8]) -> NDArray[np.uint8]:
    return clips.reshape(-1, *clips.shape[2:])


def _mean_metrics(
    recon: NDArray[np.float32], frames: NDArray[np.uint8], prefix: str = ""
) -> dict[str, float]:
    metrics = frame_metrics(recon.astype(np.float64), frames.astype(np.float64) / 255.0, {})
    return {f"{prefix}{name}": float(values.mean()) for name, values in metrics.items()}


@contextmanager
def _eval_mode(model: nn.Module) -> Iterator[None]:
    was_training = model.training
    model.eval()
    try:
        yield
    finally:
        model.train(was_training)


def train_tokenizer(
    frames: NDArray[np.uint8],
    cfg: TokenizerConfig,
    steps: int,
    out_dir: str | Path,
    *,
    eval_frames: NDArray[np.uint8] | None = None,
    settings: TrainSettings | None = None,
    device: str = "cpu",
) -> dict[str, Any]:
    """Train a tokenizer on ``frames`` uint8 ``(N, H, W, 3)``; returns the metrics dict.

    ``steps`` overrides ``settings.steps``. Without ``eval_frames`` the last
    ``settings.eval_fraction`` of ``frames`` is held out. See the module docstring for the files.
    """
    settings = replace(settings or TrainSettings(), steps=steps)
    check_frame_array(frames, cfg.hw)
    settings.check_frame_size(cfg.hw)
    if eval_frames is None:
        train, held_out = split_frames(frames, settings.eval_fraction)
    else:
        train, held_out = frames, check_frame_array(eval_frames, cfg.hw, "eval_frames")
    torch.manual_seed(settings.seed)
    model = FrameTokenizer(cfg).to(device).train()
    background = background_of(train)

    def batch_loss(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x = x.permute(0, 3, 1, 2).float().div(255.0)
        return model(x)[0], x

    def evaluate() -> dict[str, float]:
        return evaluate_tokenizer(
            model, held_out, background=background, threshold=settings.foreground_threshold
        )

    history = _optimise(
        model,
        train,
        batch_loss,
        evaluate,
        settings=settings,
        device=device,
        background=background,
    )
    metrics = _summary(model, history, evaluate(), train, held_out)
    metrics |= {"codebook_size": model.codebook_size, "tokens_per_frame": model.tokens_per_frame}
    return _finish(
        model,
        cfg,
        settings=settings,
        metrics=metrics,
        shown=held_out[spread(held_out.shape[0], settings.grid_frames)],
        out_dir=out_dir,
    )


def train_compressive(
    clips: NDArray[np.uint8],
    cfg: CompressiveConfig,
    steps: int,
    out_dir: str | Path,
    *,
    eval_clips: NDArray[np.uint8] | None = None,
    settings: TrainSettings | None = None,
    device: str = "cpu",
) -> dict[str, Any]:
    """Train a ``CompressiveTokenizer`` on uint8 clips ``(N, 1 + S, H, W, 3)`` (frame 0 = context).

    Same loss, optimiser, files and hold-out rule as ``train_tokenizer``; the grid shows the first
    held-out clip, and ``eval_*`` metrics are over the future frames.
    """
    settings = replace(settings or TrainSettings(), steps=steps)
    h, w = cfg.hw
    for name, arr in (("clips", clips), ("eval_clips", eval_clips)):
        if arr is not None and (
            arr.dtype != np.uint8 or arr.ndim != CLIPS_NDIM or arr.shape[1] < MIN_CLIP_FRAMES
        ):
            raise ValueError(f"{name}: expected uint8 (N, 1 + S, {h}, {w}, 3), got {arr.shape}")
    settings.check_frame_size(cfg.hw)
    if eval_clips is None:
        train, held_out = split_frames(clips, settings.eval_fraction)
    else:
        train, held_out = clips, eval_clips
    torch.manual_seed(settings.seed)
    model = CompressiveTokenizer(cfg).to(device).train()

    def batch_loss(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x = x.permute(0, 1, 4, 2, 3).float().div(255.0)
        ctx, future = model(x)
        recon = torch.cat([ctx.unsqueeze(1), future], dim=1)
        return recon.flatten(0, 1), x.flatten(0, 1)

    history = _optimise(
        model,
        train,
        batch_loss,
        lambda: evaluate_compressive(model, held_out),
        settings=settings,
        device=device,
        background=background_of(_frames_of(train)),
    )
    metrics = _summary(model, history, evaluate_compressive(model, held_out), train, held_out)
    metrics |= {
        "context_tokens_per_frame": model.context_tokens_per_frame,
        "dynamics_tokens_per_frame": model.dynamics_tokens_per_frame,
    }
    return _finish(
        model, cfg, settings=settings, metrics=metrics, shown=held_out[:1], out_dir=out_dir
    )


def _summary(
    model: nn.Module,
    history: list[dict[str, float]],
    evaluation: dict[str, float],
    train: NDArray[np.uint8],
    held_out: NDArray[np.uint8],
) -> dict[str, Any]:
    return {
        "steps": int(history[-1]["step"]),
        "train_seconds": history[-1]["seconds"],
        "train_cpu_seconds": history[-1]["cpu_seconds"],
        "final_loss": history[-1]["loss"],
        **evaluation,
        "n_train": int(train.shape[0]),
        "n_eval": int(held_out.shape[0]),
        "parameters": sum(p.numel() for p in model.parameters()),
        "history": history,
    }


def _finish(
    model: FrameTokenizer | CompressiveTokenizer,
    cfg: BaseModel,
    *,
    settings: TrainSettings,
    metrics: dict[str, Any],
    shown: NDArray[np.uint8],
    out_dir: str | Path,
) -> dict[str, Any]:
    """Save the checkpoint, the grid and ``metrics.json`` into ``out_dir``; returns ``metrics``."""
    metrics |= {"config": cfg.model_dump(mode="json"), "settings": asdict(settings)}
    out = Path(out_dir)
    model.save(out)
    write_grid(model, shown, out / GRID_FILE)
    (out / METRICS_FILE).write_text(json.dumps(metrics, indent=2) + "\n")
    logger.info(
        "%s: %d steps in %.0f s, held-out PSNR %.2f dB, L1 %.4f",
        model.KIND,
        settings.steps,
        metrics["train_seconds"],
        metrics["eval_psnr"],
        metrics["eval_l1"],
    )
    return metrics


def _optimise(
    model: nn.Module,
    train: NDArray[np.uint8],
    batch_loss: Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor]],
    evaluate: Callable[[], dict[str, float]],
    *,
    settings: TrainSettings,
    device: str,
    background: NDArray[np.float32],
) -> list[dict[str, float]]:
    """The training loop; a ``{step, loss, l1, perceptual, seconds[, eval_*]}`` row per log.

    ``batch_loss`` maps a uint8 batch (items of ``train``) to ``(reconstruction, target)`` float
    ``(B', 3, H, W)`` in [0, 1]. ``background`` ``(H, W, 3)`` is used when
    ``settings.foreground_weight`` > 0 (the module docstring). ``seconds`` (wall) and
    ``cpu_seconds`` (this process's CPU time, all threads; the fair measure on a shared machine)
    count training only, not evaluations.
    """
    perceptual = None
    if settings.perceptual_weight > 0:
        perceptual = load_stlpips(settings.perceptual_net).to(device).requires_grad_(False)
    optimiser = torch.optim.Adam(model.parameters(), lr=settings.lr)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimiser, lambda s: lr_factor(s, settings))
    rng = np.random.default_rng(settings.seed)
    bg = torch.from_numpy(background).permute(2, 0, 1).unsqueeze(0).to(device)
    history: list[dict[str, float]] = []
    seconds = cpu_seconds = 0.0
    for step in range(1, settings.steps + 1):
        start, cpu_start = time.perf_counter(), time.process_time()
        idx = np.sort(rng.choice(train.shape[0], settings.batch_size, replace=True))
        recon, x = batch_loss(torch.from_numpy(train[idx]).to(device))
        l1 = weighted_l1(recon, x, bg, settings)
        loss = settings.l1_weight * l1
        p_loss = torch.zeros(())
        if perceptual is not None:
            k = settings.perceptual_frames or recon.shape[0]
            p_loss = perceptual(recon[:k].clamp(0.0, 1.0), x[:k], normalize=True).mean()
            loss = loss + settings.perceptual_weight * p_loss
        optimiser.zero_grad(set_to_none=True)
        torch.autograd.backward(loss)  # Tensor.backward is unannotated
        optimiser.step()
        scheduler.step()
        seconds += time.perf_counter() - start
        cpu_seconds += time.process_time() - cpu_start
        due = settings.eval_every > 0 and step % settings.eval_every == 0
        if step % settings.log_every == 0 or step == settings.steps or due:
            row = {"step": float(step), "loss": float(loss.detach()), "l1": float(l1.detach())}
            row |= {"perceptual": float(p_loss.detach()), "seconds": seconds}
            row |= {"cpu_seconds": cpu_seconds}
            if due:
                row |= evaluate()
            history.append(row)
            logger.info("tokenizer step %d: %s", step, row)
    return history


def spread(n: int, k: int) -> NDArray[np.int64]:
    """Up to ``k`` indices spread evenly over ``range(n)`` (first and last included)."""
    return np.unique(np.linspace(0, n - 1, min(n, k)).round().astype(np.int64))


def weighted_l1(
    recon: torch.Tensor, x: torch.Tensor, background: torch.Tensor, settings: TrainSettings
) -> torch.Tensor:
    """Mean L1, with foreground pixels weighted ``1 + foreground_weight`` (module docstring)."""
    err = (recon - x).abs()
    if settings.foreground_weight <= 0:
        return err.mean()
    fg = (x - background).abs().sum(1, keepdim=True) > settings.foreground_threshold
    w = 1.0 + settings.foreground_weight * fg.to(err.dtype)
    return (err * w).sum() / (w.sum() * err.shape[1])


def write_grid(
    model: FrameTokenizer | CompressiveTokenizer,
    frames: NDArray[np.uint8],
    path: str | Path,
    scale: int = GRID_SCALE,
) -> Path:
    """A PNG: ``frames`` (or one clip's frames) on the top row, their reconstructions below.

    Pixels are repeated ``scale`` times each way (nearest neighbour) so small frames are visible.
    """
    from PIL import Image

    with _eval_mode(model):
        if isinstance(model, CompressiveTokenizer):
            recon = model.decode_clips(*model.encode_clips(frames))[0]
            frames = frames[0]
        else:
            recon = model.decode_tokens(model.encode_frames(frames))
    recon_u8 = np.clip(np.round(recon * 255.0), 0, 255).astype(np.uint8)
    grid = np.concatenate(
        [np.concatenate(list(frames), axis=1), np.concatenate(list(recon_u8), axis=1)], axis=0
    )
    grid = grid.repeat(scale, axis=0).repeat(scale, axis=1)
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(grid).save(out)
    return out
