"""Action-following reward: the actions read back from predicted frames against the true ones.

An inverse-dynamics model (``rlvr_world.video.idm``) reads the action that leads from each frame
to the next; this module scores those read actions ``p`` against the actions ``a`` the world
model was given (RLIR, arXiv 2509.23958, rewards GRPO with an IDM's accuracy on generated
frames). Each axis ``d`` has the range ``[lo_d, hi_d]`` of the world model's action space (for
PushT ``agent_relative``: ``[-relative_range, relative_range]`` arena pixels); both ``p`` and ``a``
are clipped to it (the world model's action quantiser clips the same way), then::

    e_t   = (1/D) sum_d |p_t,d - a_t,d| / (hi_d - lo_d)         (in [0, 1])
    acc_t = [ |p_t,d - a_t,d| <= tolerance * (hi_d - lo_d) for every d ]
    reward = -(1/T) sum_t e_t

``action_accuracy`` measures an IDM on many steps the way a report states it: mean absolute
error per axis in action units, R^2 per axis (1 - residual / total sum of squares around the
true mean; None where the true actions do not vary), and the share of steps within the
tolerance.

What it does not do: no torch, no model: the read actions come from the caller. Continuous
actions only (a discrete action space would score accuracy alone). ``score_actions`` never
raises for bad input (status ``invalid_input``); ``check_actions`` raises ``InvalidInput``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from rlvr_world.rewards.checks import as_float_array, require_finite
from rlvr_world.rewards.types import InvalidInput, RewardResult, Status, failed
from rlvr_world.shapes import MATRIX_NDIM

FloatArray = NDArray[np.float64]

#: The default tolerance: 1/16 of each axis' range (16 arena pixels for a range of +-128).
DEFAULT_TOLERANCE = 1.0 / 16.0
#: Most action dimensions an action space may have.
MAX_ACTION_DIMS = 64


@dataclass(frozen=True)
class ActionRewardConfig:
    """The action space the reward measures in: ``ranges`` one ``(low, high)`` per axis
    (finite, ``high > low``), and ``tolerance`` in (0, 1], the share of each axis' range within
    which a read action counts as accurate."""

    ranges: tuple[tuple[float, float], ...]
    tolerance: float = DEFAULT_TOLERANCE

    def __post_init__(self) -> None:
        object.__setattr__(self, "ranges", check_ranges(self.ranges))
        if not (math.isfinite(self.tolerance) and 0.0 < self.tolerance <= 1.0):
            raise InvalidInput(f"tolerance: must lie in (0, 1], got {self.tolerance!r}")

    @property
    def dims(self) -> int:
        """Action dimensions D."""
        return len(self.ranges)

    def bounds(self) -> tuple[FloatArray, FloatArray]:
        """``(low, width)`` arrays ``(D,)``."""
        arr = np.asarray(self.ranges, dtype=np.float64)
        return arr[:, 0], arr[:, 1] - arr[:, 0]


def check_ranges(ranges: object) -> tuple[tuple[float, float], ...]:
    """``ranges`` as a tuple of ``(low, high)`` floats; ``InvalidInput`` naming the problem."""
    if not isinstance(ranges, Sequence) or isinstance(ranges, str) or not ranges:
        raise InvalidInput(f"ranges: expected one (low, high) pair per action axis, got {ranges!r}")
    if len(ranges) > MAX_ACTION_DIMS:
        raise InvalidInput(f"ranges: at most {MAX_ACTION_DIMS} action axes, got {len(ranges)}")
    out = []
    for i, pair in enumerate(ranges):
        if not isinstance(pair, Sequence) or len(pair) != 2:  # noqa: PLR2004 (a pair)
            raise InvalidInput(f"ranges[{i}]: expected (low, high), got {pair!r}")
        low, high = pair
        if any(isinstance(v, bool) or not isinstance(v, int | float) for v in (low, high)):
            raise InvalidInput(f"ranges[{i}]: expected two numbers, got {pair!r}")
        if not (math.isfinite(low) and math.isfinite(high) and high > low):
            raise InvalidInput(f"ranges[{i}]: expected finite low < high, got {pair!r}")
        out.append((float(low), float(high)))
    return tuple(out)


def check_actions(x: object, name: str, dims: int) -> FloatArray:
    """``x`` as finite float64 actions ``(T, dims)`` (one ``(dims,)`` is ``T = 1``);
    ``InvalidInput`` naming ``name`` for another shape, no steps, or a non-finite value."""
    arr = as_float_array(x, name)
    given = arr.shape
    arr = arr[None] if arr.ndim == 1 else arr
    if arr.ndim != MATRIX_NDIM or arr.shape[1] != dims:
        raise InvalidInput(
            f"{name}: expected actions of dimension {dims}, shape (T, {dims}) or ({dims},), "
            f"got {given}"
        )
    if arr.shape[0] == 0:
        raise InvalidInput(f"{name}: no actions (shape {given})")
    require_finite(arr, name)
    return arr


def _checked_pair(
    pred: object, true: object, config: ActionRewardConfig
) -> tuple[FloatArray, FloatArray]:
    p = check_actions(pred, "predicted actions", config.dims)
    a = check_actions(true, "actions", config.dims)
    if p.shape != a.shape:
        raise InvalidInput(
            f"predicted actions: {p.shape[0]} steps read from the frames but {a.shape[0]} "
            "true actions; one action per predicted frame"
        )
    low, width = config.bounds()
    return np.clip(p, low, low + width), np.clip(a, low, low + width)


@dataclass(frozen=True)
class ActionErrors:
    """Per-step results ``(T,)``: the normalised error ``e_t`` and whether the step is within
    the tolerance on every axis; and the absolute errors ``(T, D)`` in action units."""

    normalised: FloatArray
    within: NDArray[np.bool_]
    absolute: FloatArray


def action_errors(pred: object, true: object, config: ActionRewardConfig) -> ActionErrors:
    """The per-step errors of read actions ``(T, D)`` against true ones (module docstring);
    ``InvalidInput`` for actions of the wrong dimension or count."""
    p, a = _checked_pair(pred, true, config)
    _, width = config.bounds()
    absolute = np.abs(p - a)
    return ActionErrors(
        normalised=np.asarray((absolute / width).mean(axis=1), dtype=np.float64),
        within=np.asarray((absolute <= config.tolerance * width).all(axis=1)),
        absolute=absolute,
    )


def score_actions(pred: object, true: object, config: ActionRewardConfig) -> RewardResult:
    """The action-following reward of read actions ``(T, D)`` against the true ``(T, D)``.

    Bad input gives status ``invalid_input`` with the reason. Metrics: ``idm_error`` (the mean
    normalised error, ``-reward``), ``idm_acc`` (share of steps within the tolerance),
    ``idm_mae`` (mean absolute error over steps and axes, in action units) and ``n_frames``.
    """
    try:
        err = action_errors(pred, true, config)
    except InvalidInput as exc:
        return failed(Status.INVALID_INPUT, str(exc))
    error = float(err.normalised.mean())
    metrics = {
        "idm_error": error,
        "idm_acc": float(err.within.mean()),
        "idm_mae": float(err.absolute.mean()),
        "n_frames": float(err.normalised.shape[0]),
    }
    return RewardResult(reward=-error, status=Status.OK, metrics=metrics)


@dataclass(frozen=True)
class ActionAccuracy:
    """How well read actions match true ones over many steps (module docstring)."""

    mae: tuple[float, ...]
    r2: tuple[float | None, ...]
    within: float
    error: float
    n: int

    def to_dict(self) -> dict[str, Any]:
        """The accuracy as a JSON-able dict (report keys)."""
        return {
            "mae": list(self.mae),
            "r2": list(self.r2),
            "within_tolerance": self.within,
            "normalised_error": self.error,
            "n": self.n,
        }


def action_accuracy(pred: object, true: object, config: ActionRewardConfig) -> ActionAccuracy:
    """MAE and R^2 per axis, share within the tolerance and mean normalised error of read
    actions against true ones (both clipped to the ranges); ``InvalidInput`` as ``score_actions``
    says."""
    p, a = _checked_pair(pred, true, config)
    err = action_errors(p, a, config)
    residual = np.square(p - a).sum(axis=0)
    total = np.square(a - a.mean(axis=0)).sum(axis=0)
    r2 = tuple(
        None if tot <= 0.0 else float(1.0 - res / tot)
        for res, tot in zip(residual, total, strict=True)
    )
    return ActionAccuracy(
        mae=tuple(float(v) for v in err.absolute.mean(axis=0)),
        r2=r2,
        within=float(err.within.mean()),
        error=float(err.normalised.mean()),
        n=int(a.shape[0]),
    )
