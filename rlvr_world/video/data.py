"""Episodes of frames and actions: loaders for the real samples, resizing, clips and splits.

An :class:`Episode` holds ``frames`` uint8 (T+1, H, W, 3) and ``actions`` float32 (T, D) with
``actions[t]`` the action that moves frame ``t`` to frame ``t + 1``, and, where the source knows
them, ``states`` float64 (T+1, 5): the simulator's state in each frame (PushT: agent x, y, block
x, y, angle; ``rlvr_world.rewards.video_action.STATE_FIELDS``), which the ``state`` reward and the
action-reading measures compare predicted frames with. Each loader converts its file's own
convention to that one:

* PushT (``frames``, ``actions``; also this project's recordings, :mod:`rlvr_world.video.pusht`):
  already in this convention; ``agent_pos`` (T+1, 2) and ``block_pose`` (T+1, 3), when the file
  has both, become ``states``. The other sources have no states.
* BAIR (``image`` (T, 64, 64, 3) int64, ``action`` (T, 4)): ``action[t]`` is taken at frame ``t``;
  the last action has no next frame and is dropped.
* MetaWorld (``observation`` (T, 9, 64, 64) uint8 = 3 stacked RGB frames, ``action`` (T, 4)):
  dreamer-style storage, ``action[t]`` is the action that *led to* observation ``t`` and
  ``action[0]`` is a dummy zero. The frame is the last 3 channels; ``actions = action[1:]``.
* RT-1 (``image`` only): no actions, so ``D = 0``.

This module does no tokenization and no augmentation.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt
from PIL import Image

from rlvr_world.rewards.video_action import STATE_SIZE
from rlvr_world.shapes import FRAMES_NDIM, MATRIX_NDIM, RGB_CHANNELS

logger = logging.getLogger(__name__)

Frames = npt.NDArray[np.uint8]
Actions = npt.NDArray[np.float32]
States = npt.NDArray[np.float64]
#: Fewest frames of an episode or a clip: one transition, a frame and the next.
MIN_FRAMES = 2
#: Largest pixel value (uint8).
PIXEL_MAX = int(np.iinfo(np.uint8).max)
#: Channels of a MetaWorld observation: 3 stacked RGB frames, the current one last.
METAWORLD_CHANNELS = 3 * RGB_CHANNELS


@dataclass(frozen=True)
class Episode:
    """``frames`` uint8 (T+1, H, W, 3); ``actions`` float32 (T, D); ``source`` names the origin;
    ``states`` float64 (T+1, 5), the simulator's state in each frame, or None (module docstring)."""

    frames: Frames
    actions: Actions
    source: str
    states: States | None = None

    def __post_init__(self) -> None:
        check_frames("frames", self.frames)
        a = self.actions
        if not isinstance(a, np.ndarray) or a.dtype != np.float32 or a.ndim != MATRIX_NDIM:
            raise ValueError(
                f"actions: expected a float32 (T, D) array, got "
                f"{getattr(a, 'dtype', type(a))} {getattr(a, 'shape', '')}"
            )
        if a.shape[0] != self.frames.shape[0] - 1:
            raise ValueError(
                f"actions: expected {self.frames.shape[0] - 1} rows for "
                f"{self.frames.shape[0]} frames, got {a.shape[0]} ({self.source})"
            )
        if not np.isfinite(a).all():
            raise ValueError(f"actions: contains NaN or inf ({self.source})")
        if self.states is not None:
            object.__setattr__(
                self, "states", check_states(self.states, self.frames.shape[0], self.source)
            )

    @property
    def length(self) -> int:
        """Number of transitions T."""
        return int(self.actions.shape[0])

    @property
    def action_dims(self) -> int:
        """Action dimensions D."""
        return int(self.actions.shape[1])


@dataclass(frozen=True)
class Clip:
    """Frames (L, H, W, 3) uint8 and actions (L-1, D) float32 cut from ``episode`` at ``start``;
    ``states`` (L, 5) of those frames where the episode has them."""

    frames: Frames
    actions: Actions
    episode: int
    start: int
    states: States | None = None


