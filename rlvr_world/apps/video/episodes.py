"""Phase 1 of the video run: its episodes, and the clips cut from them.

``run_episodes(data, run_dir)`` records PushT episodes with ``gym-pusht`` into
``run_dir/data/pusht`` (reusing the files of an earlier run when there are as many as configured)
or reads the ``.npz`` episodes of ``data.dir``, and resizes every frame to ``data.image_size``.
With ``data.actions: agent_relative`` each PushT action becomes the move it asks for: the target
position minus the agent's position in the frame the action follows (both recorded), so the
model reads where the agent is told to go relative to where it is, not an arena coordinate it
would have to match against the pixels; ``action_ranges`` gives the quantiser's bounds either way.
With ``data.frame_skip: k`` one model step spans ``k`` recorded steps (``skip_steps``): every
``k``-th frame (and its simulator state), and as its action the last target of the span, the
place the agent was last told to go (agent_relative: minus its position at the span's start);
the intermediate targets are dropped, and a tail shorter than ``k`` steps is cut. PushT episodes
keep their simulator states (``Episode.states``) through all of it.
``split_data`` splits them by episode into train, validation and test (``data.seed`` alone),
``clip_pairs`` cuts episodes into ``(frames, actions)`` windows and ``spread`` picks a seeded
subset. The episode format, the split and the resizing themselves are ``rlvr_world.video.data``.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

import numpy as np
import numpy.typing as npt

from rlvr_world.apps.video.config import VideoData

if TYPE_CHECKING:
    from rlvr_world.video.data import ClipArrays, Episode

T = TypeVar("T")
#: PushT's action space: the target agent position, (x, y) in [0, 512].
PUSHT_ACTION_RANGES = np.array([[0.0, 512.0], [0.0, 512.0]])


def action_ranges(d: VideoData) -> npt.NDArray[np.float64] | None:
    """The quantiser's ``(D, 2)`` bounds for PushT actions, or None (other sources: data-wide)."""
    if d.source != "pusht":
        return None
    if d.actions == "agent_relative":
        return np.array([[-d.relative_range, d.relative_range]] * 2)
    return PUSHT_ACTION_RANGES


def agent_relative(episode: Episode, agent_pos: npt.NDArray[np.generic]) -> Episode:
    """``episode`` with each action minus the agent's position before it (module docstring)."""
    from rlvr_world.video.data import Episode

    pos = np.asarray(agent_pos, dtype=np.float64)
    if pos.shape != (episode.length + 1, episode.action_dims):
        raise ValueError(
            f"agent_pos: expected shape {(episode.length + 1, episode.action_dims)} for "
            f"{episode.source}, got {pos.shape}"
        )
    moves = (episode.actions.astype(np.float64) - pos[:-1]).astype(np.float32)
    return Episode(episode.frames, moves, episode.source, episode.states)


def skip_steps(
    episode: Episode, agent_pos: npt.NDArray[np.generic], k: int
) -> tuple[Episode, npt.NDArray[np.float64]]:
    """``(episode, agent_pos)`` with one step per ``k`` recorded ones (module docstring)."""
    from rlvr_world.video.data import Episode

    pos = np.asarray(agent_pos, dtype=np.float64)
    if pos.shape[0] != episode.length + 1:
        raise ValueError(
            f"agent_pos: expected {episode.length + 1} rows for {episode.source}, got {pos.shape}"
        )
    spans = episode.length // k if k >= 1 else 0
    if spans < 1:
        raise ValueError(
            f"data.frame_skip: {k} leaves no whole span in {episode.source} "
            f"({episode.length} steps)"
        )
    end = spans * k
    actions = np.ascontiguousarray(episode.actions[k - 1 : end : k])
    frames = np.ascontiguousarray(episode.frames[: end + 1 : k])
    states = None if episode.states is None else episode.states[: end + 1 : k]
    return Episode(frames, actions, episode.source, states), pos[: end + 1 : k]


def _agent_pos(path: str | Path) -> npt.NDArray[np.generic]:
    with np.load(path) as npz:
        if "agent_pos" not in npz.files:
            raise ValueError(
                f"{path}: data.actions agent_relative and data.frame_skip need the recorded "
                f"agent_pos, the file has {npz.files}"
            )
        return np.asarray(npz["agent_pos"])


def run_episodes(d: VideoData, run_dir: Path) -> list[Episode]:
    """The run's episodes, recorded or read, resized (module docstring)."""
    from rlvr_world.video.data import load_episodes, resize_episode

    if d.source == "pusht":
        from rlvr_world.video.pusht import record_pusht

        folder = run_dir / "data" / "pusht"
        existing = sorted(folder.glob("ep*.npz")) if folder.is_dir() else []
        paths = (
            existing
            if len(existing) == d.episodes
            else record_pusht(d.episodes, d.steps, d.seed, folder)
        )
        episodes = load_episodes(paths)
        if d.actions == "agent_relative" or d.frame_skip > 1:
            episodes = [_pusht_steps(d, e, p) for e, p in zip(episodes, paths, strict=True)]
    else:
        assert d.dir is not None
        episodes = load_episodes(d.dir)
    return [resize_episode(e, d.image_size) for e in episodes]


def _pusht_steps(d: VideoData, episode: Episode, path: str | Path) -> Episode:
    """A recorded PushT episode at ``data.frame_skip``, its actions as ``data.actions`` says."""
    pos = _agent_pos(path)
    if d.frame_skip > 1:
        episode, pos = skip_steps(episode, pos, d.frame_skip)
    return agent_relative(episode, pos) if d.actions == "agent_relative" else episode


def clip_pairs(episodes: Sequence[Episode], length: int) -> list[ClipArrays]:
    """Every ``(frames (length, H, W, 3), actions (length - 1, D))`` window of the episodes."""
    from rlvr_world.video.data import clips

    return [(c.frames, c.actions) for c in clips(episodes, length)]


def spread(items: Sequence[T], k: int, seed: int) -> list[T]:
    """``k`` items drawn without replacement by a seeded shuffle (all when fewer)."""
    order = list(range(len(items)))
    random.Random(seed).shuffle(order)
    return [items[i] for i in sorted(order[:k])]


def split_data(
    d: VideoData, episodes: Sequence[Episode]
) -> tuple[list[Episode], list[Episode], list[Episode]]:
    """``(train, validation, test)`` by episode, seeded by ``data.seed`` alone (validation empty
    unless ``data.validation``)."""
    from rlvr_world.video.data import split_episodes

    train, test = split_episodes(list(episodes), d.held_out, seed=d.seed)
    val: list[Episode] = []
    if d.validation:
        train, val = split_episodes(train, d.validation, seed=d.seed + 1)
    return train, val, test
