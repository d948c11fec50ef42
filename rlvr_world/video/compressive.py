"""Compressive context tokenizer (iVideoGPT ``CompressiveVQModelFSQ``; the reference's "ctx_cnn",
docs/reference.md#frame-tokenizers).

What it does: a clip's first frame (the context) is tokenized richly by its own CNN encoder, FSQ and
decoder (``context_downsample``: the reference used 8x, 1280 tokens at 256x320); every future frame
is tokenized by a *conditional* encoder into few dynamics tokens (the reference: 8x downsample,
then patch 4, 80 tokens), because what the context already shows need not be coded again. The
conditioning is computed from the *quantised* context codes (a 3x3 convolution, resized to the
dynamics feature grid), so the decoder can rebuild it from the context tokens alone. Encoder:
frame features ++ conditioning -> residual block -> ``pixel_unshuffle(patch)`` -> 1x1 -> FSQ.
Decoder: FSQ codes -> 1x1 -> ``pixel_shuffle(patch)`` ++ conditioning -> residual block -> CNN
decoder. Tokens are row-major over each grid; clips are float ``(B, 1 + S, 3, H, W)`` in [0, 1].

Defaults are small CPU sizes for 64x64 frames: 256 context tokens (4x downsample) and 16 dynamics
tokens per future frame (4x downsample, patch 4), FSQ [8,5,5,5] for both.

What it does not do: no cross-attention between context and future features (the reference's
conditional blocks); conditioning is by concatenation at one scale. Training is in
``train_tokenizer.train_compressive``.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Self

import numpy as np
import torch
from numpy.typing import NDArray
from pydantic import Field, field_validator, model_validator
from torch import nn
from torch.nn import functional

from rlvr_world.shapes import CLIPS_NDIM, RGB_CHANNELS
from rlvr_world.video.conv import Decoder, Encoder, ResBlock, check_stages
from rlvr_world.video.fsq import FSQ, check_levels
from rlvr_world.video.module_folder import save_module_folder
from rlvr_world.video.tokenizer import (
    DEFAULT_BATCH_SIZE,
    FrameCodecShape,
    check_images,
    check_token_array,
    check_token_tensor,
    load_weights,
    module_device,
    read_config,
)

logger = logging.getLogger(__name__)

#: Fewest frames of a clip: the context frame and one future frame.
MIN_CLIP_FRAMES = 2
#: Rank of the dynamics tokens of a batch of clips ``(B, S, Pd)``.
DYNAMICS_TOKENS_NDIM = 3


class CompressiveConfig(FrameCodecShape):
    """Shape of a ``CompressiveTokenizer`` (defaults: 64x64 frames, 256 + 16 tokens)."""

    context_channels: tuple[int, ...] = Field(default=(32, 64), description="context stages")
    context_downsample: int = Field(default=4, ge=1, description="power of two")
    context_levels: tuple[int, ...] = Field(default=(8, 5, 5, 5), description="context FSQ")
    dynamics_channels: tuple[int, ...] = Field(default=(32, 64), description="dynamics stages")
    dynamics_downsample: int = Field(default=4, ge=1, description="power of two, before patch")
    patch: int = Field(default=4, ge=1, le=16, description="patchify factor of dynamics features")
    dynamics_levels: tuple[int, ...] = Field(default=(8, 5, 5, 5), description="dynamics FSQ")

    @field_validator("context_levels", "dynamics_levels")
    @classmethod
    def _levels(cls, value: tuple[int, ...]) -> tuple[int, ...]:
        return check_levels(value)

    @model_validator(mode="after")
    def _shapes(self) -> Self:
        g = self.norm_groups
        check_stages(self.context_channels, self.context_downsample, g, "context_channels")
        check_stages(self.dynamics_channels, self.dynamics_downsample, g, "dynamics_channels")
        for side in self.hw:
            if side < 1 or side % self.context_downsample:
                raise ValueError(
                    f"image_size: {self.image_size} not divisible by context_downsample"
                )
            if side % (self.dynamics_downsample * self.patch):
                raise ValueError(
                    f"image_size: {self.image_size} not divisible by dynamics_downsample * patch "
                    f"= {self.dynamics_downsample * self.patch}"
                )
        return self


class CompressiveTokenizer(nn.Module):
    """Context frame -> many tokens; each future frame, given the context -> few tokens."""

    KIND = "compressive_tokenizer"

    def __init__(self, config: CompressiveConfig | None = None) -> None:
        super().__init__()
        self.config = cfg = config or CompressiveConfig()
        common: dict[str, Any] = {"blocks": cfg.res_blocks, "groups": cfg.norm_groups}
        self.context_fsq = FSQ(cfg.context_levels)
        self.dynamics_fsq = FSQ(cfg.dynamics_levels)
        c_dim, d_dim = self.context_fsq.dim, self.dynamics_fsq.dim
        ctx: dict[str, Any] = {
            "channels": cfg.context_channels,
            "downsample": cfg.context_downsample,
        }
        self.context_encoder = Encoder(c_in=3, c_out=c_dim, **ctx, **common)
        self.context_decoder = Decoder(c_in=c_dim, c_out=3, **ctx, **common)
        dyn: dict[str, Any] = {
            "channels": cfg.dynamics_channels,
            "downsample": cfg.dynamics_downsample,
        }
        width = cfg.dynamics_channels[-1]
        packed = width * cfg.patch**2
        self.condition = nn.Conv2d(c_dim, width, 3, padding=1)
        self.dynamics_encoder = Encoder(c_in=3, c_out=width, **dyn, **common)
        self.encode_fuse = ResBlock(2 * width, width, cfg.norm_groups)
        self.encode_proj = nn.Conv2d(packed, d_dim, 1)
        self.decode_proj = nn.Conv2d(d_dim, packed, 1)
        self.decode_fuse = ResBlock(2 * width, width, cfg.norm_groups)
        self.dynamics_decoder = Decoder(c_in=width, c_out=3, **dyn, **common)

    # ---- sizes

    @property
    def context_grid(self) -> tuple[int, int]:
        """Context token grid (rows, columns): the frame over ``context_downsample``."""
        h, w = self.config.hw
        return h // self.config.context_downsample, w // self.config.context_downsample

    @property
    def feature_grid(self) -> tuple[int, int]:
        """The dynamics encoder's feature grid: the frame over ``dynamics_downsample``."""
        h, w = self.config.hw
        return h // self.config.dynamics_downsample, w // self.config.dynamics_downsample

    @property
    def dynamics_grid(self) -> tuple[int, int]:
        """Dynamics token grid: the feature grid over ``patch`` (one token per patch)."""
        fh, fw = self.feature_grid
        return fh // self.config.patch, fw // self.config.patch

    @property
    def context_tokens_per_frame(self) -> int:
        """Tokens of the context frame."""
        return self.context_grid[0] * self.context_grid[1]

    @property
    def dynamics_tokens_per_frame(self) -> int:
        """Tokens of each future frame."""
        return self.dynamics_grid[0] * self.dynamics_grid[1]

    @property
    def context_codebook_size(self) -> int:
        """Distinct context token ids (the context FSQ's levels multiplied)."""
        return self.context_fsq.codebook_size

    @property
    def dynamics_codebook_size(self) -> int:
        """Distinct dynamics token ids (the dynamics FSQ's levels multiplied)."""
        return self.dynamics_fsq.codebook_size

    # ---- building blocks (codes are (B, d, h, w))

    def _context_codes(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        check_images(x, self.config.hw, "context")
        z = self.context_encoder(x * 2.0 - 1.0).permute(0, 2, 3, 1)
        codes, ids = self.context_fsq(z)
        return codes.permute(0, 3, 1, 2), ids.flatten(1)

    def _codes_of(self, tokens: torch.Tensor, fsq: FSQ, grid: tuple[int, int]) -> torch.Tensor:
        return fsq.indices_to_codes(tokens.reshape(-1, *grid)).permute(0, 3, 1, 2)

    def _conditioning(self, context_codes: torch.Tensor, repeats: int) -> torch.Tensor:
        cond: torch.Tensor = self.condition(context_codes)
        if tuple(cond.shape[2:]) != self.feature_grid:
            cond = functional.interpolate(cond, size=self.feature_grid, mode="bilinear")
        return cond.repeat_interleave(repeats, dim=0)

    def _dynamics_codes(
        self, frames: torch.Tensor, cond: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        feats = self.dynamics_encoder(frames * 2.0 - 1.0)
        fused = self.encode_fuse(torch.cat([feats, cond], dim=1))
        z = self.encode_proj(functional.pixel_unshuffle(fused, self.config.patch))
        codes, ids = self.dynamics_fsq(z.permute(0, 2, 3, 1))
        return codes.permute(0, 3, 1, 2), ids.flatten(1)

    def _decode_dynamics_codes(self, codes: torch.Tensor, cond: torch.Tensor) -> torch.Tensor:
        feats = functional.pixel_shuffle(self.decode_proj(codes), self.config.patch)
        fused = self.decode_fuse(torch.cat([feats, cond], dim=1))
        out: torch.Tensor = (self.dynamics_decoder(fused) + 1.0) / 2.0
        return out

    def _check_future(self, frames: torch.Tensor, batch: int) -> None:
        h, w = self.config.hw
        if frames.ndim != CLIPS_NDIM or frames.shape[0] != batch:
            raise ValueError(
                f"frames: expected future frames (B, S, 3, {h}, {w}) with the context's batch "
                f"size B = {batch}, got {tuple(frames.shape)}"
            )
        check_images(frames.flatten(0, 1), self.config.hw, "frames")

    # ---- public API

    def forward(self, clip: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Trainable ``(context recon (B, 3, H, W), future recon (B, S, 3, H, W))``, unclamped."""
        if clip.ndim != CLIPS_NDIM or clip.shape[1] < MIN_CLIP_FRAMES:
            raise ValueError(f"clip: expected (B, 1 + S, 3, H, W) with S >= 1, got {clip.shape}")
        b, s1 = clip.shape[:2]
        codes, _ = self._context_codes(clip[:, 0])
        ctx_recon: torch.Tensor = (self.context_decoder(codes) + 1.0) / 2.0
        cond = self._conditioning(codes, s1 - 1)
        future = clip[:, 1:].flatten(0, 1)
        check_images(future, self.config.hw, "clip")
        dyn_codes, _ = self._dynamics_codes(future, cond)
        recon = self._decode_dynamics_codes(dyn_codes, cond)
        return ctx_recon, recon.reshape(b, s1 - 1, *recon.shape[1:])

    def encode_context(self, x: torch.Tensor) -> torch.Tensor:
        """Context tokens long ``(B, Pc)`` of frames ``(B, 3, H, W)`` in [0, 1]."""
        return self._context_codes(x)[1]

    def encode_dynamics(self, frames: torch.Tensor, context_tokens: torch.Tensor) -> torch.Tensor:
        """Dynamics tokens long ``(B, S, Pd)`` of future frames ``(B, S, 3, H, W)``."""
        self._check_context_tokens(context_tokens)
        self._check_future(frames, context_tokens.shape[0])
        b, s = frames.shape[:2]
        codes = self._codes_of(context_tokens, self.context_fsq, self.context_grid)
        _, ids = self._dynamics_codes(frames.flatten(0, 1), self._conditioning(codes, s))
        return ids.reshape(b, s, -1)

    def decode_context(self, context_tokens: torch.Tensor) -> torch.Tensor:
        """The context frame ``(B, 3, H, W)`` in [0, 1]."""
        self._check_context_tokens(context_tokens)
        codes = self._codes_of(context_tokens, self.context_fsq, self.context_grid)
        out: torch.Tensor = (self.context_decoder(codes) + 1.0) / 2.0
        return out.clamp(0.0, 1.0)

    def decode_dynamics(
        self, dynamics_tokens: torch.Tensor, context_tokens: torch.Tensor
    ) -> torch.Tensor:
        """Future frames ``(B, S, 3, H, W)`` in [0, 1] of tokens ``(B, S, Pd)`` and the context."""
        self._check_context_tokens(context_tokens)
        b = context_tokens.shape[0]
        pd, size = self.dynamics_tokens_per_frame, self.dynamics_codebook_size
        if dynamics_tokens.ndim != DYNAMICS_TOKENS_NDIM or dynamics_tokens.shape[0] != b:
            raise ValueError(
                f"dynamics_tokens: expected (B, S, {pd}) with the context's batch size B = {b}, "
                f"got {tuple(dynamics_tokens.shape)}"
            )
        s = dynamics_tokens.shape[1]
        flat = dynamics_tokens.flatten(0, 1)
        check_token_tensor(flat, pd, size, "dynamics_tokens")
        ctx_codes = self._codes_of(context_tokens, self.context_fsq, self.context_grid)
        codes = self._codes_of(flat, self.dynamics_fsq, self.dynamics_grid)
        frames = self._decode_dynamics_codes(codes, self._conditioning(ctx_codes, s))
        return frames.clamp(0.0, 1.0).reshape(b, s, *frames.shape[1:])

    def decode(self, context_tokens: torch.Tensor, dynamics_tokens: torch.Tensor) -> torch.Tensor:
        """The clip ``(B, 1 + S, 3, H, W)``: the context frame, then the future frames."""
        ctx = self.decode_context(context_tokens)
        future = self.decode_dynamics(dynamics_tokens, context_tokens)
        return torch.cat([ctx.unsqueeze(1), future], dim=1)

    def encode_clips(
        self, clips: NDArray[np.uint8], batch_size: int = DEFAULT_BATCH_SIZE
    ) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
        """``(context (N, Pc), dynamics (N, S, Pd))`` int64 of uint8 clips ``(N, 1+S, H, W, 3)``."""
        h, w = self.config.hw
        if not isinstance(clips, np.ndarray) or clips.dtype != np.uint8:
            raise ValueError("clips: expected a uint8 numpy array (N, 1 + S, H, W, 3)")
        if (
            clips.ndim != CLIPS_NDIM
            or clips.shape[1] < MIN_CLIP_FRAMES
            or clips.shape[2:] != (h, w, RGB_CHANNELS)
        ):
            raise ValueError(f"clips: expected shape (N, 1 + S, {h}, {w}, 3), got {clips.shape}")
        device = module_device(self)
        ctx_out, dyn_out = [], []
        with torch.inference_mode():
            for start in range(0, clips.shape[0], max(1, batch_size)):
                part = torch.from_numpy(clips[start : start + batch_size]).to(device)
                x = part.permute(0, 1, 4, 2, 3).float().div(255.0)
                ctx = self.encode_context(x[:, 0])
                ctx_out.append(ctx.cpu().numpy())
                dyn_out.append(self.encode_dynamics(x[:, 1:], ctx).cpu().numpy())
        return np.concatenate(ctx_out), np.concatenate(dyn_out)

    def decode_clips(
        self,
        context_tokens: NDArray[np.integer[Any]],
        dynamics_tokens: NDArray[np.integer[Any]],
        batch_size: int = DEFAULT_BATCH_SIZE,
    ) -> NDArray[np.float32]:
        """Clips float32 ``(N, 1 + S, H, W, 3)`` in [0, 1] from numpy tokens (see ``decode``)."""
        for name, arr in (("context_tokens", context_tokens), ("dynamics_tokens", dynamics_tokens)):
            if not isinstance(arr, np.ndarray) or not np.issubdtype(arr.dtype, np.integer):
                raise ValueError(f"{name}: expected an integer numpy array")
        device = module_device(self)
        out = []
        with torch.inference_mode():
            for start in range(0, context_tokens.shape[0], max(1, batch_size)):
                c = torch.from_numpy(context_tokens[start : start + batch_size].astype(np.int64))
                d = torch.from_numpy(dynamics_tokens[start : start + batch_size].astype(np.int64))
                clip = self.decode(c.to(device), d.to(device))
                out.append(clip.permute(0, 1, 3, 4, 2).cpu().numpy())
        return np.concatenate(out).astype(np.float32, copy=False)

    def decode_future(
        self,
        context_tokens: NDArray[np.integer[Any]],
        dynamics_tokens: NDArray[np.integer[Any]],
        batch_size: int = DEFAULT_BATCH_SIZE,
    ) -> NDArray[np.float32]:
        """Future frames float32 ``(N, S, H, W, 3)`` in [0, 1] of numpy context tokens
        ``(N, Pc)`` and dynamics tokens ``(N, S, Pd)`` (the context frame is not decoded)."""
        ctx = check_token_array(
            context_tokens,
            self.context_tokens_per_frame,
            self.context_codebook_size,
            "context_tokens",
        )
        pd = self.dynamics_tokens_per_frame
        if (
            not isinstance(dynamics_tokens, np.ndarray)
            or dynamics_tokens.ndim != DYNAMICS_TOKENS_NDIM
            or dynamics_tokens.shape[0] != ctx.shape[0]
            or dynamics_tokens.shape[2] != pd
        ):
            got = getattr(dynamics_tokens, "shape", type(dynamics_tokens).__name__)
            raise ValueError(
                f"dynamics_tokens: expected (N, S, {pd}) with the context's N = {ctx.shape[0]}, "
                f"got {got}"
            )
        n, s = dynamics_tokens.shape[:2]
        dyn = check_token_array(
            dynamics_tokens.reshape(n * s, pd), pd, self.dynamics_codebook_size, "dynamics_tokens"
        ).reshape(n, s, pd)
        device = module_device(self)
        out = np.empty((n, s, *self.frame_shape), dtype=np.float32)
        step = max(1, batch_size // max(1, s))
        with torch.inference_mode():
            for start in range(0, n, step):
                c = torch.from_numpy(ctx[start : start + step]).to(device)
                d = torch.from_numpy(dyn[start : start + step]).to(device)
                frames = self.decode_dynamics(d, c)
                out[start : start + step] = frames.permute(0, 1, 3, 4, 2).cpu().numpy()
        return out

    @property
    def frame_shape(self) -> tuple[int, int, int]:
        """(height, width, 3) of the frames it encodes and decodes."""
        h, w = self.config.hw
        return h, w, RGB_CHANNELS

    def _check_context_tokens(self, tokens: torch.Tensor) -> None:
        check_token_tensor(
            tokens, self.context_tokens_per_frame, self.context_codebook_size, "context_tokens"
        )

    def save(self, directory: str | Path) -> Path:
        """Write ``config.json`` and ``model.safetensors`` into ``directory``; returns it."""
        return save_module_folder(self, self.KIND, self.config, directory)

    @classmethod
    def load(
        cls, directory: str | Path, device: str | torch.device = "cpu"
    ) -> CompressiveTokenizer:
        """A compressive tokenizer in eval mode from a ``save``d folder."""
        config = CompressiveConfig.model_validate(read_config(directory, cls.KIND))
        model = cls(config)
        load_weights(model, directory)
        return model.to(device).eval()