#: A clip as its ``(frames, actions)`` arrays, the form the run code cuts and passes around.
ClipArrays = tuple[Frames, Actions]
#: What the encoders and evaluations take: a :class:`Clip` or its ``(frames, actions)`` arrays.
ClipLike = Clip | ClipArrays


def check_uint8_array(name: str, frames: object) -> Frames:
    """``frames`` as a uint8 numpy array; ``ValueError`` naming ``name`` otherwise.

    The shape is the caller's to check (:func:`check_frames` here; the tokenizer's
    ``check_frame_array`` also wants the configured frame size).
    """
    if not isinstance(frames, np.ndarray):
        raise ValueError(f"{name}: expected a numpy array, got {type(frames).__name__}")
    if frames.dtype != np.uint8:
        raise ValueError(f"{name}: expected dtype uint8 (0..255), got {frames.dtype}")
    return frames


def check_frames(name: str, frames: object) -> None:
    """Raise ValueError unless ``frames`` is a uint8 (N, H, W, 3) array with N >= 2."""
    frames = check_uint8_array(name, frames)
    if (
        frames.ndim != FRAMES_NDIM
        or frames.shape[-1] != RGB_CHANNELS
        or frames.shape[0] < MIN_FRAMES
    ):
        raise ValueError(f"{name}: expected shape (N>=2, H, W, 3), got {frames.shape}")


def check_states(states: object, frames: int, source: str) -> States:
    """``states`` as finite float64 ``(frames, 5)``; ``ValueError`` naming the source otherwise."""
    arr = np.asarray(states, dtype=np.float64)
    if arr.shape != (frames, STATE_SIZE):
        raise ValueError(
            f"states: expected shape ({frames}, {STATE_SIZE}), one simulator state per frame, "
            f"got {arr.shape} ({source})"
        )
    if not np.isfinite(arr).all():
        raise ValueError(f"states: contains NaN or inf ({source})")
    return arr


def _to_uint8(name: str, arr: npt.NDArray[np.generic]) -> Frames:
    if arr.dtype == np.uint8:
        return arr.astype(np.uint8, copy=False)
    if arr.dtype.kind not in "iu":
        raise ValueError(f"{name}: expected integer pixels, got dtype {arr.dtype}")
    if arr.size and (int(arr.min()) < 0 or int(arr.max()) > PIXEL_MAX):
        raise ValueError(f"{name}: pixel values outside [0, 255]: {arr.min()}..{arr.max()}")
    return arr.astype(np.uint8)


def _actions(name: str, arr: npt.NDArray[np.generic]) -> Actions:
    if arr.dtype.kind not in "fiu" or arr.ndim != MATRIX_NDIM:
        raise ValueError(f"{name}: expected a numeric (T, D) array, got {arr.dtype} {arr.shape}")
    out = arr.astype(np.float32)
    if not np.isfinite(out).all():
        raise ValueError(f"{name}: contains NaN or inf")
    return out


def _read(path: str | Path, keys: Sequence[str]) -> dict[str, npt.NDArray[np.generic]]:
    with np.load(path, allow_pickle=False) as npz:
        missing = [k for k in keys if k not in npz.files]
        if missing:
            raise ValueError(f"{path}: missing arrays {missing} (has {npz.files})")
        return {k: npz[k] for k in keys}


def load_pusht(path: str | Path) -> Episode:
    """A PushT episode: ``frames`` (T+1, 96, 96, 3) uint8 and ``actions`` (T, 2) in [0, 512];
    ``states`` from ``agent_pos`` and ``block_pose`` when the file has both (``ValueError`` when
    their shapes do not fit the frames)."""
    d = _read(path, ("frames", "actions"))
    frames = _to_uint8("frames", d["frames"])
    name = f"pusht:{Path(path).name}"
    with np.load(path, allow_pickle=False) as npz:
        have = {"agent_pos", "block_pose"} <= set(npz.files)
        parts = (np.asarray(npz["agent_pos"]), np.asarray(npz["block_pose"])) if have else None
    states = None
    if parts is not None:
        agent, block = parts
        if agent.ndim != MATRIX_NDIM or block.ndim != MATRIX_NDIM or len(agent) != len(block):
            raise ValueError(
                f"{path}: agent_pos {agent.shape} and block_pose {block.shape} must be (T+1, 2) "
                "and (T+1, 3), one row per frame"
            )
        states = check_states(np.concatenate([agent, block], axis=1), frames.shape[0], name)
    return Episode(frames, _actions("actions", d["actions"]), name, states)


