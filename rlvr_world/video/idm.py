"""Inverse-dynamics model (IDM): the action that leads from one frame to the next.

What it does: ``InverseDynamicsModel`` takes (previous frame, next frame) pairs and returns the
world model's action for that step, in the world model's own action space. ``IdmConfig`` holds
what that space is: the frame size, the action axes and their ranges, and how the actions were
formed (source, ``frame_skip``, ``absolute`` targets or ``agent_relative`` moves; for
``configs/video/pusht_skip.yaml``: PushT, 64x64, frame_skip 4, agent_relative, +-128 arena
pixels). It is the model behind the ``idm`` action-following reward
(``rlvr_world.rewards.action``; RLIR, arXiv 2509.23958).

Choices:

* Input: both frames, their difference and two coordinate maps (x and y in [-1, 1], so a
  position is easy to read off), 11 channels. Per stage of ``channels``: a stride-2 3x3
  convolution, and from the third stage on a second (stride-1) 3x3 convolution, each followed by
  GroupNorm and SiLU (full-resolution stages stay single: they cost the most on a CPU); adaptive
  average pooling to 4x4; a two-layer MLP (``hidden``) to the D outputs.
* Targets: each axis scaled from its range ``[lo, hi]`` to [-1, 1] (true actions clipped to the
  range first, as the world model's quantiser clips them); Smooth-L1 loss (beta 0.05). Read
  actions are scaled back and clipped to the range.
* ``fit_idm``: AdamW (weight decay 1e-4), linear warm-up over the first 5% of the steps, cosine
  decay to 0; batches drawn with a seeded generator, so a run on the same device repeats.
* A folder is ``config.json`` (kind ``inverse_dynamics``, format version, config) and
  ``model.safetensors`` (``rlvr_world.video.module_folder``); ``load_idm`` checks both and says
  what is wrong.

Frames are ``(N, H, W, 3)`` (or one ``(H, W, 3)``), uint8 0..255 or float 0..1 (floats are
clamped, as decoded predictions may stray); any other size than the configured one, another
dtype, or NaN raises ``InvalidInput`` (a ``ValueError``), as do true actions of the wrong
dimension (``score_with_idm``) and a missing or foreign folder.

What it does not do: no data forming (``rlvr-world video train-idm`` forms the (previous, next,
action) triples from recordings the way a video run forms its steps), no resizing, no thread
settings (callers call ``torch.set_num_threads``).
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Self

import numpy as np
import torch
from numpy.typing import NDArray
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from torch import nn

from rlvr_world.rewards.action import (
    DEFAULT_TOLERANCE,
    MAX_ACTION_DIMS,
    ActionRewardConfig,
    check_ranges,
    score_actions,
)
from rlvr_world.rewards.checks import check_pixel_dtype
from rlvr_world.rewards.types import InvalidInput, RewardResult, Status, failed
from rlvr_world.shapes import FRAME_NDIM, FRAMES_NDIM, RGB_CHANNELS
from rlvr_world.video import module_folder
from rlvr_world.video.actions import FrameSkip

logger = logging.getLogger(__name__)

KIND = "inverse_dynamics"
DEFAULT_BATCH_SIZE = 256
#: Channels of the network's input: previous, next, their difference, and the x/y maps.
IN_CHANNELS = 3 * RGB_CHANNELS + 2
POOLED_SIDE = 4
#: Stages with one convolution (the rest have two).
SINGLE_STAGES = 2
SMOOTH_L1_BETA = 0.05
WARMUP_SHARE = 0.05
MIN_SIDE, MAX_SIDE = 8, 1024


class IdmConfig(BaseModel):
    """The IDM's input, output and size; saved in its folder's ``config.json``."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    image_size: tuple[int, int] = Field(description="(height, width) of the frames it reads")
    action_dims: int = Field(ge=1, le=MAX_ACTION_DIMS, description="action axes it reads")
    action_ranges: tuple[tuple[float, float], ...] = Field(
        min_length=1,
        max_length=MAX_ACTION_DIMS,
        description="(low, high) per action axis: the world model's action space (clipped)",
    )
    source: Literal["pusht"] = Field(default="pusht", description="the data the IDM read")
    action_form: Literal["absolute", "agent_relative"] = Field(
        description="PushT: target positions, or moves relative to the agent at the step's start"
    )
    frame_skip: FrameSkip
    channels: tuple[int, ...] = Field(
        default=(32, 64, 96, 128), min_length=1, max_length=6, description="channels per stage"
    )
    hidden: int = Field(default=256, ge=8, le=4096, description="width of the MLP head")
    tolerance: float = Field(
        default=DEFAULT_TOLERANCE,
        gt=0.0,
        le=1.0,
        description="share of each axis' range within which a read action counts as accurate",
    )

    @model_validator(mode="after")
    def _check(self) -> Self:
        if any(not MIN_SIDE <= side <= MAX_SIDE for side in self.image_size):
            raise ValueError(
                f"image_size: sides must lie in [{MIN_SIDE}, {MAX_SIDE}], got {self.image_size}"
            )
        if any(not 1 <= c <= 1024 for c in self.channels):  # noqa: PLR2004 (a sane width)
            raise ValueError(f"channels: each must lie in [1, 1024], got {self.channels}")
        check_ranges(self.action_ranges)
        if len(self.action_ranges) != self.action_dims:
            raise ValueError(
                f"action_ranges: {len(self.action_ranges)} (low, high) pairs for action_dims "
                f"{self.action_dims}"
            )
        return self

    def reward_config(self) -> ActionRewardConfig:
        """The action reward's config in this IDM's action space and tolerance."""
        return ActionRewardConfig(ranges=self.action_ranges, tolerance=self.tolerance)


