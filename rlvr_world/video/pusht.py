"""Record PushT trajectories with ``gym-pusht`` (pymunk physics, pygame drawing, headless).

Each recording has ``frames`` (T+1, 96, 96, 3) uint8 (frame 0 is the reset observation, frame t+1
the observation after ``actions[t]``), ``actions`` (T, 2) float32 target positions in [0, 512],
``agent_pos`` (T+1, 2), ``block_pose`` (T+1, 3) = (x, y, raw angle), ``reward`` (T,) float32 and
``success`` (T,) bool: the format of the shared PushT samples, so :func:`rlvr_world.video.data.
load_pusht` reads both. Episodes always run ``steps`` steps (success does not end them), so every
recording has the same length. Episode ``i`` of a call with ``seed`` resets the simulator with
``seed + i`` and drives its policy from ``numpy.random.default_rng([seed, i])``: deterministic.

The ``noisy-scripted`` policy pushes the T block over and over: it picks a push direction (towards
the goal pose half of the time, towards a random point inside the arena otherwise), walks round to
the side of the block opposite that direction, pushes through the block's centre of mass for a
random number of steps, then picks again; Gaussian noise is added to every action. ``random`` is
a random walk of the action target, for comparison. Neither tries to solve the task.

This module does no resizing or tokenization.
"""

from __future__ import annotations

import importlib
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import numpy.typing as npt

from rlvr_world.video.data import Episode

logger = logging.getLogger(__name__)

Vec = npt.NDArray[np.float64]
Action = npt.NDArray[np.float32]

if TYPE_CHECKING:
    import pymunk


class PushTEnv(Protocol):
    """What this project uses of ``gym_pusht.envs.pusht.PushTEnv`` (``obs_type="pixels"``),
    which is imported at run time (``make_env``) and ships no type information."""

    agent: pymunk.Body
    block: pymunk.Body
    space: pymunk.Space

    def reset(self, *, seed: int | None = None) -> tuple[npt.NDArray[np.uint8], dict[str, Any]]:
        """A new scene from ``seed``: the first frame (96, 96, 3) and an info dict."""
        ...

    def step(
        self, action: npt.NDArray[Any]
    ) -> tuple[npt.NDArray[np.uint8], float, bool, bool, dict[str, Any]]:
        """One control step: frame, reward, terminated, truncated, info (``is_success``)."""
        ...

    def get_obs(self) -> npt.NDArray[np.uint8]:
        """The current frame (96, 96, 3)."""
        ...

    def close(self) -> None:
        """Release pygame."""
        ...


POLICIES = ("noisy-scripted", "random")
ARENA = 512.0
GOAL = np.array([256.0, 256.0])
MAX_MOVE = 50.0  # largest step of the action target from the agent, in arena pixels
NOISE = 8.0
MAX_APPROACH = 25
# The scripted pusher's choices (``_ScriptedPusher``); distances in arena pixels.
#: Chance of turning the last push direction slightly rather than picking a new one.
KEEP_DIRECTION_P = 0.6
#: A turned push keeps the point 100 px ahead of the block at least this far from the walls.
WALL_MARGIN = 80.0
#: Chance of pushing towards the goal rather than towards a random point.
TOWARDS_GOAL_P = 0.5
#: A push target this close to the block is reached already: push in a random direction.
REACHED_RADIUS = 30.0
#: The agent is on the wrong side of the block (and goes round it) when it is within
#: ``NEAR_BLOCK`` of the block and less than ``BEHIND_DEPTH`` behind it along the push direction.
NEAR_BLOCK = 110.0
BEHIND_DEPTH = 40.0
#: Pushing starts once the agent is this close to the push position behind the block.
AT_PUSH_POSITION = 20.0


@dataclass(frozen=True)
class PushTRecording:
    """One recorded episode: T+1 frames (96, 96, 3), T actions, T+1 agent positions and block
    poses (at the start and after each step; arena pixels, radians), T rewards and successes."""

    frames: npt.NDArray[np.uint8]
    actions: npt.NDArray[np.float32]
    agent_pos: npt.NDArray[np.float64]
    block_pose: npt.NDArray[np.float64]
    reward: npt.NDArray[np.float32]
    success: npt.NDArray[np.bool_]
    seed: int

    def to_episode(self) -> Episode:
        """The frames and actions as a training ``Episode``, with its states (agent position and
        block pose of every frame)."""
        states = np.concatenate([self.agent_pos, self.block_pose], axis=1)
        return Episode(self.frames, self.actions, f"pusht-sim:seed{self.seed}", states)

    def save(self, path: str | Path) -> None:
        """Write every array field (all but ``seed``) to a compressed ``.npz`` at ``path``, under
        its field name."""
        arrays = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "seed"}
        np.savez_compressed(path, **arrays)