def load_bair(path: str | Path) -> Episode:
    """The BAIR sample: ``image`` (T, H, W, 3); ``action[t]`` taken at frame t, last one dropped."""
    d = _read(path, ("image", "action"))
    frames = _to_uint8("image", d["image"])
    actions = _actions("action", d["action"])
    if actions.shape[0] != frames.shape[0]:
        raise ValueError(
            f"action: expected one row per frame ({frames.shape[0]}), got {actions.shape[0]}"
        )
    return Episode(frames, actions[:-1], f"bair:{Path(path).name}")


def load_metaworld(path: str | Path) -> Episode:
    """A MetaWorld episode; frame = last 3 of 9 stacked channels, ``actions = action[1:]``."""
    d = _read(path, ("observation", "action"))
    obs = _to_uint8("observation", d["observation"])
    if obs.ndim != FRAMES_NDIM or obs.shape[1] != METAWORLD_CHANNELS:
        raise ValueError(f"observation: expected shape (T, 9, H, W), got {obs.shape}")
    frames = np.ascontiguousarray(obs[:, 6:9].transpose(0, 2, 3, 1))
    actions = _actions("action", d["action"])
    if actions.shape[0] != frames.shape[0]:
        raise ValueError(
            f"action: expected one row per observation ({frames.shape[0]}), "
            f"row 0 being the dummy; got {actions.shape[0]}"
        )
    task = Path(path).parent.name
    return Episode(frames, actions[1:], f"metaworld:{task}/{Path(path).name}")


def load_rt1(path: str | Path) -> Episode:
    """The RT-1 sample: ``image`` (T, 256, 320, 3), no actions (D = 0)."""
    d = _read(path, ("image",))
    frames = _to_uint8("image", d["image"])
    check_frames("image", frames)
    actions = np.zeros((frames.shape[0] - 1, 0), dtype=np.float32)
    return Episode(frames, actions, f"rt1:{Path(path).name}")


def load_npz(path: str | Path) -> Episode:
    """Pick the loader from the arrays the file holds."""
    with np.load(path, allow_pickle=False) as npz:
        keys = set(npz.files)
    if {"frames", "actions"} <= keys:
        return load_pusht(path)
    if {"observation", "action"} <= keys:
        return load_metaworld(path)
    if {"image", "action"} <= keys:
        return load_bair(path)
    if "image" in keys:
        return load_rt1(path)
    raise ValueError(f"{path}: unknown episode format (arrays {sorted(keys)})")


def load_episodes(paths: str | Path | Iterable[str | Path]) -> list[Episode]:
    """Episodes from a folder (every ``*.npz`` below it, sorted) or from a list of files."""
    if isinstance(paths, str | Path):
        root = Path(paths)
        if not root.exists():
            raise ValueError(f"paths: {root} does not exist")
        files = sorted(root.rglob("*.npz")) if root.is_dir() else [root]
    else:
        files = [Path(p) for p in paths]
    if not files:
        raise ValueError(f"paths: no .npz episodes found in {paths}")
    episodes = [load_npz(f) for f in files]
    logger.info(
        "loaded %d episodes (%d transitions)", len(episodes), sum(e.length for e in episodes)
    )
    return episodes


