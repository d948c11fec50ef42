"""Visual tokens to frames with a frozen video tokenizer; the checks the decoder server applies.

``FrameDecoder(path)`` loads the tokenizer checkpoint directory (frozen, eval mode) of either kind
its ``config.json`` names:

- a per-frame ``FrameTokenizer``: a request holds ``num_frames`` frames of ``tokens_per_frame`` ids
  in ``[0, codebook_size)`` and no context;
- a ``CompressiveTokenizer``: a request holds ``num_frames`` future frames of
  ``tokens_per_frame`` *dynamics* ids and, in ``context_token_ids``, the ``context_tokens`` ids of
  the one context frame they are all conditioned on (ids in ``[0, context_codebook_size)``); the
  context frame itself is not returned. In the multi-step layout every sample of a group shares
  its prompt's context, so a group decodes in one request.

Frames are decoded in micro-batches of ``batch`` frames, in float32 on ``device``
(``rlvr_world.devices``: auto, cpu, cuda, cuda:N; the device in use is logged). Refused with
the field named (``InvalidDecodeRequest``): a count that is not ``num_frames *
tokens_per_frame``, ``num_frames`` below 1 or over ``max_frames``, an id outside its codebook
(the first one, with its index), context ids for a per-frame tokenizer, and missing or
miscounted context ids for a compressive one.
Output: ``(T, H, W, 3)`` float32 in [0, 1].
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from services.decoder.text import InvalidDecodeRequest

if TYPE_CHECKING:
    from rlvr_world.video.compressive import CompressiveTokenizer
    from rlvr_world.video.tokenizer import FrameTokenizer

log = logging.getLogger(__name__)


def _check_ids(ids: np.ndarray, size: int, field: str, what: str) -> None:
    bad = np.flatnonzero((ids < 0) | (ids >= size))
    if bad.size:
        first = int(bad[0])
        raise InvalidDecodeRequest(
            f"{field}[{first}] = {int(ids[first])} is outside the {what} [0, {size})"
        )


class FrameDecoder:
    """A frozen video tokenizer (per-frame or compressive) that decodes validated requests."""

    def __init__(
        self, path: str, batch: int = 64, max_frames: int = 4096, device: str = "auto"
    ) -> None:
        from rlvr_world.devices import device_line, resolve_device
        from rlvr_world.video.codec import (
            codebook_sizes,
            dynamics_tokens_per_frame,
            load_video_tokenizer,
        )
        from rlvr_world.video.compressive import CompressiveTokenizer

        folder = Path(path)
        if not folder.is_dir():
            raise FileNotFoundError(f"video tokenizer directory {path!r} does not exist")
        self.name = path
        self.device = resolve_device(device, "decoder device")
        self.tokenizer: FrameTokenizer | CompressiveTokenizer = load_video_tokenizer(
            folder, self.device
        )
        log.info("frames: %s", device_line(self.device, "fp32"))
        self.kind = str(self.tokenizer.KIND)
        self.codebook_size, context_codes = codebook_sizes(self.tokenizer)
        self.tokens_per_frame = dynamics_tokens_per_frame(self.tokenizer)
        self.context_codebook_size = self.context_tokens = 0  # per-frame: no context
        if isinstance(self.tokenizer, CompressiveTokenizer):
            self.context_codebook_size = context_codes
            self.context_tokens = int(self.tokenizer.context_tokens_per_frame)
        self.tokenizer.requires_grad_(False)
        self.batch = batch
        self.max_frames = max_frames
        self.frame_shape = tuple(int(d) for d in self.tokenizer.frame_shape)
        # One decode at a time: torch modules are not re-entrant across executor threads.
        self._lock = threading.Lock()

    @property
    def compressive(self) -> bool:
        """Whether the tokenizer takes context tokens (compressive) or none (per-frame)."""
        return self.context_tokens > 0

    def check_context(self, context_token_ids: Sequence[int]) -> np.ndarray | None:
        """The context ids as an int64 array (compressive), ``None`` (per-frame), or a refusal."""
        n = len(context_token_ids)
        if not self.compressive:
            if n:
                raise InvalidDecodeRequest(
                    f"context_token_ids: {n} given, but the loaded tokenizer is per-frame and "
                    "takes none (only the compressive tokenizer uses context tokens)"
                )
            return None
        if n != self.context_tokens:
            raise InvalidDecodeRequest(
                f"context_token_ids: {n} given; the compressive tokenizer conditions every frame "
                f"of a request on one context frame of {self.context_tokens} tokens"
            )
        ctx = np.asarray(context_token_ids, dtype=np.int64)
        _check_ids(ctx, self.context_codebook_size, "context_token_ids", "context codebook")
        return ctx

    def check(
        self, token_ids: Sequence[int], num_frames: int, context_token_ids: Sequence[int] = ()
    ) -> tuple[np.ndarray, np.ndarray | None]:
        """The ids as an ``(num_frames, tokens_per_frame)`` int64 array and the context ids
        (``check_context``), or a named refusal."""
        ctx = self.check_context(context_token_ids)
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
        _check_ids(ids, self.codebook_size, "token_ids", "visual codebook")
        return ids.reshape(num_frames, self.tokens_per_frame), ctx

    def decode(
        self, token_ids: Sequence[int], num_frames: int, context_token_ids: Sequence[int] = ()
    ) -> np.ndarray:
        """Frames ``(num_frames, H, W, 3)`` float32 in [0, 1]."""
        from rlvr_world.video.compressive import CompressiveTokenizer

        ids, ctx = self.check(token_ids, num_frames, context_token_ids)
        model = self.tokenizer
        with self._lock:
            if isinstance(model, CompressiveTokenizer):
                assert ctx is not None  # check_context requires it for this kind
                frames = model.decode_future(ctx[None], ids[None], self.batch)[0]
            else:
                frames = model.decode_tokens(ids, batch_size=self.batch)
        return np.ascontiguousarray(frames, dtype=np.float32)