@dataclass
class _ScriptedPusher:
    """State machine: approach the far side of the block, push through it, pick a new direction."""

    rng: np.random.Generator
    towards_goal_p: float = TOWARDS_GOAL_P
    keep_direction_p: float = KEEP_DIRECTION_P
    direction: Vec = field(default_factory=lambda: np.zeros(2))
    pushing: int = 0  # steps of pushing left; 0 = approaching
    approaching: int = 0  # steps spent approaching the current push position

    def _new_direction(self, block: Vec) -> None:
        if self.direction.any() and self.rng.random() < self.keep_direction_p:
            # keep pushing roughly the same way (a short walk round), unless that hits a wall
            angle = np.arctan2(self.direction[1], self.direction[0]) + self.rng.normal(0.0, 0.7)
            turned = np.array([np.cos(angle), np.sin(angle)])
            ahead = block + turned * 100.0
            if ((ahead > WALL_MARGIN) & (ahead < ARENA - WALL_MARGIN)).all():
                self.direction = turned
                self.approaching = 0
                return
        if self.rng.random() < self.towards_goal_p:
            target = GOAL + self.rng.normal(0.0, 20.0, size=2)
        else:
            target = self.rng.uniform(110.0, ARENA - 110.0, size=2)
        delta = target - block
        if np.linalg.norm(delta) < REACHED_RADIUS:  # already there: push anywhere
            angle = self.rng.uniform(0, 2 * np.pi)
            delta = np.array([np.cos(angle), np.sin(angle)])
        self.direction = delta / np.linalg.norm(delta)
        self.approaching = 0

    def __call__(self, agent: Vec, block: Vec) -> Vec:
        if not self.direction.any():
            self._new_direction(block)
        if self.pushing > 0:
            self.pushing -= 1
            target = block + self.direction * 60.0
            if self.pushing == 0:
                self._new_direction(block)
        else:
            self.approaching += 1
            if self.approaching > MAX_APPROACH:  # stuck (e.g. against a wall): try another way
                self._new_direction(block)
            behind = np.clip(block - self.direction * 85.0, 10.0, ARENA - 10.0)
            rel = agent - block
            if np.dot(rel, self.direction) > -BEHIND_DEPTH and np.linalg.norm(rel) < NEAR_BLOCK:
                # on the wrong side: go round the block, not through it
                side = np.array([-self.direction[1], self.direction[0]])
                side = side if np.dot(rel, side) >= 0 else -side
                target = np.clip(block + side * 100.0 - self.direction * 40.0, 10.0, ARENA - 10.0)
            else:
                target = behind
            if np.linalg.norm(agent - behind) < AT_PUSH_POSITION:
                self.pushing = int(self.rng.integers(15, 40))
        return target


def _limit(agent: Vec, target: Vec) -> Vec:
    step = target - agent
    norm = float(np.linalg.norm(step))
    return agent + step * (MAX_MOVE / norm) if norm > MAX_MOVE else target


@dataclass
class _RandomWalk:
    """The action target drifts as a Gaussian random walk, whatever the block does."""

    rng: np.random.Generator
    position: Vec | None = None

    def __call__(self, agent: Vec, block: Vec) -> Vec:
        if self.position is None:
            self.position = self.rng.uniform(50.0, ARENA - 50.0, size=2)
        self.position = np.clip(self.position + self.rng.normal(0.0, 25.0, size=2), 0.0, ARENA)
        return self.position


def _make_policy(name: str, rng: np.random.Generator) -> Callable[[Vec, Vec], Action]:
    """``act(agent_position, block_centre) -> action`` with Gaussian noise, in [0, 512]."""
    return make_policy(name, rng)


def make_policy(
    name: str,
    rng: np.random.Generator,
    *,
    noise: float = NOISE,
    towards_goal_p: float = TOWARDS_GOAL_P,
    keep_direction_p: float = KEEP_DIRECTION_P,
) -> Callable[[Vec, Vec], Action]:
    """``act(agent_position, block_centre) -> action`` in [0, 512], with Gaussian ``noise``
    (pixels) on every action; ``towards_goal_p`` is the scripted pusher's chance of pushing
    towards ``GOAL`` when it picks a new direction, ``keep_direction_p`` its chance of only
    turning the last direction a little instead. The recorder uses the defaults."""
    if name not in POLICIES:
        raise ValueError(f"policy: expected one of {POLICIES}, got {name!r}")
    for pname, p in (("towards_goal_p", towards_goal_p), ("keep_direction_p", keep_direction_p)):
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"policy: {pname} must lie in [0, 1], got {p}")
    if noise < 0.0:
        raise ValueError(f"policy: noise must be >= 0, got {noise}")
    scripted = _ScriptedPusher(rng, towards_goal_p, keep_direction_p)
    walk = _RandomWalk(rng)

    def act(agent: Vec, block: Vec) -> Action:
        target = walk(agent, block) if name == "random" else _limit(agent, scripted(agent, block))
        noisy = target + rng.normal(0.0, noise, size=2)
        return np.clip(noisy, 0.0, ARENA).astype(np.float32)

    return act


