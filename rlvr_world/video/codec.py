"""Either video tokenizer behind what the multi-step layout needs of it.

The multi-step layout (``ctx [d1 a1] .. [dS aS]``, :mod:`rlvr_world.video.layout`) takes context
tokens and dynamics tokens. Two tokenizers provide them:

- the per-frame ``FrameTokenizer``: the context frame and every dynamics frame get the same
  ``P`` tokens of one codebook, and a frame decodes on its own (the context is not needed);
- the ``CompressiveTokenizer`` (``tokenizer.kind: compressive``): the context frame gets many
  tokens of the context codebook, every dynamics frame few tokens of the dynamics codebook,
  encoded and decoded *given* the context tokens.

``load_video_tokenizer`` reads either from a checkpoint folder (its ``config.json`` names the
kind); ``encode_clip_tokens`` and ``decode_future`` are the two operations, with the same
arrays for both kinds; ``dynamics_tokens_per_frame`` / ``codebook_sizes`` their sizes.
``per_frame`` narrows to the per-frame tokenizer for the single-step code, which has no context.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from rlvr_world.shapes import CLIPS_NDIM
from rlvr_world.video.compressive import (
    DYNAMICS_TOKENS_NDIM,
    MIN_CLIP_FRAMES,
    CompressiveTokenizer,
)
from rlvr_world.video.tokenizer import FrameTokenizer, checkpoint_kind

#: Either frozen video tokenizer.
VideoTokenizer = FrameTokenizer | CompressiveTokenizer


#: ``tokenizer.kind`` of the run config -> the checkpoint kind it loads.
KINDS = {"frame": FrameTokenizer.KIND, "compressive": CompressiveTokenizer.KIND}


def load_video_tokenizer(
    path: str | Path, device: str = "cpu", expect: str | None = None
) -> VideoTokenizer:
    """The tokenizer saved in ``path``, of the kind its ``config.json`` names; ``expect``
    (``frame`` or ``compressive``, the run's ``tokenizer.kind``): ``ValueError`` when the folder
    holds the other one."""
    kind = checkpoint_kind(path)
    if expect is not None and KINDS.get(expect) != kind:
        raise ValueError(
            f"tokenizer.path {path}: holds a {kind}, but tokenizer.kind is {expect} "
            f"({KINDS.get(expect, 'unknown')})"
        )
    if kind == CompressiveTokenizer.KIND:
        return CompressiveTokenizer.load(path, device=device)
    return FrameTokenizer.load(path, device=device)  # refuses any other kind, naming it


def per_frame(tokenizer: VideoTokenizer, what: str) -> FrameTokenizer:
    """``tokenizer`` when it is per-frame; ``ValueError`` naming ``what`` needs one otherwise."""
    if isinstance(tokenizer, CompressiveTokenizer):
        raise ValueError(
            f"{what}: needs the per-frame tokenizer; the compressive tokenizer "
            "(tokenizer.kind: compressive) serves the multi-step layout only"
        )
    return tokenizer


def dynamics_tokens_per_frame(tokenizer: VideoTokenizer) -> int:
    """Tokens of one predicted frame."""
    if isinstance(tokenizer, CompressiveTokenizer):
        return int(tokenizer.dynamics_tokens_per_frame)
    return int(tokenizer.tokens_per_frame)


def codebook_sizes(tokenizer: VideoTokenizer) -> tuple[int, int]:
    """``(dynamics, context)`` codebook sizes (equal for the per-frame tokenizer)."""
    if isinstance(tokenizer, CompressiveTokenizer):
        return int(tokenizer.dynamics_codebook_size), int(tokenizer.context_codebook_size)
    return int(tokenizer.codebook_size), int(tokenizer.codebook_size)


def encode_clip_tokens(
    tokenizer: VideoTokenizer, clips: NDArray[np.uint8], batch_size: int = 64
) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """``(context (N, Pc), dynamics (N, L - 1, Pd))`` of uint8 clips ``(N, L, H, W, 3)`` whose
    frame 0 is the context. The per-frame tokenizer encodes each distinct frame once."""
    if (
        not isinstance(clips, np.ndarray)
        or clips.ndim != CLIPS_NDIM
        or clips.shape[1] < MIN_CLIP_FRAMES
    ):
        shape = getattr(clips, "shape", type(clips).__name__)
        raise ValueError(f"clips: expected uint8 (N, L >= 2, H, W, 3), got {shape}")
    if isinstance(tokenizer, CompressiveTokenizer):
        return tokenizer.encode_clips(clips, batch_size=batch_size)
    from rlvr_world.video.train_mle import unique_encode

    n, length = clips.shape[:2]
    tokens = unique_encode(clips.reshape(n * length, *clips.shape[2:]), tokenizer, batch_size)
    tokens = np.asarray(tokens, dtype=np.int64).reshape(n, length, -1)
    return tokens[:, 0], tokens[:, 1:]


def decode_future(
    tokenizer: VideoTokenizer,
    context: NDArray[np.integer[Any]],
    dynamics: NDArray[np.integer[Any]],
    batch_size: int = 64,
) -> NDArray[np.float32]:
    """Frames float32 ``(N, T, H, W, 3)`` in [0, 1] of dynamics tokens ``(N, T, Pd)`` given each
    clip's context tokens ``(N, Pc)`` (which the per-frame tokenizer does not need)."""
    if isinstance(tokenizer, CompressiveTokenizer):
        return tokenizer.decode_future(np.asarray(context), np.asarray(dynamics), batch_size)
    dyn = np.asarray(dynamics)
    if dyn.ndim != DYNAMICS_TOKENS_NDIM:
        raise ValueError(f"dynamics: expected (N, T, P), got {dyn.shape}")
    n, t, p = dyn.shape
    frames = tokenizer.decode_tokens(dyn.reshape(n * t, p), batch_size=batch_size)
    return np.asarray(frames, dtype=np.float32).reshape(n, t, *frames.shape[1:])
