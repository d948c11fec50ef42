"""One PushT MPC episode: start and goal states, plan, execute, replan, judge; faults counted.

* ``make_tasks``: DINO-WM-style offline goals. Scripted trajectories are recorded with
  ``rlvr_world.video.pusht`` (seed ``seed``, so held out from any training recording with another
  seed); task ``i`` takes the states ``goal_steps`` model steps (``goal_steps * frame_skip``
  simulator steps) apart starting at a step drawn from ``default_rng([seed, i])`` among those
  where the block moves at least ``min_move`` pixels, so standing still never reaches the goal.
  The goal frame is the goal state rendered.
* ``run_episode``: from the start state, ``replans`` times: plan a ``horizon``-step sequence with
  the planner's dynamics and the goal cost (``planner.goal_cost``), or draw one at random for the
  random planner, execute its first ``execute`` actions, warm-start the next plan from the rest.
  Success: the final block pose within ``position_tol`` pixels and ``angle_tol`` radians of the
  goal pose; coverage: ``sim.coverage`` of the final pose against the goal pose. Every action
  is one model step of the run's ``ActionSpace`` (``EpisodeSettings.space``: ``frame_skip``
  simulator steps towards a target or a move from the agent), for every planner alike.
* Faults end the episode with ``status = "fault"`` and the reason: the planner's world model is
  unavailable (``ModelUnavailable``), the simulator raised (``SimulatorError``), the goal is
  malformed (``MalformedGoal``: wrong frame shape or type, non-finite pose). The caller goes on.

What it does not do: no loading of models, no statistics, no files.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from rlvr_world.mpc.dynamics import Context, Dynamics, Frames, ModelUnavailable
from rlvr_world.mpc.planner import PlannerConfig, goal_cost, plan, random_sequence
from rlvr_world.mpc.sim import Frame, PushTSim, SimulatorError, check_pose, coverage, pose_error
from rlvr_world.mpc.space import ActionSpace

logger = logging.getLogger(__name__)


class MalformedGoal(ValueError):
    """A task whose goal frame or pose cannot be planned towards."""


@dataclass(frozen=True)
class Task:
    """One planning task: start agent (x, y) and block (x, y, angle), the goal block pose and
    the goal frame the planner's cost compares against (arena pixels, radians)."""

    index: int
    start_agent: NDArray[np.float64]
    start_block: NDArray[np.float64]
    goal_block: NDArray[np.float64]
    goal_frame: Frame


@dataclass(frozen=True)
class EpisodeSettings:
    """How an episode is planned and judged."""

    planner: PlannerConfig
    execute: int = 3
    replans: int = 2
    position_tol: float = 15.0
    angle_tol: float = 0.3
    seed: int = 0
    space: ActionSpace = field(default_factory=ActionSpace)


@dataclass
class EpisodeResult:
    """How one episode went: ``status`` ok or the reason it could not run, success, the goal
    coverage and pose errors at the end, each plan's seconds, the real and predicted frames."""

    task: int
    planner: str
    status: str = "ok"
    reason: str = ""
    success: bool = False
    coverage: float = 0.0
    position_error: float = float("nan")
    angle_error: float = float("nan")
    plan_seconds: list[float] = field(default_factory=list)
    #: Real frames after each executed action, and the frames the plan predicted for them.
    real: list[Frame] = field(default_factory=list)
    predicted: list[NDArray[np.float32]] = field(default_factory=list)

    def record(self) -> dict[str, Any]:
        """The JSON-able part (no frames)."""
        keys = ("task", "planner", "status", "reason", "success", "coverage")
        out: dict[str, Any] = {k: getattr(self, k) for k in keys}
        out["position_error"] = _finite_or_none(self.position_error)
        out["angle_error"] = _finite_or_none(self.angle_error)
        out["plan_seconds"] = self.plan_seconds
        return out


def _finite_or_none(value: float) -> float | None:
    return float(value) if np.isfinite(value) else None


