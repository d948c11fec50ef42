"""The action space the planners, the policies and the world models share in one MPC or policy
evaluation run: what one action is and how it drives the simulator.

A world model is trained on steps of the video run's ``data.frame_skip`` simulator steps, each
with the action of ``data.actions`` (``rlvr_world.apps.video.episodes``): ``absolute`` (the
target position in the arena) or ``agent_relative`` (the target minus the agent's position at
the step's start; the model's quantiser clips it to ``[-r, r]``). So one planner step is one
model step: ``frame_skip`` simulator steps towards one target. ``ActionSpace``:

* ``execute(sim, action)``: the target (``action``, or the agent's position now plus it) held for
  ``frame_skip`` simulator steps; the oracle and the executed plans step the simulator this way;
* ``start_mean`` / ``pad``: a plan's initial mean and the padding after a warm start (stay where
  the agent is: its position, or a zero move), and ``low`` / ``high``, the bounds planners clip
  samples to;
* ``model_action(target, agent)``: what a world model is given for a policy's target when the
  agent is at ``agent`` (policy evaluation).

``space_of`` reads a world model's ``video.json`` (``extra.actions``, ``extra.frame_skip``; a model
saved before ``frame_skip`` was recorded there is assumed to step once unless the config says
otherwise) and its quantiser's range.

What it does not do: no planning, no model loading.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import NDArray

from rlvr_world.video.pusht import ARENA

if TYPE_CHECKING:
    from rlvr_world.mpc.sim import PushTSim
    from rlvr_world.video.world_model import WorldModelSpec

ACTION_FORMS = ("absolute", "agent_relative")


@dataclass(frozen=True)
class ActionSpace:
    """``frame_skip`` simulator steps per action; ``relative``: an action is a move from the
    agent's position, within ``[-bound, bound]`` per axis (else a target in ``[0, 512]``)."""

    frame_skip: int = 1
    relative: bool = False
    bound: float = ARENA

    def __post_init__(self) -> None:
        if self.frame_skip < 1:
            raise ValueError(f"frame_skip: must be >= 1, got {self.frame_skip}")
        if not (np.isfinite(self.bound) and self.bound > 0):
            raise ValueError(f"bound: must be a finite number > 0, got {self.bound}")

    @property
    def low(self) -> float:
        """The lowest action per axis: ``-bound`` for moves, 0 for arena targets."""
        return -self.bound if self.relative else 0.0

    @property
    def high(self) -> float:
        """The highest action per axis: ``bound`` for moves, the arena's side for targets."""
        return self.bound if self.relative else ARENA

    def target(self, action: NDArray[Any], agent: NDArray[Any]) -> NDArray[np.float64]:
        """The arena target of ``action`` taken with the agent at ``agent``."""
        act = np.asarray(action, dtype=np.float64)
        return act + np.asarray(agent, dtype=np.float64) if self.relative else act

    def model_action(self, target: NDArray[Any], agent: NDArray[Any]) -> NDArray[np.float64]:
        """The action a world model is given for an arena ``target`` (``target``'s inverse),
        clipped to ``[low, high]`` as the model's quantiser clips it (so the simulator executes
        the same action)."""
        tgt = np.asarray(target, dtype=np.float64)
        action = tgt - np.asarray(agent, dtype=np.float64) if self.relative else tgt
        return np.clip(action, self.low, self.high)

    def execute(self, sim: PushTSim, action: NDArray[Any]) -> None:
        """One action: its target held for ``frame_skip`` simulator steps."""
        target = self.target(action, sim.agent_pos())
        for _ in range(self.frame_skip):
            sim.step(target)

    def start_mean(self, agent: NDArray[Any], horizon: int) -> NDArray[np.float64]:
        """A plan's initial mean ``(horizon, 2)``: stay where the agent is."""
        return np.tile(self.pad(agent), (horizon, 1))

    def pad(self, agent: NDArray[Any]) -> NDArray[np.float64]:
        """One "stay" action: the agent's position, or a zero move."""
        return np.zeros(2) if self.relative else np.asarray(agent, dtype=np.float64)[:2].copy()

    def to_dict(self) -> dict[str, Any]:
        """JSON-able: what the run's summary records."""
        form = "agent_relative" if self.relative else "absolute"
        return {"frame_skip": self.frame_skip, "actions": form, "low": self.low, "high": self.high}


def space_of(spec: WorldModelSpec, frame_skip: int | None = None) -> ActionSpace:
    """The action space of a world model's ``video.json`` (module docstring); ``frame_skip``
    overrides an unrecorded one and must agree with a recorded one (``ValueError`` naming
    both)."""
    form = spec.extra.get("actions", "absolute")
    if form not in ACTION_FORMS:
        raise ValueError(f"video.json: actions {form!r} is not one of {ACTION_FORMS}")
    recorded = spec.extra.get("frame_skip")
    if recorded is not None and frame_skip is not None and int(recorded) != frame_skip:
        raise ValueError(
            f"models.frame_skip {frame_skip}: the model's video.json says it was trained at "
            f"frame_skip {recorded}"
        )
    skip = int(recorded) if recorded is not None else (frame_skip or 1)
    if form == "absolute":
        return ActionSpace(frame_skip=skip)
    ranges = (spec.action_quantizer or {}).get("ranges")
    if not ranges:
        raise ValueError("video.json: agent_relative actions without the quantiser's ranges")
    return ActionSpace(frame_skip=skip, relative=True, bound=float(np.max(np.abs(ranges))))
