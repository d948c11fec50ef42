"""PushT state check: where the agent and the T block are in a frame, against the simulator.

What it does:

* ``segment``: the agent's and the block's centres read from an RGB frame by colour (our
  renderer is gym-pusht's: a RoyalBlue agent, a LightSlateGray T on a light background and a
  light-green goal T), in arena pixels (the 512-pixel square of gym-pusht). A part with too few
  pixels is ``None`` (not found). On gym-pusht's renders resized to 64x64 its centres are off by
  1.5 arena pixels for the agent and 2.3 for the T's area centroid on average
  (docs/video.md#state-check).
* ``block_centre``: the area centroid of the T at a block pose ``(x, y, angle)`` (the pose of
  gym-pusht's ``block.position`` and ``block.angle``): the point ``segment`` estimates. It is not
  the body's centre of gravity, which gym-pusht sets to the unweighted mean of the two parts'
  centroids.
* ``state_errors`` and ``score_state``: per predicted frame, the distance from the segmented
  agent centre to the simulator's agent position and from the segmented block centre to
  ``block_centre`` of the simulator's block pose, each capped at ``max_error_px`` (a part missing
  from the prediction counts as that cap)::

      e_t = (w * min(d_agent,t, cap) + (1 - w) * min(d_block,t, cap)) / cap   (w: agent_weight)
      reward = -(1/T) sum_t e_t                    (in [-1, 0]; 0: every centre exact)

  The default cap is the arena's diagonal, the largest distance two points of the arena can have,
  so a missing part scores as the worst possible placement and nothing is clipped.

What it does not do: no torch, no gym, no simulator: the true states come from the caller (the
recordings' ``agent_pos`` and ``block_pose`` of the frames predicted). No angle check (the
colour centre carries no reliable orientation at 64x64). ``score_state`` never raises for bad
input: it returns status ``invalid_input``; ``check_states`` raises ``InvalidInput``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from rlvr_world.rewards.checks import as_float_array, check_pixel_dtype, require_finite
from rlvr_world.rewards.types import InvalidInput, RewardResult, Status, failed
from rlvr_world.shapes import FRAME_NDIM, FRAMES_NDIM, MATRIX_NDIM, RGB_CHANNELS

FloatArray = NDArray[np.float64]

#: Side of gym-pusht's arena in its own pixels (agent positions, block poses, absolute actions).
ARENA = 512.0
#: The longest distance inside the arena: the default cap of a centre's error.
ARENA_DIAGONAL = ARENA * math.sqrt(2.0)
#: The frame side the pixel counts below are stated for (``segment`` scales them with the area).
FRAME_SIDE = 64
#: The T of gym-pusht's ``PushTEnv.add_tee`` (scale 30, length 4) in the block's own coordinates:
#: the bar and the stem, which share an edge and do not overlap.
T_PARTS = (
    ((-60.0, 30.0), (60.0, 30.0), (60.0, 0.0), (-60.0, 0.0)),
    ((-15.0, 30.0), (-15.0, 120.0), (15.0, 120.0), (15.0, 30.0)),
)
#: ``segment``'s colour rules on float RGB in [0, 255]: the agent is RoyalBlue (b - r large),
#: the block LightSlateGray (bluish grey: b - r moderate, darker than the light background).
AGENT_BLUE_MINUS_RED = 90.0
BLOCK_BLUE_MINUS_RED = (15.0, 90.0)
BLOCK_MAX_RED = 200.0
#: Fewest pixels a segment needs at 64x64 (the agent covers ~20, the T ~90).
MIN_AGENT_PIXELS, MIN_BLOCK_PIXELS = 3, 10
POSE_SIZE = 3
POSITION_SIZE = 2


@dataclass(frozen=True)
class Segmentation:
    """Centres in arena pixels of the agent and the block found in a frame (None: not found)."""

    agent: NDArray[np.float64] | None
    block: NDArray[np.float64] | None


def segment(frame: NDArray[Any]) -> Segmentation:
    """Agent and block centres of an RGB frame ``(H, W, 3)`` (uint8, or float in [0, 1]) by
    colour (the constants above), scaled to the 512-pixel arena; a part with too few pixels
    (``MIN_*_PIXELS``, scaled with the frame's area) is None."""
    arr = np.asarray(frame)
    if arr.ndim != FRAME_NDIM or arr.shape[-1] != RGB_CHANNELS:
        raise ValueError(f"frame: expected (H, W, 3), got shape {arr.shape}")
    rgb = arr.astype(np.float64) * (1.0 if arr.dtype == np.uint8 else 255.0)
    r, b = rgb[..., 0], rgb[..., 2]
    blue = b - r
    agent = blue >= AGENT_BLUE_MINUS_RED
    low, high = BLOCK_BLUE_MINUS_RED
    block = (blue >= low) & (blue < high) & (r < BLOCK_MAX_RED)
    h, w = arr.shape[:2]
    area = h * w / FRAME_SIDE**2

    def centre(mask: NDArray[np.bool_], least: int) -> NDArray[np.float64] | None:
        if mask.sum() < max(1, round(least * area)):
            return None
        ys, xs = np.nonzero(mask)
        return np.array([(xs.mean() + 0.5) * ARENA / w, (ys.mean() + 0.5) * ARENA / h])

    return Segmentation(centre(agent, MIN_AGENT_PIXELS), centre(block, MIN_BLOCK_PIXELS))


def _t_local_centroid() -> tuple[float, float]:
    """The area centroid of ``T_PARTS`` in the block's coordinates (the parts are rectangles)."""
    areas, xs, ys = [], [], []
    for part in T_PARTS:
        pts = np.asarray(part)
        (x0, y0), (x1, y1) = pts.min(axis=0), pts.max(axis=0)
        areas.append((x1 - x0) * (y1 - y0))
        xs.append((x0 + x1) / 2.0)
        ys.append((y0 + y1) / 2.0)
    total = sum(areas)
    return (
        sum(a * x for a, x in zip(areas, xs, strict=True)) / total,
        sum(a * y for a, y in zip(areas, ys, strict=True)) / total,
    )


#: The T's area centroid in its own coordinates: (0, 40.71...).
T_CENTROID = _t_local_centroid()


def block_centre(pose: NDArray[Any]) -> FloatArray:
    """The area centroid in arena pixels of the T at ``pose`` ``(3,)`` or at each of ``(N, 3)``
    poses ``(x, y, angle)``: ``(2,)`` or ``(N, 2)``. ``ValueError`` for another shape or a
    non-finite pose."""
    arr = np.asarray(pose, dtype=np.float64)
    if arr.shape[-1:] != (POSE_SIZE,) or arr.ndim not in (1, 2) or not np.isfinite(arr).all():
        raise ValueError(
            f"pose: expected finite (x, y, angle) rows, shape (3,) or (N, 3), got {arr!r}"
        )
    lx, ly = T_CENTROID
    c, s = np.cos(arr[..., 2]), np.sin(arr[..., 2])
    return np.stack([arr[..., 0] + c * lx - s * ly, arr[..., 1] + s * lx + c * ly], axis=-1)


# --------------------------------------------------------------------------------------------
# The state check


@dataclass(frozen=True)
class StateCheckConfig:
    """How centre errors become a reward (module docstring).

    ``max_error_px``: the cap of each centre's error in arena pixels, and the error of a part
    missing from the prediction (> 0; default the arena diagonal). ``agent_weight``: the agent's
    share of a frame's error, in [0, 1]; the block has the rest.
    """

    max_error_px: float = ARENA_DIAGONAL
    agent_weight: float = 0.5

    def __post_init__(self) -> None:
        if not (math.isfinite(self.max_error_px) and self.max_error_px > 0.0):
            raise InvalidInput(
                f"max_error_px: must be a finite number > 0, got {self.max_error_px!r}"
            )
        if not (math.isfinite(self.agent_weight) and 0.0 <= self.agent_weight <= 1.0):
            raise InvalidInput(f"agent_weight: must lie in [0, 1], got {self.agent_weight!r}")


@dataclass(frozen=True)
class StateErrors:
    """Per-frame results of the state check, each ``(T,)``: the centre errors in arena pixels
    (capped; a missing part is the cap), which parts were missing, and the normalised error
    ``e_t`` in [0, 1]."""

    agent_px: FloatArray
    block_px: FloatArray
    agent_missing: NDArray[np.bool_]
    block_missing: NDArray[np.bool_]
    normalised: FloatArray


def _as_rgb_frames(pred: object) -> NDArray[Any]:
    """``pred`` as ``(T, H, W, 3)`` uint8 or float clamped to [0, 1]; else ``InvalidInput``."""
    if not isinstance(pred, np.ndarray):
        raise InvalidInput(f"prediction: expected a numpy array, got {type(pred).__name__}")
    frames = pred[None] if pred.ndim == FRAME_NDIM else pred
    if frames.ndim != FRAMES_NDIM or frames.shape[-1] != RGB_CHANNELS or frames.size == 0:
        raise InvalidInput(
            f"prediction: expected RGB frames (H, W, 3) or (T, H, W, 3), got shape {pred.shape}"
        )
    frames = check_pixel_dtype(frames, "prediction")
    return frames if frames.dtype == np.uint8 else np.clip(frames, 0.0, 1.0)


def check_states(
    agent_pos: object, block_pose: object, n_frames: int
) -> tuple[FloatArray, FloatArray]:
    """The true states of ``n_frames`` frames as float ``(T, 2)`` agent positions and ``(T, 3)``
    block poses; a single ``(2,)`` / ``(3,)`` stands for one frame. ``InvalidInput`` naming the
    argument for another shape, a count other than ``n_frames``, or a non-finite value."""
    out = []
    for name, value, size in (
        ("agent_pos", agent_pos, POSITION_SIZE),
        ("block_pose", block_pose, POSE_SIZE),
    ):
        arr = as_float_array(value, name)
        given = arr.shape
        arr = arr[None] if arr.ndim == 1 else arr
        if arr.ndim != MATRIX_NDIM or arr.shape != (n_frames, size):
            raise InvalidInput(
                f"{name}: expected shape ({n_frames}, {size}) for {n_frames} predicted frames, "
                f"got {given}"
            )
        require_finite(arr, name)
        out.append(arr)
    return out[0], out[1]


def _distance(found: FloatArray | None, truth: FloatArray, cap: float) -> tuple[float, bool]:
    if found is None:
        return cap, True
    return min(float(np.hypot(*(found - truth))), cap), False


def state_errors(
    pred: object, agent_pos: object, block_pose: object, config: StateCheckConfig
) -> StateErrors:
    """The per-frame errors of predicted frames against the true states (module docstring);
    ``InvalidInput`` for frames or states that cannot be compared."""
    frames = _as_rgb_frames(pred)
    agents, poses = check_states(agent_pos, block_pose, frames.shape[0])
    blocks = block_centre(poses)
    cap = config.max_error_px
    n = frames.shape[0]
    agent_px, block_px = np.empty(n), np.empty(n)
    agent_missing, block_missing = np.zeros(n, dtype=bool), np.zeros(n, dtype=bool)
    for t in range(n):
        seg = segment(frames[t])
        agent_px[t], agent_missing[t] = _distance(seg.agent, agents[t], cap)
        block_px[t], block_missing[t] = _distance(seg.block, blocks[t], cap)
    w = config.agent_weight
    normalised = (w * agent_px + (1.0 - w) * block_px) / cap
    return StateErrors(agent_px, block_px, agent_missing, block_missing, normalised)


def score_state(
    pred: object,
    agent_pos: object,
    block_pose: object,
    config: StateCheckConfig | None = None,
) -> RewardResult:
    """The state check's reward of predicted frames ``(T, H, W, 3)`` (or one ``(H, W, 3)``)
    against the simulator's agent positions ``(T, 2)`` and block poses ``(T, 3)`` of the same
    steps. Bad input gives status ``invalid_input`` with the reason.

    Metrics (means over frames): ``agent_error_px`` and ``block_error_px`` (arena pixels, capped,
    a missing part counted as the cap), ``state_missing`` (share of the 2T parts not found),
    ``state_error`` (the mean normalised error, ``-reward``) and ``n_frames``.
    """
    cfg = config or StateCheckConfig()
    try:
        err = state_errors(pred, agent_pos, block_pose, cfg)
    except InvalidInput as exc:
        return failed(Status.INVALID_INPUT, str(exc))
    missing = np.concatenate([err.agent_missing, err.block_missing])
    state_error = float(err.normalised.mean())
    metrics = {
        "agent_error_px": float(err.agent_px.mean()),
        "block_error_px": float(err.block_px.mean()),
        "state_missing": float(missing.mean()),
        "state_error": state_error,
        "n_frames": float(err.normalised.shape[0]),
    }
    return RewardResult(reward=-state_error, status=Status.OK, metrics=metrics)