def _norm(channels: int) -> nn.GroupNorm:
    return nn.GroupNorm(math.gcd(8, channels), channels)


class InverseDynamicsModel(nn.Module):
    """(previous, next) frames -> the action between them (module docstring)."""

    #: Non-persistent buffers: the x/y maps ``(1, 2, H, W)``, each axis' low end and width.
    coords: torch.Tensor
    low: torch.Tensor
    width: torch.Tensor

    def __init__(self, config: IdmConfig) -> None:
        super().__init__()
        self.config = config
        h, w = config.image_size
        ys = torch.linspace(-1.0, 1.0, h).view(1, 1, h, 1).expand(1, 1, h, w)
        xs = torch.linspace(-1.0, 1.0, w).view(1, 1, 1, w).expand(1, 1, h, w)
        self.register_buffer("coords", torch.cat([xs, ys], dim=1), persistent=False)
        layers: list[nn.Module] = []
        prev = IN_CHANNELS
        for i, c in enumerate(config.channels):
            layers += [nn.Conv2d(prev, c, 3, stride=2, padding=1), _norm(c), nn.SiLU()]
            if i >= SINGLE_STAGES:
                layers += [nn.Conv2d(c, c, 3, padding=1), _norm(c), nn.SiLU()]
            prev = c
        layers.append(nn.AdaptiveAvgPool2d(POOLED_SIDE))
        self.encoder = nn.Sequential(*layers)
        self.head = nn.Sequential(
            nn.Flatten(),
            nn.Linear(prev * POOLED_SIDE * POOLED_SIDE, config.hidden),
            nn.SiLU(),
            nn.Linear(config.hidden, config.action_dims),
        )
        ranges = torch.tensor(config.action_ranges, dtype=torch.float32)
        self.register_buffer("low", ranges[:, 0], persistent=False)
        self.register_buffer("width", ranges[:, 1] - ranges[:, 0], persistent=False)

    def forward(self, prev: torch.Tensor, nxt: torch.Tensor) -> torch.Tensor:
        """Float frames ``(B, 3, H, W)`` in [0, 1] -> the actions scaled to [-1, 1], ``(B, D)``."""
        grid = self.coords.expand(prev.shape[0], -1, -1, -1)
        out: torch.Tensor = self.head(self.encoder(torch.cat([prev, nxt, nxt - prev, grid], 1)))
        return out

    def scale(self, actions: torch.Tensor) -> torch.Tensor:
        """Actions in action units -> clipped to the ranges and scaled to [-1, 1]."""
        return (2.0 * (actions - self.low) / self.width - 1.0).clamp(-1.0, 1.0)

    def unscale(self, scaled: torch.Tensor) -> torch.Tensor:
        """``scale``'s inverse, clipped to the ranges."""
        return self.low + (scaled.clamp(-1.0, 1.0) + 1.0) / 2.0 * self.width

    @property
    def device(self) -> torch.device:
        """The device its parameters are on."""
        return next(self.parameters()).device

    def predict(
        self, prev: object, nxt: object, batch_size: int = DEFAULT_BATCH_SIZE
    ) -> NDArray[np.float64]:
        """The actions ``(N, D)`` (action units, within the ranges) of frame pairs ``(N, H, W,
        3)`` (or one pair ``(H, W, 3)``), in batches on the model's device. ``InvalidInput`` for
        frames it cannot take (module docstring)."""
        a, b = check_frame_pairs(prev, nxt, self.config.image_size)
        if batch_size < 1:
            raise InvalidInput(f"batch_size: must be >= 1, got {batch_size}")
        out = np.empty((a.shape[0], self.config.action_dims), dtype=np.float64)
        was_training = self.training
        self.eval()
        try:
            with torch.inference_mode():
                for start in range(0, a.shape[0], batch_size):
                    part = slice(start, start + batch_size)
                    x, y = to_tensor(a[part], self.device), to_tensor(b[part], self.device)
                    out[part] = self.unscale(self(x, y)).double().cpu().numpy()
        finally:
            self.train(was_training)
        return out

    def save(self, directory: str | Path) -> Path:
        """Write ``config.json`` and ``model.safetensors`` into ``directory``; returns it."""
        return module_folder.save_module_folder(self, KIND, self.config, directory, name="the IDM")