def make_tasks(
    sim: PushTSim,
    n: int,
    *,
    goal_steps: int,
    min_move: float,
    record_steps: int,
    seed: int,
    frame_skip: int = 1,
) -> list[Task]:
    """``n`` start/goal pairs (module docstring); recordings without a usable window are
    skipped, ``RuntimeError`` when ``3 n`` recordings do not give ``n`` tasks."""
    from rlvr_world.video.pusht import generate_pusht

    span = goal_steps * frame_skip
    if goal_steps < 1 or frame_skip < 1 or span >= record_steps:
        raise ValueError(
            f"goal_steps: need 1 <= goal_steps and goal_steps x frame_skip ({goal_steps} x "
            f"{frame_skip}) < record_steps ({record_steps}) simulator steps"
        )
    tasks: list[Task] = []
    for rec in generate_pusht(3 * n, record_steps, seed):
        i = len(tasks)
        if i == n:
            break
        moved = np.linalg.norm(rec.block_pose[span:, :2] - rec.block_pose[:-span, :2], axis=1)
        starts = np.flatnonzero(moved >= min_move)
        if not starts.size:
            continue
        t0 = int(np.random.default_rng([seed, i]).choice(starts))
        goal = rec.block_pose[t0 + span]
        sim.set_pose(rec.agent_pos[t0 + span], goal)
        tasks.append(
            Task(i, rec.agent_pos[t0].copy(), rec.block_pose[t0].copy(), goal.copy(), sim.frame())
        )
    if len(tasks) < n:
        raise RuntimeError(f"make_tasks: {len(tasks)} of {n} tasks from {3 * n} recordings")
    return tasks


def check_goal(task: Task, side: int) -> None:
    """``MalformedGoal`` unless the goal frame is uint8 ``(side, side, 3)`` and the poses finite."""
    frame = task.goal_frame
    if (
        not isinstance(frame, np.ndarray)
        or frame.dtype != np.uint8
        or frame.shape != (side, side, 3)
    ):
        shape = getattr(frame, "shape", None)
        dtype = getattr(frame, "dtype", type(frame).__name__)
        raise MalformedGoal(f"goal frame: expected uint8 ({side}, {side}, 3), got {dtype} {shape}")
    try:
        check_pose(task.goal_block, "goal pose")
        check_pose(task.start_block, "start pose")
    except ValueError as exc:
        raise MalformedGoal(str(exc)) from exc


class _Scored:
    """The cost function of one planning call; keeps each batch's frames for the chosen one."""

    def __init__(self, dynamics: Dynamics, context: Context, goal: Frame) -> None:
        self.dynamics, self.context, self.goal = dynamics, context, goal
        self.batches: list[Frames] = []

    def __call__(self, actions: NDArray[np.float64]) -> NDArray[np.float64]:
        frames = self.dynamics.rollout(self.context, actions)
        self.batches.append(frames)
        return goal_cost(frames, self.goal)


def run_episode(
    task: Task,
    name: str,
    dynamics: Dynamics | ModelUnavailable | None,
    sim: PushTSim,
    s: EpisodeSettings,
) -> EpisodeResult:
    """One episode of planner ``name`` (``dynamics``: None for random actions, or the
    ``ModelUnavailable`` its loading raised) on ``task`` in ``sim`` (module docstring)."""
    result = EpisodeResult(task.index, name)
    try:
        if isinstance(dynamics, ModelUnavailable):
            raise dynamics
        check_goal(task, sim.side)
        _episode(task, dynamics, sim, s, result)
    except (ModelUnavailable, SimulatorError, MalformedGoal) as exc:
        kind = (
            "model_unavailable"
            if isinstance(exc, ModelUnavailable)
            else "simulator_error"
            if isinstance(exc, SimulatorError)
            else "malformed_goal"
        )
        result.status, result.reason = "fault", f"{kind}: {exc}"
        logger.warning("episode %d of %s: %s", task.index, name, result.reason)
        return result
    final = sim.block_pose()
    result.position_error, result.angle_error = pose_error(final, task.goal_block)
    result.success = result.position_error <= s.position_tol and result.angle_error <= s.angle_tol
    result.coverage = coverage(final, task.goal_block)
    return result


def _episode(
    task: Task, dynamics: Dynamics | None, sim: PushTSim, s: EpisodeSettings, out: EpisodeResult
) -> None:
    cfg, space = s.planner, s.space
    rng = np.random.default_rng([s.seed, task.index])
    sim.set_pose(task.start_agent, task.start_block)
    mean = space.start_mean(sim.agent_pos(), cfg.horizon)
    for _ in range(s.replans):
        context = Context(sim.frame(), sim.snapshot())
        t0 = time.perf_counter()
        predicted: Frames | None = None
        if dynamics is None:
            actions = random_sequence(mean, cfg, rng)
        else:
            scored = _Scored(dynamics, context, task.goal_frame)
            chosen = plan(scored, mean, cfg, rng)
            actions = chosen.actions
            predicted = scored.batches[chosen.iteration][chosen.index]
        out.plan_seconds.append(time.perf_counter() - t0)
        for t in range(min(s.execute, cfg.horizon)):
            space.execute(sim, actions[t])
            out.real.append(sim.frame())
            if predicted is not None:
                out.predicted.append(predicted[t])
        rest = actions[s.execute :]
        pad = np.tile(space.pad(sim.agent_pos()), (cfg.horizon - len(rest), 1))
        mean = np.concatenate([rest, pad]) if len(rest) else pad
