"""Visual tokens to frames with a frozen video tokenizer; the checks the decoder server applies.

``FrameDecoder(path)`` loads a ``rlvr_world.video.tokenizer.FrameTokenizer`` checkpoint directory
(frozen, eval mode, one torch thread unless told otherwise) and decodes requests of ``num_frames``
frames, each ``tokens_per_frame`` ids in ``[0, codebook_size)``, in micro-batches of ``batch``
frames. Refused with the field named (``InvalidDecodeRequest``): a count that is not
``num_frames * tokens_per_frame``, ``num_frames`` below 1 or over ``max_frames``, an id outside the
codebook (the first one, with its index), and ``context_token_ids`` for a per-frame tokenizer
(only the compressive tokenizer takes context tokens). Output: ``(T, H, W, 3)`` float32 in [0, 1].
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from services.decoder.text import InvalidDecodeRequest

log = logging.getLogger(__name__)


class FrameDecoder:
    """A frozen frame tokenizer that decodes validated visual-token requests."""

    def __init__(self, path: str, batch: int = 64, max_frames: int = 4096) -> None:
        from rlvr_world.video.tokenizer import FrameTokenizer

        folder = Path(path)
        if not folder.is_dir():
            raise FileNotFoundError(f"video tokenizer directory {path!r} does not exist")
        self.name = path
        self.tokenizer = FrameTokenizer.load(folder)
        self.tokenizer.eval()
        self.tokenizer.requires_grad_(False)
        self.batch = batch
        self.max_frames = max_frames
        self.codebook_size = int(self.tokenizer.codebook_size)
        self.tokens_per_frame = int(self.tokenizer.tokens_per_frame)
        self.frame_shape = tuple(int(d) for d in self.tokenizer.frame_shape)
        # One decode at a time: torch modules are not re-entrant across executor threads.
        self._lock = threading.Lock()

    def check(
        self, token_ids: Sequence[int], num_frames: int, context_token_ids: Sequence[int] = ()
    ) -> np.ndarray:
        """The ids as an ``(num_frames, tokens_per_frame)`` int64 array, or a named refusal."""
        if len(context_token_ids) > 0:
            raise InvalidDecodeRequest(
                f"context_token_ids: {len(context_token_ids)} given, but the loaded tokenizer is "
                "per-frame and takes none (only the compressive tokenizer uses context tokens)"
            )
        if not 1 <= num_frames <= self.max_frames:
            raise InvalidDecodeRequest(
                f"num_frames = {num_frames}: must be between 1 and {self.max_frames}"
            )
        expected = num_frames * self.tokens_per_frame
        if len(token_ids) != expected:
            raise InvalidDecodeRequest(
                f"token_ids: {len(token_ids)} ids for num_frames {num_frames}; expected "
                f"{num_frames} x {self.tokens_per_frame} tokens per frame = {expected}"
            )
        ids = np.asarray(token_ids, dtype=np.int64)
        bad = np.flatnonzero((ids < 0) | (ids >= self.codebook_size))
        if bad.size:
            first = int(bad[0])
            raise InvalidDecodeRequest(
                f"token_ids[{first}] = {int(ids[first])} is outside the visual codebook "
                f"[0, {self.codebook_size})"
            )
        return ids.reshape(num_frames, self.tokens_per_frame)

    def decode(
        self, token_ids: Sequence[int], num_frames: int, context_token_ids: Sequence[int] = ()
    ) -> np.ndarray:
        """Frames ``(num_frames, H, W, 3)`` float32 in [0, 1]."""
        ids = self.check(token_ids, num_frames, context_token_ids)
        with self._lock:
            frames = self.tokenizer.decode_tokens(ids, batch_size=self.batch)
        return np.ascontiguousarray(frames, dtype=np.float32)