# --------------------------------------------------------------------------------------------
# Frames


def _check_frames(x: object, name: str, image_size: tuple[int, int]) -> NDArray[Any]:
    """``x`` as ``(N, H, W, 3)`` uint8 or finite float frames of ``image_size``."""
    if not isinstance(x, np.ndarray):
        raise InvalidInput(f"{name}: expected a numpy array of frames, got {type(x).__name__}")
    frames = x[None] if x.ndim == FRAME_NDIM else x
    if frames.ndim != FRAMES_NDIM or frames.shape[-1] != RGB_CHANNELS or frames.shape[0] == 0:
        raise InvalidInput(f"{name}: expected RGB frames (N, H, W, 3) or (H, W, 3), got {x.shape}")
    if tuple(frames.shape[1:3]) != tuple(image_size):
        h, w = image_size
        raise InvalidInput(
            f"{name}: frames of {frames.shape[1]}x{frames.shape[2]}, this IDM reads {h}x{w} "
            "(its config.json image_size); resize them or train an IDM at this size"
        )
    return check_pixel_dtype(frames, name)


def check_frame_pairs(
    prev: object, nxt: object, image_size: tuple[int, int]
) -> tuple[NDArray[Any], NDArray[Any]]:
    """Checked previous and next frames, as many of each; ``InvalidInput`` otherwise."""
    a = _check_frames(prev, "previous frames", image_size)
    b = _check_frames(nxt, "next frames", image_size)
    if a.shape[0] != b.shape[0]:
        raise InvalidInput(f"frames: {a.shape[0]} previous frames but {b.shape[0]} next frames")
    return a, b


def to_tensor(frames: NDArray[Any], device: torch.device | str) -> torch.Tensor:
    """Checked frames ``(N, H, W, 3)`` -> float ``(N, 3, H, W)`` in [0, 1] on ``device``."""
    t = torch.from_numpy(np.ascontiguousarray(frames)).to(device)
    t = t.float() / 255.0 if t.dtype == torch.uint8 else t.float().clamp(0.0, 1.0)
    return t.permute(0, 3, 1, 2)


# --------------------------------------------------------------------------------------------
# Folders


def _read_config(path: Path) -> IdmConfig:
    if not path.exists():
        raise InvalidInput(
            f"IDM folder {path} does not exist (train one: rlvr-world video train-idm)"
        )
    if not path.is_dir():
        raise InvalidInput(f"IDM folder {path} is not a folder")
    meta_path = path / module_folder.CONFIG_FILE
    if not meta_path.is_file():
        raise InvalidInput(
            f"{path} is not an IDM folder: it has no {module_folder.CONFIG_FILE} (rlvr-world "
            "video train-idm writes one)"
        )
    meta = module_folder.parse_meta(meta_path, error=InvalidInput)
    kind = meta.get("kind") if isinstance(meta, dict) else None
    if kind != KIND or not isinstance(meta, dict):
        raise InvalidInput(
            f"{path} is not an IDM folder: {module_folder.CONFIG_FILE} holds kind {kind!r}"
        )
    if meta.get("format_version") != module_folder.FORMAT_VERSION:
        raise InvalidInput(
            f"{meta_path}: format_version {meta.get('format_version')!r}, this code reads "
            f"{module_folder.FORMAT_VERSION}"
        )
    try:
        return IdmConfig.model_validate(meta.get("config"))
    except ValidationError as exc:
        errors = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        raise InvalidInput(f"{meta_path}: the IDM config does not validate: {errors}") from None


def load_idm(directory: str | Path, device: str | torch.device = "cpu") -> InverseDynamicsModel:
    """An IDM in eval mode on ``device`` from a ``save``d folder; ``InvalidInput`` naming what
    is wrong for a missing folder, a folder of something else, or weights that do not fit."""
    path = Path(directory)
    config = _read_config(path)
    weights = path / module_folder.WEIGHTS_FILE
    if not weights.is_file():
        raise InvalidInput(f"IDM folder {path} has no {module_folder.WEIGHTS_FILE}")
    model = InverseDynamicsModel(config)
    module_folder.load_weights_file(model, weights, error=InvalidInput)
    logger.info("loaded the IDM from %s (%s, %s)", path, config.image_size, config.action_form)
    return model.to(device).eval()


# --------------------------------------------------------------------------------------------
# The reward of a predicted clip


