"""The PushT simulator as the planners and the policy evaluation use it, and the block rules.

* ``PushTSim``: one ``gym-pusht`` environment with ``snapshot`` / ``restore`` of the physical
  state (positions, angle and velocities of agent and block; pymunk's cached contact impulses
  are not part of it, so a replay from a snapshot taken in contact differs by ~1e-2 px),
  ``set_pose`` (velocities zero), ``step`` and ``frame`` (the 96x96 observation resized to the
  world models' side, as the video pipeline resizes its episodes). Any exception raised inside
  the environment comes out as ``SimulatorError`` with the original message, so a run can count
  it and go on.
* Pure rules on poses ``(x, y, angle)`` (``block.position`` and ``block.angle`` of gym-pusht):
  ``block_polygon`` (the T of ``PushTEnv.add_tee``, as shapely), ``coverage`` (overlap of two
  poses' T's over the T's area), ``pose_error`` (position distance, wrapped angle difference),
  ``block_centroid`` (the T's area centroid).
* ``segment`` and ``Segmentation`` (agent and block centres read from a frame by colour) live in
  the pure ``rlvr_world.rewards.pusht_state``, with the T's shape and the state check; they are
  imported here for the planners and the policy evaluation.

What it does not do: no planning, no world model, no drawing beyond the environment's own.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np
from numpy.typing import NDArray

from rlvr_world.rewards.pusht_state import (
    FRAME_SIDE,
    POSE_SIZE,
    T_PARTS,
    Segmentation,
    block_centre,
    segment,
)
from rlvr_world.video.data import resize_frames
from rlvr_world.video.pusht import ARENA, make_env

if TYPE_CHECKING:
    from shapely.geometry.base import BaseGeometry

T = TypeVar("T")

logger = logging.getLogger(__name__)

__all__ = [
    "FRAME_SIDE",
    "Frame",
    "Pose",
    "PushTSim",
    "Segmentation",
    "SimState",
    "SimulatorError",
    "block_centroid",
    "block_polygon",
    "check_pose",
    "coverage",
    "pose_error",
    "segment",
]

Pose = NDArray[np.float64]
Frame = NDArray[np.uint8]


class SimulatorError(RuntimeError):
    """An exception inside the PushT environment (the message names the call and the cause)."""


@dataclass(frozen=True)
class SimState:
    """The full physical state of a PushT scene."""

    agent_pos: tuple[float, float]
    agent_vel: tuple[float, float]
    block_pose: tuple[float, float, float]
    block_vel: tuple[float, float]
    block_angular_vel: float


class PushTSim:
    """One ``gym-pusht`` environment (module docstring)."""

    def __init__(self, side: int = FRAME_SIDE) -> None:
        self.side = side
        self.env = make_env()
        self.env.reset(seed=0)

    def close(self) -> None:
        """Close the environment (pygame); the simulator is unusable after."""
        self.env.close()

    def __enter__(self) -> PushTSim:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def _guard(self, what: str, fn: Callable[..., T], *args: Any) -> T:
        try:
            return fn(*args)
        except SimulatorError:
            raise
        except Exception as exc:
            raise SimulatorError(f"{what}: {type(exc).__name__}: {exc}") from exc

    def reset(self, seed: int) -> None:
        """The scene ``seed`` draws (agent and block placed by gym-pusht's reset)."""
        self._guard("reset", lambda: self.env.reset(seed=seed))

    def snapshot(self) -> SimState:
        """The full physical state now, for ``restore``."""
        agent, block = self.env.agent, self.env.block
        return SimState(
            agent_pos=(float(agent.position[0]), float(agent.position[1])),
            agent_vel=(float(agent.velocity[0]), float(agent.velocity[1])),
            block_pose=(float(block.position[0]), float(block.position[1]), float(block.angle)),
            block_vel=(float(block.velocity[0]), float(block.velocity[1])),
            block_angular_vel=float(block.angular_velocity),
        )

    def restore(self, state: SimState) -> None:
        """Put the scene exactly in ``state`` (angle before position, so the position holds)."""

        def apply() -> None:
            agent, block = self.env.agent, self.env.block
            agent.position = state.agent_pos
            agent.velocity = state.agent_vel
            block.angle = state.block_pose[2]
            block.position = state.block_pose[:2]
            block.velocity = state.block_vel
            block.angular_velocity = state.block_angular_vel
            self.env.space.reindex_shapes_for_body(agent)
            self.env.space.reindex_shapes_for_body(block)

        self._guard("restore", apply)

    def set_pose(self, agent_pos: NDArray[Any], block_pose: NDArray[Any]) -> None:
        """Agent at ``agent_pos``, block at ``block_pose``, nothing moving."""
        pose = check_pose(block_pose, "block_pose")
        self.restore(
            SimState(
                agent_pos=(float(agent_pos[0]), float(agent_pos[1])),
                agent_vel=(0.0, 0.0),
                block_pose=(float(pose[0]), float(pose[1]), float(pose[2])),
                block_vel=(0.0, 0.0),
                block_angular_vel=0.0,
            )
        )

    def step(self, action: NDArray[Any]) -> None:
        """One control step towards the absolute target ``action`` (x, y) in [0, 512]."""
        target = np.asarray(action, dtype=np.float64)
        if target.shape != (2,) or not np.isfinite(target).all():
            raise SimulatorError(f"step: action must be 2 finite numbers, got {target!r}")
        self._guard("step", self.env.step, np.clip(target, 0.0, ARENA))

    def frame(self) -> Frame:
        """The current observation resized to ``side`` x ``side`` (uint8 RGB)."""
        obs = self._guard("render", self.env.get_obs)
        out: Frame = resize_frames(np.asarray(obs, dtype=np.uint8)[None], self.side)[0]
        return out

    def block_pose(self) -> Pose:
        """The block's (x, y, angle): arena pixels and radians."""
        block = self.env.block
        return np.array([block.position[0], block.position[1], block.angle], dtype=np.float64)

    def agent_pos(self) -> NDArray[np.float64]:
        """The agent's (x, y) in arena pixels."""
        return np.array(self.env.agent.position, dtype=np.float64)


# --------------------------------------------------------------------------------------------
# Pure rules


def check_pose(pose: NDArray[Any] | list[float] | tuple[float, ...], name: str) -> Pose:
    """``pose`` as a finite float ``(3,)`` array; ``ValueError`` naming ``name`` otherwise."""
    arr = np.asarray(pose, dtype=np.float64)
    if arr.shape != (POSE_SIZE,) or not np.isfinite(arr).all():
        raise ValueError(f"{name}: expected 3 finite numbers (x, y, angle), got {pose!r}")
    return arr


def block_polygon(pose: NDArray[Any]) -> BaseGeometry:
    """The T at ``pose`` as a shapely polygon in arena pixels (shapely is untyped: Any to mypy)."""
    from shapely.geometry import Polygon
    from shapely.ops import unary_union

    x, y, angle = check_pose(pose, "pose")
    c, s = np.cos(angle), np.sin(angle)
    parts = []
    for part in T_PARTS:
        local = np.asarray(part)
        world = np.stack(
            [x + c * local[:, 0] - s * local[:, 1], y + s * local[:, 0] + c * local[:, 1]]
        )
        parts.append(Polygon(world.T))
    return unary_union(parts)


def coverage(pose: NDArray[Any], goal: NDArray[Any]) -> float:
    """Area of the T at ``pose`` that overlaps the T at ``goal``, over the T's area."""
    block, target = block_polygon(pose), block_polygon(goal)
    return float(block.intersection(target).area / target.area)


def pose_error(pose: NDArray[Any], goal: NDArray[Any]) -> tuple[float, float]:
    """(distance of the positions in pixels, |angle difference| wrapped to [0, pi])."""
    a, b = check_pose(pose, "pose"), check_pose(goal, "goal")
    dist = float(np.hypot(*(a[:2] - b[:2])))
    turn = float(abs((a[2] - b[2] + np.pi) % (2 * np.pi) - np.pi))
    return dist, turn


def block_centroid(pose: NDArray[Any]) -> NDArray[np.float64]:
    """The area centroid of the T at ``pose`` (what ``segment`` estimates from pixels)."""
    return block_centre(check_pose(pose, "pose"))
