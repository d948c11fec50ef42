"""Per-patch video rewards: each cell of a (rows, cols) grid of a frame gets its own reward.

What it does: checks a patch grid, averages per-pixel losses over its cells, and turns a frame's
loss and the per-cell values of its local terms (L1, MSE, and a perceptual distance's spatial map)
into one reward per cell that averages to the frame's reward (``rlvr_world.rewards.video``'s
``patch_rewards``; our per-token credit, ``rl.token_credit``; not in the reference).

What it does not do: no torch, no scoring of whole frames (``rlvr_world.rewards.video``).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
from numpy.typing import NDArray

from rlvr_world.rewards.types import InvalidInput

FloatArray = NDArray[np.float64]


def check_grid(grid: object) -> tuple[int, int]:
    """``grid`` as ``(rows, cols)``; ``InvalidInput`` unless it is two positive integers."""
    if (
        not isinstance(grid, tuple | list)
        or len(grid) != 2  # noqa: PLR2004 (rows, cols)
        or not all(isinstance(n, int) and not isinstance(n, bool) and n > 0 for n in grid)
    ):
        raise InvalidInput(
            f"patch_grid: expected (rows, cols), two positive integers, got {grid!r}"
        )
    return int(grid[0]), int(grid[1])


#: Metrics whose per-frame value is the mean of per-pixel values, so a patch has its own.
PATCH_METRICS = ("l1", "mse")


def check_grid_fits(height: int, width: int, grid: tuple[int, int]) -> None:
    """``InvalidInput`` unless ``height x width`` frames split into ``grid`` equal patches."""
    if height % grid[0] or width % grid[1]:
        raise InvalidInput(
            f"patch_grid: frames of {height}x{width} do not split into a {grid[0]}x{grid[1]} "
            "grid of equal patches"
        )


def patch_means(x: FloatArray, grid: tuple[int, int]) -> FloatArray:
    """``x (T, H, W, C)`` averaged over each cell of a ``(rows, cols)`` grid and the channels:
    ``(T, rows, cols)``. ``InvalidInput`` when H or W is not a multiple of the grid."""
    rows, cols = grid
    t, h, w, c = x.shape
    check_grid_fits(h, w, grid)
    cells = x.reshape(t, rows, h // rows, cols, w // cols, c)
    return np.asarray(cells.mean(axis=(2, 4, 5)), dtype=np.float64)


def patch_rewards(
    pred: FloatArray,
    target: FloatArray,
    weights: Mapping[str, float],
    frame_loss: FloatArray,
    *,
    grid: tuple[int, int],
    perceptual_cells: Mapping[str, FloatArray] | None = None,
) -> FloatArray:
    """The reward of each patch, ``(T, rows, cols)``: ``-(the frame's loss + sum over local terms
    of w_m * (the patch's value_m - the frame's mean of them))``, where ``frame_loss (T,)`` is the
    frame's whole weighted loss under ``weights`` (repetition penalty included). Local terms: L1
    and MSE, and each perceptual metric with ``perceptual_cells[name]`` ``(T, rows, cols)`` (its
    spatial map per cell). A frame's patch rewards average to ``-frame_loss``; the terms without
    a local form (PSNR, SSIM, a perceptual distance without cells, the repetition penalty) are
    shared by every patch of the frame."""
    diff = pred - target
    local = np.zeros((pred.shape[0], *grid), dtype=np.float64)
    terms: dict[str, FloatArray] = {}
    for name in PATCH_METRICS:
        if weights.get(name, 0.0) > 0.0:
            terms[name] = patch_means(np.abs(diff) if name == "l1" else np.square(diff), grid)
    terms.update(perceptual_cells or {})
    for name, cells in terms.items():
        weight = weights.get(name, 0.0)
        if weight > 0.0:
            local += weight * (cells - cells.mean(axis=(1, 2), keepdims=True))
    return -(local + frame_loss[:, None, None])
