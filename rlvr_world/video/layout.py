"""Token sequences for the video world model (docs/reference.md#sequence-layouts; golden kinds
``video_layout_*``).

**Single-step** (iVideoGPT processor ``simple``)::

    [f0 a0] [f1 a1] ... [f_{C-1} a_{C-1}]  BOS  f_C  EOS

The prompt ends with BOS; the response is ``f_C`` plus EOS. Labels are -100 on the history and equal
the ids from BOS onward.

**Multi-step** (processor ``ctx_msp``; compressive tokenizer)::

    ctx  [d1 a1] [d2 a2] ... [d_S a_S]

No BOS/EOS appear in the sequence. The prompt is ``ctx d1 a1``; the response is the remaining
``(S-1)`` blocks of ``Pd + D`` tokens. Labels are -100 on the context, on ``d1`` and on every action
token. During rollout the model samples the ``Pd`` dynamics tokens of a block and the ground-truth
action tokens are appended, so the per-response-token ``loss_mask`` is 0 on those actions.

``generated_frames`` reads a multi-step rollout back: the generated frames without the forced
action runs. This module only lays out integer ids; it neither tokenizes frames nor quantises
actions (see :mod:`rlvr_world.video.actions`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

IGNORE_INDEX = -100
#: Fewest frames a sequence lays out: one to condition on and one to predict.
MIN_FRAMES = 2


class _Specials:
    """What follows the action bins in both layouts: BOS, then EOS (= PAD)."""

    action_bins: int

    @property
    def action_offset(self) -> int:
        raise NotImplementedError

    @property
    def bos(self) -> int:
        return self.action_offset + self.action_bins

    @property
    def eos(self) -> int:
        return self.bos + 1

    @property
    def pad(self) -> int:
        return self.eos

    @property
    def size(self) -> int:
        return self.bos + 2


@dataclass(frozen=True)
class SingleStepVocab(_Specials):
    """Visual codes ``0..V-1``, action bins at ``V + bin``, then BOS, then EOS (= PAD)."""

    visual_codes: int
    action_bins: int = 256

    def __post_init__(self) -> None:
        _check_positive("visual_codes", self.visual_codes)
        _check_positive("action_bins", self.action_bins)

    @property
    def action_offset(self) -> int:
        """Id of action bin 0: right after the visual codes."""
        return self.visual_codes


@dataclass(frozen=True)
class MultiStepVocab(_Specials):
    """Dynamics codes first, then context codes, then action bins, then BOS and EOS (= PAD)."""

    dynamics_codes: int
    context_codes: int
    action_bins: int = 256

    def __post_init__(self) -> None:
        _check_positive("dynamics_codes", self.dynamics_codes)
        _check_positive("context_codes", self.context_codes)
        _check_positive("action_bins", self.action_bins)

    @property
    def context_offset(self) -> int:
        """Id of context code 0: right after the dynamics codes."""
        return self.dynamics_codes

    @property
    def action_offset(self) -> int:
        """Id of action bin 0: after the dynamics and context codes."""
        return self.dynamics_codes + self.context_codes


#: Either layout's vocabulary.
LayoutVocab = SingleStepVocab | MultiStepVocab


@dataclass(frozen=True)
class TokenSequence:
    """One training/rollout sequence. ``loss_mask`` covers the response only (1 = trained).

    ``action_ids`` holds the action token ids (with offset) of every step, in order: the rollout
    service inserts these between generated frames in the multi-step layout.
    """

    input_ids: list[int]
    labels: list[int]
    attention_mask: list[int]
    position_ids: list[int]
    prompt_length: int
    response_length: int
    loss_mask: list[int]
    action_ids: list[list[int]] = field(default_factory=list)

    @property
    def prompt_ids(self) -> list[int]:
        """The first ``prompt_length`` input ids."""
        return self.input_ids[: self.prompt_length]

    @property
    def response_ids(self) -> list[int]:
        """The input ids after the prompt."""
        return self.input_ids[self.prompt_length :]


def _check_positive(name: str, value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name}: expected a positive int, got {value!r}")


def _int_array(name: str, value: npt.ArrayLike, ndim: int, upper: int) -> npt.NDArray[np.int64]:
    arr = np.asarray(value)
    if arr.dtype.kind not in "iu":
        raise ValueError(f"{name}: expected an integer array, got dtype {arr.dtype}")
    if arr.ndim != ndim:
        raise ValueError(f"{name}: expected {ndim} dimensions, got shape {arr.shape}")
    if arr.size and (int(arr.min()) < 0 or int(arr.max()) >= upper):
        raise ValueError(
            f"{name}: values must lie in [0, {upper}), got {int(arr.min())}..{int(arr.max())}"
        )
    return arr.astype(np.int64)


def _sequence(
    ids: list[int],
    labels: list[int],
    prompt_length: int,
    loss_mask: list[int],
    actions: list[list[int]],
) -> TokenSequence:
    return TokenSequence(
        input_ids=ids,
        labels=labels,
        attention_mask=[1] * len(ids),
        position_ids=list(range(len(ids))),
        prompt_length=prompt_length,
        response_length=len(ids) - prompt_length,
        loss_mask=loss_mask,
        action_ids=actions,
    )


def single_step(
    frame_tokens: npt.ArrayLike, action_bins: npt.ArrayLike, vocab: SingleStepVocab
) -> TokenSequence:
    """``frame_tokens`` (C+1, P) visual codes; ``action_bins`` (C, D) bins without offset."""
    frames = _int_array("frame_tokens", frame_tokens, 2, vocab.visual_codes)
    actions = _int_array("action_bins", action_bins, 2, vocab.action_bins)
    if frames.shape[0] < MIN_FRAMES or frames.shape[1] < 1:
        raise ValueError(f"frame_tokens: need at least 2 frames of >= 1 token, got {frames.shape}")
    if actions.shape[0] != frames.shape[0] - 1:
        raise ValueError(
            f"action_bins: expected {frames.shape[0] - 1} rows (one per context frame), "
            f"got {actions.shape[0]}"
        )
    action_ids = (actions + vocab.action_offset).tolist()
    ids: list[int] = []
    for t in range(frames.shape[0] - 1):
        ids += frames[t].tolist() + action_ids[t]
    history = len(ids)
    ids += [vocab.bos, *frames[-1].tolist(), vocab.eos]
    labels = [IGNORE_INDEX] * history + ids[history:]
    prompt_length = history + 1
    loss_mask = [1] * (len(ids) - prompt_length)
    return _sequence(ids, labels, prompt_length, loss_mask, action_ids)


def multi_step(
    context_tokens: npt.ArrayLike,
    dynamics_tokens: npt.ArrayLike,
    action_bins: npt.ArrayLike,
    vocab: MultiStepVocab,
) -> TokenSequence:
    """``context_tokens`` (Pc,), ``dynamics_tokens`` (S, Pd), ``action_bins`` (S, D) (no offsets).

    ``action_bins[s]`` is the action of dynamics frame ``s`` (iVideoGPT's ``actions[:, 1:]``).
    """
    ctx = _int_array("context_tokens", context_tokens, 1, vocab.context_codes)
    dyn = _int_array("dynamics_tokens", dynamics_tokens, 2, vocab.dynamics_codes)
    actions = _int_array("action_bins", action_bins, 2, vocab.action_bins)
    if ctx.shape[0] < 1:
        raise ValueError("context_tokens: empty")
    if dyn.shape[0] < MIN_FRAMES or dyn.shape[1] < 1:
        raise ValueError(f"dynamics_tokens: need at least 2 frames of >= 1 token, got {dyn.shape}")
    if actions.shape[0] != dyn.shape[0]:
        raise ValueError(
            f"action_bins: expected {dyn.shape[0]} rows (one per dynamics frame), "
            f"got {actions.shape[0]}"
        )
    action_ids = (actions + vocab.action_offset).tolist()
    ids = (ctx + vocab.context_offset).tolist()
    labels = [IGNORE_INDEX] * len(ids)
    loss_mask: list[int] = []
    for s in range(dyn.shape[0]):
        frame = dyn[s].tolist()
        ids += frame + action_ids[s]
        labels += (frame if s > 0 else [IGNORE_INDEX] * len(frame)) + [IGNORE_INDEX] * len(
            action_ids[s]
        )
        if s > 0:
            loss_mask += [1] * len(frame) + [0] * len(action_ids[s])
    prompt_length = ctx.shape[0] + dyn.shape[1] + actions.shape[1]
    return _sequence(ids, labels, prompt_length, loss_mask, action_ids)


def multi_step_frames(
    response_ids: npt.ArrayLike, tokens_per_frame: int, action_dims: int
) -> npt.NDArray[np.int64]:
    """The generated dynamics tokens (S-1, Pd) of a multi-step response (actions dropped).

    Values are returned as they are; the decoder validates their range.
    """
    _check_positive("tokens_per_frame", tokens_per_frame)
    if isinstance(action_dims, bool) or not isinstance(action_dims, int) or action_dims < 0:
        raise ValueError(f"action_dims: expected a non-negative int, got {action_dims!r}")
    resp = np.asarray(response_ids)
    if resp.ndim != 1 or resp.dtype.kind not in "iu":
        raise ValueError(
            f"response_ids: expected a 1-D integer array, got {resp.dtype} {resp.shape}"
        )
    block = tokens_per_frame + action_dims
    if resp.shape[0] == 0 or resp.shape[0] % block:
        raise ValueError(
            f"response_ids: length {resp.shape[0]} is not a positive multiple of {block} "
            f"({tokens_per_frame} frame + {action_dims} action tokens)"
        )
    return resp.reshape(-1, block)[:, :tokens_per_frame].astype(np.int64)


def generated_frames(
    token_ids: Sequence[int], inserted: Sequence[bool], steps: int, segment_tokens: int
) -> list[list[int]]:
    """The ``steps`` generated frames (``segment_tokens`` ids each) of an interleaved sample.

    The forced tokens are dropped by the rollout's ``inserted`` flags; without flags the sample
    is read as ``steps`` blocks of a segment and its forced run (``multi_step_frames``
    cuts the same way). ``ValueError`` when the generated count is not ``steps * segment_tokens``.
    """
    if inserted:
        if len(inserted) != len(token_ids):
            raise ValueError(
                f"inserted: {len(inserted)} flags for {len(token_ids)} tokens of a sample"
            )
        kept = [int(t) for t, forced in zip(token_ids, inserted, strict=True) if not forced]
    else:
        block, rest = divmod(len(token_ids), steps)
        if rest or block < segment_tokens:
            raise ValueError(
                f"sample: {len(token_ids)} tokens do not split into {steps} blocks of "
                f"{segment_tokens} generated tokens and a forced run"
            )
        kept = [
            int(t) for s in range(steps) for t in token_ids[s * block : s * block + segment_tokens]
        ]
    if len(kept) != steps * segment_tokens:
        raise ValueError(
            f"sample: {len(kept)} generated tokens, expected {steps} frames of {segment_tokens}"
        )
    return [kept[s * segment_tokens : (s + 1) * segment_tokens] for s in range(steps)]