def resize_frames(frames: Frames, size: int | tuple[int, int]) -> Frames:
    """Antialiased (PIL bicubic) resize of uint8 (N, H, W, 3) frames to ``size`` or ``(h, w)``."""
    if not isinstance(frames, np.ndarray) or frames.dtype != np.uint8:
        raise ValueError(f"frames: expected a uint8 array, got {getattr(frames, 'dtype', frames)}")
    if frames.ndim != FRAMES_NDIM or frames.shape[-1] != RGB_CHANNELS:
        raise ValueError(f"frames: expected shape (N, H, W, 3), got {frames.shape}")
    height, width = (size, size) if isinstance(size, int) else size
    if not (isinstance(height, int) and isinstance(width, int)) or height < 1 or width < 1:
        raise ValueError(f"size: expected positive sizes, got {size}")
    if frames.shape[1:3] == (height, width):
        return frames
    out = np.empty((frames.shape[0], height, width, 3), dtype=np.uint8)
    for i, frame in enumerate(frames):
        img = Image.fromarray(frame).resize((width, height), Image.Resampling.BICUBIC)
        out[i] = np.asarray(img)
    return out


def resize_episode(episode: Episode, size: int | tuple[int, int]) -> Episode:
    """``episode`` with its frames resized to ``size`` (``resize_frames``), actions and states
    kept."""
    frames = resize_frames(episode.frames, size)
    return Episode(frames, episode.actions, episode.source, episode.states)


def clips(episodes: Sequence[Episode], length: int, stride: int = 1) -> Iterator[Clip]:
    """Every window of ``length`` frames (and the ``length - 1`` actions between them)."""
    if length < MIN_FRAMES:
        raise ValueError(f"length: a clip needs at least 2 frames, got {length}")
    if stride < 1:
        raise ValueError(f"stride: expected >= 1, got {stride}")
    for index, ep in enumerate(episodes):
        for start in range(0, ep.frames.shape[0] - length + 1, stride):
            yield Clip(
                ep.frames[start : start + length],
                ep.actions[start : start + length - 1],
                index,
                start,
                None if ep.states is None else ep.states[start : start + length],
            )


def stack_clips(items: Iterable[Clip]) -> tuple[Frames, Actions]:
    """Stack clips into ``(N, L, H, W, 3)`` frames and ``(N, L-1, D)`` actions."""
    batch = list(items)
    if not batch:
        raise ValueError("clips: nothing to stack (episodes shorter than the clip length?)")
    shapes = {(c.frames.shape, c.actions.shape) for c in batch}
    if len(shapes) != 1:
        raise ValueError(f"clips: differing shapes cannot be stacked: {sorted(shapes)}")
    return np.stack([c.frames for c in batch]), np.stack([c.actions for c in batch])


#: Fewest episodes ``split_episodes`` splits: one on each side.
MIN_SPLIT_EPISODES = 2


def split_episodes(
    episodes: Sequence[Episode], held_out: float | int, seed: int = 0
) -> tuple[list[Episode], list[Episode]]:
    """Split by episode (never inside one): a seeded shuffle, then ``held_out`` episodes out.

    ``held_out`` is a count (int) or a fraction in (0, 1) rounded to at least one episode.
    """
    n = len(episodes)
    if n < MIN_SPLIT_EPISODES:
        raise ValueError(f"episodes: need at least 2 to split, got {n}")
    if isinstance(held_out, bool):
        raise ValueError("held_out: expected an int count or a float fraction")
    if isinstance(held_out, int):
        k = held_out
    elif 0.0 < held_out < 1.0:
        k = max(1, round(n * held_out))
    else:
        raise ValueError(f"held_out: a fraction must lie in (0, 1), got {held_out}")
    if not 1 <= k < n:
        raise ValueError(f"held_out: {k} of {n} episodes leaves an empty side")
    order = np.random.default_rng(seed).permutation(n)
    held = sorted(order[:k].tolist())
    train = sorted(order[k:].tolist())
    return [episodes[i] for i in train], [episodes[i] for i in held]


def all_actions(episodes: Iterable[Episode]) -> Actions:
    """Concatenated (N, D) actions, e.g. for :meth:`ActionQuantizer.from_actions`."""
    eps = list(episodes)
    dims = {e.action_dims for e in eps}
    if len(dims) != 1:
        raise ValueError(f"episodes: differing action dimensions {sorted(dims)}")
    return np.concatenate([e.actions for e in eps], axis=0)
