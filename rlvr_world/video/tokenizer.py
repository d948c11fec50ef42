"""Per-frame visual tokenizer: a CNN encoder, FSQ, and a CNN decoder (the reference's "cnn",
docs/reference.md#frame-tokenizers).

What it does: ``FrameTokenizer`` maps frames float ``(B, 3, H, W)`` in [0, 1] to ``(H/s) * (W/s)``
integer tokens (``s`` = ``downsample``) in ``[0, prod(levels))`` and back. The encoder and decoder
are VQ-GAN-style stacks of residual blocks (GroupNorm, SiLU, 3x3 convolutions): stage ``i`` has
``channels[i]`` channels and, for the first ``log2(downsample)`` stages, halves the resolution
(stride-2 convolution; the decoder mirrors it with nearest upsampling and a convolution). Inside,
pixels are scaled to [-1, 1]; ``decode`` returns frames clamped to [0, 1]. Numpy helpers
(``encode_frames`` / ``decode_tokens``) work on uint8 ``(N, H, W, 3)`` frames and int token arrays,
in batches, and reject bad input with a ``ValueError`` naming the problem. A checkpoint is a folder
with ``config.json`` (kind, format version, config) and ``model.safetensors`` (``module_folder``).

The reference tokenizer is 5 blocks (128..768 channels), 16x downsampling and FSQ [7,5,5,5,5]; the
default here is a small CPU size (64x64 frames, 8x downsampling, 64 tokens,
FSQ [8,5,5,5] = 1000 codes). Training lives in ``train_tokenizer``; the compressive context
tokenizer ("ctx_cnn") in ``compressive``.

What it does not do: no GAN loss, no attention blocks, no training code, no resizing (frames must
already have the configured size).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Self

import numpy as np
import torch
from numpy.typing import NDArray
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from torch import nn
from torch.nn import functional

from rlvr_world.shapes import FRAMES_NDIM, MATRIX_NDIM, RGB_CHANNELS
from rlvr_world.video.conv import Decoder, Encoder, check_stages
from rlvr_world.video.data import check_uint8_array
from rlvr_world.video.fsq import FSQ, check_levels
from rlvr_world.video.module_folder import (
    CONFIG_FILE,
    FORMAT_VERSION,
    WEIGHTS_FILE,
    load_weights_file,
    parse_meta,
    save_module_folder,
)

DEFAULT_BATCH_SIZE = 64


class FrameCodecShape(BaseModel):
    """What both frame tokenizers' shapes share (``TokenizerConfig``, the compressive one's
    ``CompressiveConfig``): the frame size and the CNN stages' residual blocks and norm groups."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    image_size: int | tuple[int, int] = Field(
        default=64, description="frame side, or (height, width)"
    )
    res_blocks: int = Field(default=1, ge=1, le=8, description="residual blocks per stage")
    norm_groups: int = Field(default=8, ge=1, description="GroupNorm groups (channels must divide)")

    @property
    def hw(self) -> tuple[int, int]:
        """``image_size`` as (height, width) in pixels."""
        return image_hw(self.image_size)


