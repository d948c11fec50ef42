"""The convolutional building blocks of both video tokenizers: residual blocks, an upsampler,
and the encoder and decoder stacks (``channels`` stages, ``downsample`` = 2 ** halvings).

``tokenizer.FrameTokenizer`` (per frame) and ``compressive.CompressiveTokenizer`` build on
these; their layers and state-dict keys (``net.<i>``) are what their checkpoints hold, so a
change here is a checkpoint format change. No quantisation, no I/O.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional


def check_stages(channels: tuple[int, ...], downsample: int, groups: int, name: str) -> None:
    """Check stage channels and a power-of-two ``downsample`` (at most one halving per stage)."""
    if not channels or any(c < 1 or c % groups for c in channels):
        raise ValueError(
            f"{name}: need positive channel counts divisible by {groups}, got {channels}"
        )
    if downsample & (downsample - 1):
        raise ValueError(f"downsample: must be a power of two, got {downsample}")
    if n_halvings(downsample) > len(channels):
        raise ValueError(
            f"downsample: {downsample} needs {n_halvings(downsample)} stages, "
            f"{name} has {len(channels)}"
        )


def n_halvings(downsample: int) -> int:
    """log2 of a power-of-two downsample factor."""
    return int(math.log2(downsample))


class ResBlock(nn.Module):
    """GroupNorm-SiLU-conv twice, plus a (1x1-projected when channels change) skip."""

    def __init__(self, c_in: int, c_out: int, groups: int) -> None:
        super().__init__()
        self.body = nn.Sequential(
            nn.GroupNorm(groups, c_in),
            nn.SiLU(),
            nn.Conv2d(c_in, c_out, 3, padding=1),
            nn.GroupNorm(groups, c_out),
            nn.SiLU(),
            nn.Conv2d(c_out, c_out, 3, padding=1),
        )
        self.skip = nn.Identity() if c_in == c_out else nn.Conv2d(c_in, c_out, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``(B, c_in, H, W)`` -> ``(B, c_out, H, W)``."""
        out: torch.Tensor = self.skip(x) + self.body(x)
        return out


class Upsample(nn.Module):
    """Nearest-neighbour 2x upsampling followed by a 3x3 convolution."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.conv = nn.Conv2d(channels, channels, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``(B, C, H, W)`` -> ``(B, C, 2H, 2W)``."""
        out: torch.Tensor = self.conv(functional.interpolate(x, scale_factor=2.0, mode="nearest"))
        return out


def _stage(c_in: int, c_out: int, blocks: int, groups: int) -> list[nn.Module]:
    return [ResBlock(c_in if i == 0 else c_out, c_out, groups) for i in range(blocks)]


def _head(c_in: int, c_out: int, groups: int, kernel: int) -> list[nn.Module]:
    return [
        nn.GroupNorm(groups, c_in),
        nn.SiLU(),
        nn.Conv2d(c_in, c_out, kernel, padding=kernel // 2),
    ]


@dataclass(frozen=True)
class _Sizes:
    """The sizes an encoder or decoder is built from."""

    c_in: int
    channels: tuple[int, ...]
    halvings: int
    blocks: int
    groups: int
    c_out: int


class _ConvStack(nn.Module):
    """One ``nn.Sequential`` of the layers ``build`` lays out for the sizes below."""

    def __init__(
        self,
        *,
        c_in: int,
        channels: tuple[int, ...],
        downsample: int,
        blocks: int,
        groups: int,
        c_out: int,
    ) -> None:
        super().__init__()
        sizes = _Sizes(c_in, channels, n_halvings(downsample), blocks, groups, c_out)
        self.net = nn.Sequential(*self.build(sizes))

    @staticmethod
    def build(s: _Sizes) -> list[nn.Module]:
        raise NotImplementedError

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.net(x)
        return out


class Encoder(_ConvStack):
    """``(B, c_in, H, W)`` -> ``(B, c_out, H/s, W/s)`` through the stages of ``channels``."""

    @staticmethod
    def build(s: _Sizes) -> list[nn.Module]:
        """Stem, a stage per channel width (the first ``halvings`` halve), then the head."""
        layers: list[nn.Module] = [nn.Conv2d(s.c_in, s.channels[0], 3, padding=1)]
        prev = s.channels[0]
        for i, c in enumerate(s.channels):
            layers += _stage(prev, c, s.blocks, s.groups)
            if i < s.halvings:
                layers.append(nn.Conv2d(c, c, 3, stride=2, padding=1))
            prev = c
        return [*layers, ResBlock(prev, prev, s.groups), *_head(prev, s.c_out, s.groups, 1)]


class Decoder(_ConvStack):
    """``(B, c_in, H/s, W/s)`` -> ``(B, c_out, H, W)``, the mirror image of ``Encoder``."""

    @staticmethod
    def build(s: _Sizes) -> list[nn.Module]:
        """Stem, a stage per width in reverse (the last ``halvings`` double), then the head."""
        prev = s.channels[-1]
        layers: list[nn.Module] = [
            nn.Conv2d(s.c_in, prev, 3, padding=1),
            ResBlock(prev, prev, s.groups),
        ]
        for i in reversed(range(len(s.channels))):
            if i < s.halvings:
                layers.append(Upsample(prev))
            layers += _stage(prev, s.channels[i], s.blocks, s.groups)
            prev = s.channels[i]
        return [*layers, *_head(prev, s.c_out, s.groups, 3)]
