"""Finite scalar quantisation (FSQ; Mentzer et al. 2023, "FSQ: VQ-VAE Made Simple").

What it does: each of the ``d = len(levels)`` channels of a latent is squashed by ``tanh`` into a
bounded range and rounded to one of ``levels[i]`` values; the rounding passes gradients straight
through. The implied codebook is the grid of all combinations, ``prod(levels)`` codes, so there is
no codebook to learn, no commitment loss and no dead codes. Codes are in [-1, 1]; an index is the
mixed-radix number of the per-channel levels (channel 0 is the least significant digit), as in the
reference implementation, so ``levels=(7, 5, 5, 5, 5)`` gives the paper's 4375 codes.

Even levels use the paper's half-step offset so that they also have exactly ``levels[i]`` values.

What it does not do: no projection in or out of the latent (the tokenizer's 1x1 convolutions do
that), no entropy or commitment terms.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import nn

#: Stretches ``tanh`` a hair past the outermost levels so that rounding reaches them.
DEFAULT_EPS = 1e-3
#: Fewest values a quantised dimension can take.
MIN_LEVEL = 2


def round_ste(z: torch.Tensor) -> torch.Tensor:
    """``round(z)`` in the forward pass, identity in the backward pass (straight-through)."""
    return z + (torch.round(z) - z).detach()


def check_levels(levels: Sequence[int]) -> tuple[int, ...]:
    """``levels`` as a tuple; each must be an int >= 2 and there must be at least one."""
    out = tuple(levels)
    if not out:
        raise ValueError("levels: need at least one level")
    for level in out:
        if isinstance(level, bool) or not isinstance(level, int) or level < MIN_LEVEL:
            raise ValueError(f"levels: every level must be an int >= 2, got {out}")
    return out


class FSQ(nn.Module):
    """Quantise ``(..., d)`` latents to codes in [-1, 1] and integer indices in [0, codebook_size).

    ``forward(z)`` returns ``(codes, indices)``; codes pass straight-through gradients to ``z``.
    """

    _levels: torch.Tensor
    _basis: torch.Tensor
    _half_width: torch.Tensor

    def __init__(self, levels: Sequence[int], eps: float = DEFAULT_EPS) -> None:
        super().__init__()
        self.levels = check_levels(levels)
        if eps < 0.0 or (max(self.levels) - 1) * eps >= 1.0:
            raise ValueError(f"eps: must be in [0, 1 / (max(levels) - 1)), got {eps}")
        self.eps = eps
        self.dim = len(self.levels)
        self.codebook_size = math.prod(self.levels)
        basis = [math.prod(self.levels[:i]) for i in range(self.dim)]
        self.register_buffer("_levels", torch.tensor(self.levels, dtype=torch.int64), False)
        self.register_buffer("_basis", torch.tensor(basis, dtype=torch.int64), False)
        half = torch.tensor([lv // 2 for lv in self.levels], dtype=torch.float32)
        self.register_buffer("_half_width", half, False)

    def bound(self, z: torch.Tensor) -> torch.Tensor:
        """Squash ``z`` so that rounding gives exactly ``levels[i]`` integer values per channel."""
        levels = self._levels.to(z.dtype)
        half_l = (levels - 1) * (1 + self.eps) / 2
        offset = torch.where(self._levels % 2 == 0, 0.5, 0.0).to(z.dtype)
        shift = torch.atanh(offset / half_l)
        return torch.tanh(z + shift) * half_l - offset

    def quantize(self, z: torch.Tensor) -> torch.Tensor:
        """Codes in [-1, 1] for latents ``(..., d)``, with straight-through gradients."""
        self._check_dim(z)
        return round_ste(self.bound(z)) / self._half_width.to(z.dtype)

    def codes_to_indices(self, codes: torch.Tensor) -> torch.Tensor:
        """Integer indices ``(...)`` of codes ``(..., d)`` (as returned by ``quantize``)."""
        self._check_dim(codes)
        digits = torch.round(codes * self._half_width + self._half_width).long()
        return (digits * self._basis).sum(dim=-1)

    def indices_to_codes(self, indices: torch.Tensor) -> torch.Tensor:
        """Codes ``(..., d)`` in [-1, 1] of integer indices ``(...)``; raises on bad ids."""
        if indices.dtype.is_floating_point or indices.dtype == torch.bool:
            raise ValueError(f"indices: need an integer tensor, got {indices.dtype}")
        if indices.numel() and (int(indices.min()) < 0 or int(indices.max()) >= self.codebook_size):
            raise ValueError(
                f"indices: ids must be in [0, {self.codebook_size}), "
                f"got min {int(indices.min())} max {int(indices.max())}"
            )
        digits = (indices.long().unsqueeze(-1) // self._basis) % self._levels
        return (digits.float() - self._half_width) / self._half_width

    def forward(self, z: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(codes, indices)`` of latents ``(..., d)``."""
        codes = self.quantize(z)
        return codes, self.codes_to_indices(codes.detach())

    def _check_dim(self, z: torch.Tensor) -> None:
        if z.shape[-1] != self.dim:
            raise ValueError(f"z: last dimension must be {self.dim} (len(levels)), got {z.shape}")

    def extra_repr(self) -> str:
        """The levels and codebook size, for ``repr``."""
        return f"levels={self.levels}, codebook_size={self.codebook_size}"