class TokenizerConfig(FrameCodecShape):
    """Shape of a ``FrameTokenizer``; the default is a small 64x64 one (64 tokens, 1000 codes).

    The CPU demo (``configs/video/pusht_tiny.yaml``) uses ``downsample=4`` and two stages
    (256 tokens): at 8x8 tokens the moving PushT objects do not survive a CPU training budget.
    """

    channels: tuple[int, ...] = Field(default=(32, 64, 128), description="channels of each stage")
    downsample: int = Field(
        default=8, ge=1, description="power of two; tokens per side = size / this"
    )
    levels: tuple[int, ...] = Field(
        default=(8, 5, 5, 5), description="FSQ levels; codes = their product"
    )
    input_patch: int = Field(
        default=2, ge=1, description="pixel-unshuffle factor before the CNN (power of two)"
    )

    @field_validator("levels")
    @classmethod
    def _levels(cls, value: tuple[int, ...]) -> tuple[int, ...]:
        return check_levels(value)

    @model_validator(mode="after")
    def _shapes(self) -> Self:
        p = self.input_patch
        if p & (p - 1) or self.downsample % p:
            raise ValueError(f"input_patch: {p} must be a power of two dividing downsample")
        check_stages(self.channels, self.downsample // p, self.norm_groups, "channels")
        for side in self.hw:
            if side < 1 or side % self.downsample:
                raise ValueError(
                    f"image_size: {self.image_size} must be positive and divisible by "
                    f"downsample {self.downsample}"
                )
        return self


def image_hw(size: int | tuple[int, int]) -> tuple[int, int]:
    """A config's ``image_size`` (one side, or (height, width)) as (height, width)."""
    return (size, size) if isinstance(size, int) else (size[0], size[1])


# --------------------------------------------------------------------------------------------
# Input checks shared with the compressive tokenizer


def check_images(x: torch.Tensor, hw: tuple[int, int], name: str) -> None:
    """``x`` must be float ``(B, 3, H, W)`` with the configured ``(H, W)``."""
    if not x.dtype.is_floating_point:
        raise ValueError(f"{name}: need a float tensor in [0, 1], got {x.dtype}")
    if x.ndim != FRAMES_NDIM or x.shape[1] != RGB_CHANNELS or tuple(x.shape[2:]) != hw:
        raise ValueError(f"{name}: expected shape (B, 3, {hw[0]}, {hw[1]}), got {tuple(x.shape)}")


def check_token_tensor(tokens: torch.Tensor, count: int, codebook: int, name: str) -> None:
    """``tokens`` must be integer ``(B, count)`` with ids in ``[0, codebook)``."""
    if tokens.dtype.is_floating_point or tokens.dtype.is_complex or tokens.dtype == torch.bool:
        raise ValueError(f"{name}: need an integer tensor, got {tokens.dtype}")
    if tokens.ndim != MATRIX_NDIM or tokens.shape[1] != count:
        raise ValueError(f"{name}: expected shape (B, {count}) tokens, got {tuple(tokens.shape)}")
    if tokens.numel() and (int(tokens.min()) < 0 or int(tokens.max()) >= codebook):
        raise ValueError(
            f"{name}: token ids must be in [0, {codebook}), "
            f"got min {int(tokens.min())} max {int(tokens.max())}"
        )


def check_frame_array(
    frames: object, hw: tuple[int, int], name: str = "frames"
) -> NDArray[np.uint8]:
    """``frames`` must be a uint8 numpy array ``(N, H, W, 3)`` with the configured ``(H, W)``."""
    frames = check_uint8_array(name, frames)
    if (
        frames.ndim != FRAMES_NDIM
        or frames.shape[3] != RGB_CHANNELS
        or tuple(frames.shape[1:3]) != hw
    ):
        raise ValueError(f"{name}: expected shape (N, {hw[0]}, {hw[1]}, 3), got {frames.shape}")
    return frames


def check_token_array(
    tokens: object, count: int, codebook: int, name: str = "tokens"
) -> NDArray[np.int64]:
    """``tokens`` must be an integer numpy array ``(N, count)`` with ids in ``[0, codebook)``."""
    if not isinstance(tokens, np.ndarray):
        raise ValueError(f"{name}: expected a numpy array, got {type(tokens).__name__}")
    if not np.issubdtype(tokens.dtype, np.integer):
        raise ValueError(f"{name}: expected an integer dtype, got {tokens.dtype}")
    if tokens.ndim != MATRIX_NDIM or tokens.shape[1] != count:
        raise ValueError(
            f"{name}: expected shape (N, {count}) ({count} per frame), got {tokens.shape}"
        )
    if tokens.size and (int(tokens.min()) < 0 or int(tokens.max()) >= codebook):
        raise ValueError(
            f"{name}: ids must be in [0, {codebook}), got min {int(tokens.min())} "
            f"max {int(tokens.max())}"
        )
    return tokens.astype(np.int64, copy=False)


def to_images(frames: NDArray[np.uint8], device: torch.device) -> torch.Tensor:
    """uint8 ``(N, H, W, 3)`` -> float ``(N, 3, H, W)`` in [0, 1] on ``device``."""
    x = torch.from_numpy(np.ascontiguousarray(frames)).to(device)
    return x.permute(0, 3, 1, 2).float().div(255.0)


def module_device(module: nn.Module) -> torch.device:
    """The device of ``module``'s first parameter."""
    return next(module.parameters()).device


# --------------------------------------------------------------------------------------------
# The tokenizer


class FrameTokenizer(nn.Module):
    """Frames float ``(B, 3, H, W)`` in [0, 1] <-> tokens long ``(B, P)`` (module docstring)."""

    KIND = "frame_tokenizer"

    def __init__(self, config: TokenizerConfig | None = None) -> None:
        super().__init__()
        self.config = config or TokenizerConfig()
        cfg = self.config
        self.quantizer = FSQ(cfg.levels)
        dim = self.quantizer.dim
        args: dict[str, Any] = {
            "channels": cfg.channels,
            "downsample": cfg.downsample // cfg.input_patch,
            "blocks": cfg.res_blocks,
            "groups": cfg.norm_groups,
        }
        pixels = 3 * cfg.input_patch**2
        self.encoder = Encoder(c_in=pixels, c_out=dim, **args)
        self.decoder = Decoder(c_in=dim, c_out=pixels, **args)

    @property
    def codebook_size(self) -> int:
        """Distinct token ids (the FSQ levels multiplied)."""
        return self.quantizer.codebook_size

    @property
    def grid(self) -> tuple[int, int]:
        """Tokens per column and per row: ``(H / downsample, W / downsample)``."""
        h, w = self.config.hw
        return h // self.config.downsample, w // self.config.downsample

    @property
    def tokens_per_frame(self) -> int:
        """Tokens of one frame: the grid's rows times columns."""
        return self.grid[0] * self.grid[1]

    @property
    def frame_shape(self) -> tuple[int, int, int]:
        """``(H, W, 3)`` of the numpy frames ``encode_frames`` takes."""
        return (*self.config.hw, 3)

    def quantized_latent(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(codes (B, d, h, w), tokens (B, P))`` of frames in [0, 1], with straight-through."""
        check_images(x, self.config.hw, "x")
        x = functional.pixel_unshuffle(x * 2.0 - 1.0, self.config.input_patch)
        z = self.encoder(x).permute(0, 2, 3, 1)
        codes, indices = self.quantizer(z)
        return codes.permute(0, 3, 1, 2), indices.flatten(1)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(reconstruction (B, 3, H, W), unclamped; tokens (B, P))`` with gradients."""
        codes, tokens = self.quantized_latent(x)
        return self._pixels(codes), tokens

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        """Tokens long ``(B, P)`` (row-major over the token grid) of frames ``(B, 3, H, W)``."""
        return self.quantized_latent(x)[1]

    def decode(self, tokens: torch.Tensor) -> torch.Tensor:
        """Frames ``(B, 3, H, W)`` clamped to [0, 1] of tokens ``(B, P)``."""
        check_token_tensor(tokens, self.tokens_per_frame, self.codebook_size, "tokens")
        codes = self.quantizer.indices_to_codes(tokens.reshape(-1, *self.grid))
        return self._pixels(codes.permute(0, 3, 1, 2)).clamp(0.0, 1.0)

    def _pixels(self, codes: torch.Tensor) -> torch.Tensor:
        """Decoder output for codes ``(B, d, h, w)`` as frames in [0, 1] scale (unclamped)."""
        out = functional.pixel_shuffle(self.decoder(codes), self.config.input_patch)
        return (out + 1.0) / 2.0

    def encode_frames(
        self, frames: NDArray[np.uint8], batch_size: int = DEFAULT_BATCH_SIZE
    ) -> NDArray[np.int64]:
        """Tokens int64 ``(N, P)`` of uint8 frames ``(N, H, W, 3)``, in batches, no gradients."""
        check_frame_array(frames, self.config.hw)
        _check_batch_size(batch_size)
        device = module_device(self)
        out = np.empty((frames.shape[0], self.tokens_per_frame), dtype=np.int64)
        with torch.inference_mode():
            for start in range(0, frames.shape[0], batch_size):
                x = to_images(frames[start : start + batch_size], device)
                out[start : start + batch_size] = self.encode(x).cpu().numpy()
        return out

    def decode_tokens(
        self, tokens: NDArray[np.integer[Any]], batch_size: int = DEFAULT_BATCH_SIZE
    ) -> NDArray[np.float32]:
        """Frames float32 ``(N, H, W, 3)`` in [0, 1] of tokens ``(N, P)``, in batches."""
        ids = check_token_array(tokens, self.tokens_per_frame, self.codebook_size)
        _check_batch_size(batch_size)
        device = module_device(self)
        out = np.empty((ids.shape[0], *self.frame_shape), dtype=np.float32)
        with torch.inference_mode():
            for start in range(0, ids.shape[0], batch_size):
                t = torch.from_numpy(ids[start : start + batch_size]).to(device)
                out[start : start + batch_size] = self.decode(t).permute(0, 2, 3, 1).cpu().numpy()
        return out

    def save(self, directory: str | Path) -> Path:
        """Write ``config.json`` and ``model.safetensors`` into ``directory``; returns it."""
        return save_module_folder(self, self.KIND, self.config, directory)

    @classmethod
    def load(cls, directory: str | Path, device: str | torch.device = "cpu") -> FrameTokenizer:
        """A tokenizer in eval mode from a ``save``d folder; ``ValueError`` when it does not fit."""
        config = TokenizerConfig.model_validate(read_config(directory, cls.KIND))
        model = cls(config)
        load_weights(model, directory)
        return model.to(device).eval()


def _check_batch_size(batch_size: int) -> None:
    if batch_size < 1:
        raise ValueError(f"batch_size: must be >= 1, got {batch_size}")


# --------------------------------------------------------------------------------------------
# Checkpoints (shared with the compressive tokenizer; the folder layout is ``module_folder``'s)

#: How the tokenizers' checkpoint errors start (those of ``module_folder``'s readers too).
_ERROR_PREFIX = "tokenizer checkpoint: "


def _read_meta(directory: str | Path) -> tuple[Path, object]:
    """``directory/config.json`` and its parsed JSON; a missing or unparsable file raises."""
    path = Path(directory) / CONFIG_FILE
    if not path.is_file():
        raise FileNotFoundError(f"tokenizer checkpoint: {path} is missing")
    return path, parse_meta(path, prefix=_ERROR_PREFIX)


def checkpoint_kind(directory: str | Path) -> str:
    """The ``kind`` a tokenizer checkpoint folder holds (``frame_tokenizer`` or
    ``compressive_tokenizer``), read from its ``config.json``."""
    path, meta = _read_meta(directory)
    kind = meta.get("kind") if isinstance(meta, dict) else None
    if not isinstance(kind, str):
        raise ValueError(f"tokenizer checkpoint: {path} names no kind")
    return kind


def read_config(directory: str | Path, kind: str) -> dict[str, Any]:
    """The ``config`` object of ``directory/config.json``, checked to be of ``kind``."""
    path, meta = _read_meta(directory)
    if not isinstance(meta, dict) or meta.get("kind") != kind:
        found = meta.get("kind") if isinstance(meta, dict) else type(meta).__name__
        raise ValueError(f"tokenizer checkpoint: {path} holds kind {found!r}, expected {kind!r}")
    if meta.get("format_version") != FORMAT_VERSION:
        raise ValueError(
            f"tokenizer checkpoint: {path} has format_version {meta.get('format_version')!r}, "
            f"this code reads {FORMAT_VERSION}"
        )
    config = meta.get("config")
    if not isinstance(config, dict):
        raise ValueError(f"tokenizer checkpoint: {path} has no config object")
    return config


def load_weights(module: nn.Module, directory: str | Path) -> None:
    """Load ``directory/model.safetensors`` into ``module``; every tensor must match exactly."""
    path = Path(directory) / WEIGHTS_FILE
    if not path.is_file():
        raise FileNotFoundError(f"tokenizer checkpoint: {path} is missing")
    load_weights_file(module, path, prefix=_ERROR_PREFIX)
