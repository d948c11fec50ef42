"""Phase 1 of the video run: its episodes, and the clips cut from them.

``run_episodes(data, run_dir)`` records PushT episodes with ``gym-pusht`` into
``run_dir/data/pusht`` (reusing the files of an earlier run when there are as many as configured)
or reads the ``.npz`` episodes of ``data.dir``, and resizes every frame to ``data.image_size``.
``clip_pairs`` cuts episodes into ``(frames, actions)`` windows and ``spread`` picks a seeded
subset. The episode format, the split and the resizing themselves are ``rlvr_world.video.data``.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

import numpy as np

from rlvr_world.apps.video.config import VideoData

if TYPE_CHECKING:
    from rlvr_world.video.data import ClipArrays, Episode

T = TypeVar("T")
#: PushT's action space: the target agent position, (x, y) in [0, 512].
PUSHT_ACTION_RANGES = np.array([[0.0, 512.0], [0.0, 512.0]])


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
    else:
        assert d.dir is not None
        episodes = load_episodes(d.dir)
    return [resize_episode(e, d.image_size) for e in episodes]


def clip_pairs(episodes: Sequence[Episode], length: int) -> list[ClipArrays]:
    """Every ``(frames (length, H, W, 3), actions (length - 1, D))`` window of the episodes."""
    from rlvr_world.video.data import clips

    return [(c.frames, c.actions) for c in clips(episodes, length)]


def spread(items: Sequence[T], k: int, seed: int) -> list[T]:
    """``k`` items drawn without replacement by a seeded shuffle (all when fewer)."""
    order = list(range(len(items)))
    random.Random(seed).shuffle(order)
    return [items[i] for i in sorted(order[:k])]
