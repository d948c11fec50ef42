"""Context-anchored decoding: a predicted frame as the last real frame plus the decoded change.

A per-frame tokenizer decodes every frame through its own lossy reconstruction, so a world model
that predicts "nothing moves" perfectly (the last context frame's own tokens) still scores the
tokenizer's error, which on PushT is larger than the motion between two frames: decoded
predictions lose to copying the last frame's pixels before the model has made a single mistake.
Anchoring renders a prediction as

    out = clip(context_frame + decode(predicted) - decode(context_tokens))

on the token patches whose predicted token differs from the context token at the same grid
position (grown by ``dilate`` positions), and as the context frame's own pixels elsewhere. So:

* predicting the context tokens everywhere gives exactly the copy-last-frame baseline;
* every pixel in which the output differs from that baseline comes from a token the model
  changed, and carries the decoded change, not the tokenizer's absolute error.

What it does not do: no learning, no tokenizer calls; callers pass the decoded frames. The grid
is ``(rows, cols)`` of tokens, each covering ``H // rows`` x ``W // cols`` pixels.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any

import numpy as np
from numpy.typing import NDArray
from pydantic import Field

#: A config field's type: the ``dilate`` of context-anchored decoding (grid positions a changed
#: token's patch grows by), or None to decode every token; one bound for every config that sets it.
AnchorDilate = Annotated[
    int | None,
    Field(ge=0, le=8, description="context-anchored decoding's dilate (None: decode every token)"),
]
#: ndim of a batch of token grids / frames.
_TOKENS_NDIM = 2
_FRAMES_NDIM = 4


def last_context_tokens(
    prompt_ids: Sequence[int], tokens_per_frame: int, action_dims: int
) -> list[int]:
    """The last context frame's tokens in a single-step prompt ``[f0 a0]..[f_{C-1} a_{C-1}] BOS``
    (``rlvr_world.video.layout``): the ``tokens_per_frame`` ids before its action and BOS."""
    end = len(prompt_ids) - 1 - action_dims
    start = end - tokens_per_frame
    if start < 0 or tokens_per_frame < 1 or action_dims < 0:
        raise ValueError(
            f"prompt: {len(prompt_ids)} ids cannot end in a frame of {tokens_per_frame} tokens, "
            f"{action_dims} action ids and BOS"
        )
    return [int(t) for t in prompt_ids[start:end]]


def changed_mask(
    pred_tokens: NDArray[np.integer[Any]],
    context_tokens: NDArray[np.integer[Any]],
    grid: tuple[int, int],
    dilate: int = 1,
) -> NDArray[np.bool_]:
    """``(N, rows, cols)``: where a predicted token differs from the context token, grown by
    ``dilate`` grid positions in each direction (a decoded patch depends on its neighbours)."""
    pred = np.asarray(pred_tokens)
    ctx = np.asarray(context_tokens)
    rows, cols = grid
    if pred.ndim != _TOKENS_NDIM or pred.shape != ctx.shape:
        raise ValueError(
            f"tokens: predicted {pred.shape} and context {ctx.shape} must be the same (N, P)"
        )
    if pred.shape[1] != rows * cols:
        raise ValueError(
            f"tokens: {pred.shape[1]} per frame, but the grid {grid} has {rows * cols}"
        )
    if dilate < 0:
        raise ValueError(f"dilate: must be >= 0, got {dilate}")
    mask: NDArray[np.bool_] = np.asarray(pred != ctx, dtype=np.bool_).reshape(-1, rows, cols)
    if dilate == 0:
        return mask
    padded = np.pad(mask, ((0, 0), (dilate, dilate), (dilate, dilate)))
    grown: NDArray[np.bool_] = np.zeros_like(mask)
    for dy in range(2 * dilate + 1):
        for dx in range(2 * dilate + 1):
            grown |= padded[:, dy : dy + rows, dx : dx + cols]
    return grown


def anchor_frames(
    decoded: NDArray[np.floating[Any]],
    context_decoded: NDArray[np.floating[Any]],
    context_frames: NDArray[Any],
    pred_tokens: NDArray[np.integer[Any]],
    context_tokens: NDArray[np.integer[Any]],
    *,
    grid: tuple[int, int],
    dilate: int = 0,
) -> NDArray[np.float32]:
    """Frames ``(N, H, W, 3)`` float32 in [0, 1]: ``context_frames`` (uint8, or float in [0, 1])
    plus ``decoded - context_decoded`` where the (dilated) tokens changed, the context frames'
    own pixels elsewhere."""
    dec = np.asarray(decoded, dtype=np.float32)
    base = np.asarray(context_decoded, dtype=np.float32)
    ctx = np.asarray(context_frames)
    if dec.ndim != _FRAMES_NDIM or ctx.shape != dec.shape or base.shape != dec.shape:
        raise ValueError(
            f"frames: decoded {dec.shape}, context decoded {base.shape} and context {ctx.shape} "
            "must be the same (N, H, W, C)"
        )
    ctx_f = ctx.astype(np.float32) / 255.0 if ctx.dtype == np.uint8 else ctx.astype(np.float32)
    n, h, w, _ = dec.shape
    rows, cols = grid
    if h % rows or w % cols:
        raise ValueError(f"grid {grid} does not divide the frame size {(h, w)}")
    mask = changed_mask(pred_tokens, context_tokens, grid, dilate)
    if mask.shape[0] != n:
        raise ValueError(f"tokens: {mask.shape[0]} frames for {n} decoded")
    pixels = np.repeat(np.repeat(mask, h // rows, axis=1), w // cols, axis=2)[..., None]
    moved = np.clip(ctx_f + dec - base, 0.0, 1.0)
    return np.where(pixels, moved, ctx_f).astype(np.float32)


def anchor_samples(
    decoded: NDArray[np.floating[Any]],
    context_decoded: NDArray[np.floating[Any]],
    previous_frame: NDArray[Any],
    sample_ids: Sequence[Sequence[int]],
    context_tokens: NDArray[np.integer[Any]],
    *,
    grid: tuple[int, int],
    dilate: int,
) -> NDArray[np.float32]:
    """``anchor_frames`` for the G samples of one prompt: ``decoded`` ``(G, H, W, 3)`` and their
    token ids; the one last context frame ``(H, W, 3)``, its tokens ``(P,)`` and their decoding
    ``(H, W, 3)``."""
    ids = np.asarray(sample_ids, dtype=np.int64)
    if ids.ndim != _TOKENS_NDIM:
        raise ValueError(f"sample_ids: expected (G, P) token ids, got shape {ids.shape}")
    shape = np.asarray(decoded).shape
    return anchor_frames(
        decoded,
        np.broadcast_to(np.asarray(context_decoded), shape),
        np.broadcast_to(np.asarray(previous_frame), shape),
        ids,
        np.broadcast_to(np.asarray(context_tokens), ids.shape),
        grid=grid,
        dilate=dilate,
    )


def hold_unchanged(
    tokens: NDArray[np.integer[Any]],
    frames: NDArray[np.uint8],
    grid: tuple[int, int],
    below: int,
) -> NDArray[np.int64]:
    """A clip's tokens ``(T, rows * cols)`` with each patch whose pixels changed by at most
    ``below`` (largest absolute channel difference) since the previous frame given the previous
    frame's token there: the target of a still patch is "unchanged", not the token the encoder's
    receptive field gave it because a neighbouring patch moved. Frame 0 keeps its tokens; held
    tokens carry on through later still frames."""
    toks = np.array(tokens, dtype=np.int64)
    imgs = np.asarray(frames)
    rows, cols = grid
    if toks.ndim != _TOKENS_NDIM or toks.shape[1] != rows * cols:
        raise ValueError(f"tokens: expected (T, {rows * cols}), got {toks.shape}")
    if imgs.ndim != _FRAMES_NDIM or imgs.shape[0] != toks.shape[0]:
        raise ValueError(f"frames: expected ({toks.shape[0]}, H, W, 3), got {imgs.shape}")
    height, width = imgs.shape[1:3]
    if height % rows or width % cols:
        raise ValueError(f"grid {grid} does not divide frames of {height}x{width}")
    if below < 0:
        raise ValueError(f"below: expected >= 0, got {below}")
    ph, pw = height // rows, width // cols
    diff = np.abs(imgs[1:].astype(np.int16) - imgs[:-1].astype(np.int16)).max(axis=-1)
    moved = diff.reshape(-1, rows, ph, cols, pw).max(axis=(2, 4)).reshape(-1, rows * cols) > below
    for t in range(1, toks.shape[0]):
        toks[t] = np.where(moved[t - 1], toks[t], toks[t - 1])
    return toks