def make_env() -> PushTEnv:
    """A pixel-observation PushT environment, rendered off-screen (no display needed);
    ``RuntimeError`` saying what to install when gym-pusht is missing."""
    os.environ.setdefault("SDL_VIDEODRIVER", "dummy")
    os.environ.setdefault("PYGAME_HIDE_SUPPORT_PROMPT", "1")
    try:
        module = importlib.import_module("gym_pusht.envs.pusht")
    except ImportError as exc:  # pragma: no cover - depends on the installed extras
        raise RuntimeError("gym-pusht is not installed: pip install 'rlvr-world[video]'") from exc
    env: PushTEnv = module.PushTEnv(obs_type="pixels", render_mode="rgb_array")
    return env


def block_com(env: PushTEnv) -> Vec:
    """The block's centre of gravity in arena pixels (x, y)."""
    body = env.block
    return np.array(body.local_to_world(body.center_of_gravity), dtype=np.float64)


def _record_one(env: PushTEnv, steps: int, seed: int, index: int, policy: str) -> PushTRecording:
    obs, _ = env.reset(seed=seed + index)
    act = _make_policy(policy, np.random.default_rng([seed, index]))
    frames = [obs]
    agent_pos = [np.array(env.agent.position)]
    block_pose = [np.array([*env.block.position, env.block.angle])]
    actions, rewards, success = [], [], []
    for _ in range(steps):
        action = act(np.array(env.agent.position), block_com(env))
        obs, reward, _, _, info = env.step(action)
        frames.append(obs)
        actions.append(action)
        rewards.append(reward)
        success.append(bool(info["is_success"]))
        agent_pos.append(np.array(env.agent.position))
        block_pose.append(np.array([*env.block.position, env.block.angle]))
    return PushTRecording(
        frames=np.stack(frames).astype(np.uint8),
        actions=np.stack(actions).astype(np.float32),
        agent_pos=np.stack(agent_pos).astype(np.float64),
        block_pose=np.stack(block_pose).astype(np.float64),
        reward=np.asarray(rewards, dtype=np.float32),
        success=np.asarray(success, dtype=bool),
        seed=seed + index,
    )


def generate_pusht(
    n_episodes: int, steps: int = 100, seed: int = 0, policy: str = "noisy-scripted"
) -> list[PushTRecording]:
    """Record ``n_episodes`` episodes of ``steps`` actions each, in memory."""
    if n_episodes < 1:
        raise ValueError(f"n_episodes: expected >= 1, got {n_episodes}")
    if steps < 1:
        raise ValueError(f"steps: expected >= 1, got {steps}")
    _make_policy(policy, np.random.default_rng(0))  # validate the name before starting pygame
    env = make_env()
    try:
        start = time.perf_counter()
        out = [_record_one(env, steps, seed, i, policy) for i in range(n_episodes)]
        elapsed = time.perf_counter() - start
    finally:
        env.close()
    logger.info(
        "recorded %d PushT episodes x %d steps in %.1f s (%.2f episodes/s)",
        n_episodes,
        steps,
        elapsed,
        n_episodes / max(elapsed, 1e-9),
    )
    return out


def record_pusht(
    n_episodes: int,
    steps: int,
    seed: int,
    out_dir: str | Path,
    policy: str = "noisy-scripted",
) -> list[Path]:
    """Record episodes and write them as ``out_dir/ep0000.npz``, ... (numbered from 0)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for i, rec in enumerate(generate_pusht(n_episodes, steps, seed, policy)):
        path = out / f"ep{i:04d}.npz"
        rec.save(path)
        paths.append(path)
    return paths


def block_motion(recording: PushTRecording, threshold: float = 0.5) -> float:
    """Fraction of steps in which the block's position moved more than ``threshold`` pixels."""
    moved = np.linalg.norm(np.diff(recording.block_pose[:, :2], axis=0), axis=1) > threshold
    return float(moved.mean())