def score_with_idm(
    idm: InverseDynamicsModel,
    previous_frame: object,
    pred: object,
    actions: object,
    config: ActionRewardConfig | None = None,
) -> RewardResult:
    """The action-following reward of predicted frames ``(T, H, W, 3)`` that followed
    ``previous_frame`` ``(H, W, 3)`` under ``actions`` ``(T, D)``: the IDM reads the action of
    each step (previous -> pred[0], pred[0] -> pred[1], ...) and ``score_actions`` compares
    (``config`` defaults to the IDM's own). Bad frames or actions: status ``invalid_input``."""
    cfg = config or idm.config.reward_config()
    try:
        if not isinstance(previous_frame, np.ndarray) or previous_frame.ndim != FRAME_NDIM:
            shape = getattr(previous_frame, "shape", type(previous_frame).__name__)
            raise InvalidInput(f"previous_frame: expected one frame (H, W, 3), got {shape}")
        frames = _check_frames(pred, "prediction", idm.config.image_size)
        first = _check_frames(previous_frame, "previous_frame", idm.config.image_size)
        if first.dtype != frames.dtype:
            first = first.astype(np.float32) / 255.0 if first.dtype == np.uint8 else first
            frames = frames.astype(np.float32) / 255.0 if frames.dtype == np.uint8 else frames
        prev = np.concatenate([first, frames[:-1]])
        read = idm.predict(prev, frames)
    except InvalidInput as exc:
        return failed(Status.INVALID_INPUT, str(exc))
    return score_actions(read, actions, cfg)


# --------------------------------------------------------------------------------------------
# Training


@dataclass(frozen=True)
class FitStats:
    """What ``fit_idm`` did: optimiser steps, seconds, the mean loss of the last 50 steps, and
    whether ``time_limit_s`` stopped it before ``steps``."""

    steps: int
    seconds: float
    final_loss: float
    stopped_early: bool


def fit_idm(  # noqa: PLR0913 (the optimiser's settings, each named at the call)
    model: InverseDynamicsModel,
    prev: NDArray[np.uint8],
    nxt: NDArray[np.uint8],
    actions: NDArray[Any],
    *,
    steps: int,
    batch_size: int = 64,
    lr: float = 2e-3,
    seed: int = 0,
    time_limit_s: float | None = None,
) -> FitStats:
    """Train ``model`` in place on uint8 frame pairs ``(N, H, W, 3)`` and their actions ``(N,
    D)`` (action units) on the model's device (module docstring); returns the model in eval
    mode. ``ValueError`` for data that does not fit the model or bad settings."""
    a, b = check_frame_pairs(prev, nxt, model.config.image_size)
    if a.dtype != np.uint8 or b.dtype != np.uint8:
        raise InvalidInput("fit_idm: training frames must be uint8")
    dims = model.config.action_dims
    acts = np.asarray(actions, dtype=np.float32)
    if acts.shape != (a.shape[0], dims) or not np.isfinite(acts).all():
        raise InvalidInput(
            f"actions: expected {a.shape[0]} finite rows of {dims}, got {acts.shape}"
        )
    if steps < 1 or batch_size < 1 or not lr > 0.0:
        raise InvalidInput(
            f"steps, batch_size, lr: must be positive, got {steps}, {batch_size}, {lr}"
        )
    device = model.device
    frames_a = torch.from_numpy(np.ascontiguousarray(a)).to(device)
    frames_b = torch.from_numpy(np.ascontiguousarray(b)).to(device)
    targets = model.scale(torch.from_numpy(acts).to(device))
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=1e-4)
    warmup = max(1, int(WARMUP_SHARE * steps))

    def lr_at(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        return 0.5 * (1.0 + math.cos(math.pi * (step - warmup) / max(1, steps - warmup)))

    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_at)
    gen = torch.Generator().manual_seed(seed)
    loss_fn = nn.SmoothL1Loss(beta=SMOOTH_L1_BETA)
    model.train()
    start, done = time.perf_counter(), 0
    recent: list[float] = []
    for step in range(steps):
        if time_limit_s is not None and time.perf_counter() - start > time_limit_s:
            break
        idx = torch.randint(0, a.shape[0], (batch_size,), generator=gen).to(device)
        x = frames_a[idx].permute(0, 3, 1, 2).float() / 255.0
        y = frames_b[idx].permute(0, 3, 1, 2).float() / 255.0
        loss = loss_fn(model(x, y), targets[idx])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sched.step()
        recent = [*recent[-49:], float(loss.detach())]
        done = step + 1
        if done % 500 == 0:
            logger.info("IDM step %d/%d: loss %.4f", done, steps, sum(recent) / len(recent))
    model.eval()
    seconds = time.perf_counter() - start
    return FitStats(done, seconds, sum(recent) / max(1, len(recent)), done < steps)
