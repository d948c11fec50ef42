"""What the orchestrator feeds the rollout service: one ``PromptItem`` per dataset prompt.

An item carries everything needed to score a response through the reward service (a verl-style
``data_source`` / ``ground_truth`` / ``extra_info``) and, for SFT, the target text the model should
produce. Builders cover the text game (compact or paper prompt, state-diff target, the current
state in ``extra_info.data_state`` as the paper's rows do), the web task (rendered diff) and the
video task (``video_item``: the prompt is token ids, frames and actions laid out by
``rlvr_world.video.layout``; the true next frame and the last context frame travel as base64
``uint8`` arrays in ``extra_info``, read back by ``video_frames``; a multi-step item also carries
the T true frames and the forced action runs, ``video_inserts``). Items round-trip through JSON
Lines (``save_items`` / ``load_items``). Pure: no I/O but the files.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from rlvr_world.shapes import FRAME_NDIM, FRAMES_NDIM, MATRIX_NDIM, RGB_CHANNELS
from rlvr_world.tasks.text_game import DATA_SOURCE, Transition, build_compact_prompt, to_verl_row

__all__ = [
    "ANSWER_PREFIX",
    "PromptItem",
    "load_items",
    "save_items",
    "text_game_item",
    "video_frames",
    "video_inserts",
    "video_item",
    "web_item",
]

#: What a target answer starts with (both reward variants look for it).
ANSWER_PREFIX = "The final answer is: "
WEB_DATA_SOURCE = "web_agent"
VIDEO_DATA_SOURCE = "video"


@dataclass(frozen=True)
class PromptItem:
    """One prompt with its verifiable reference."""

    prompt_id: str
    task: str  # "text_game" | "web" | "video"
    data_source: str  # the reward dispatch key (verl's data_source)
    prompt: str
    ground_truth: str
    target: str  # the answer an SFT step trains on (no end-of-sequence text)
    extra_info: dict[str, Any] = field(default_factory=dict)
    changed: bool | None = None  # text game: the paper's gold label; None where not defined
    prompt_token_ids: list[int] | None = None  # the prompt as ids (video); None: ``prompt`` text

    @property
    def rollout_prompt(self) -> str | list[int]:
        """What the rollout service gets: the ids when the item has them, else the text."""
        return self.prompt_token_ids if self.prompt_token_ids is not None else self.prompt

    def reward_row(self, response: str) -> dict[str, Any]:
        """The verl-style mapping the reward service scores."""
        return {
            "data_source": self.data_source,
            "solution_str": response,
            "ground_truth": self.ground_truth,
            "extra_info": self.extra_info,
        }


def diff_answer(diff: Mapping[str, Any]) -> str:
    """The SFT target of a text-game diff: the answer phrase and compact JSON."""
    return ANSWER_PREFIX + json.dumps(diff, separators=(",", ":"), ensure_ascii=False)


def text_game_item(
    t: Transition,
    prompt_id: str,
    *,
    prompt: str | None = None,
    split: str = "train",
    index: int = 0,
) -> PromptItem:
    """A text-game item: the compact prompt unless ``prompt`` is given (e.g. the paper's)."""
    text = prompt if prompt is not None else build_compact_prompt(t)
    row = to_verl_row(t, text, split, index)
    return PromptItem(
        prompt_id=prompt_id,
        task="text_game",
        data_source=DATA_SOURCE,
        prompt=text,
        ground_truth=str(row["reward_model"]["ground_truth"]),
        target=diff_answer(t.diff()),
        extra_info=dict(row["extra_info"]),
        changed=t.changed,
    )


def web_item(prompt_id: str, prompt: str, rendered_diff: str) -> PromptItem:
    """A web item: the prompt (``tasks.web.build_web_prompt``) and the rendered diff to match."""
    return PromptItem(
        prompt_id=prompt_id,
        task="web",
        data_source=WEB_DATA_SOURCE,
        prompt=prompt,
        ground_truth=rendered_diff,
        target=rendered_diff,
    )


def _array_field(arr: np.ndarray, name: str) -> dict[str, Any]:
    a = np.ascontiguousarray(arr)
    if a.dtype != np.uint8 or a.ndim != FRAME_NDIM or a.shape[-1] != RGB_CHANNELS:
        raise ValueError(f"{name}: need a uint8 (H, W, 3) frame, got {a.dtype} {a.shape}")
    return {"b64": base64.b64encode(a.tobytes()).decode("ascii"), "shape": list(a.shape)}


def _array_of(value: Any, name: str) -> np.ndarray:
    if not isinstance(value, dict) or "b64" not in value or "shape" not in value:
        raise ValueError(f"extra_info.{name}: missing or not a {{b64, shape}} frame")
    shape = tuple(int(d) for d in value["shape"])
    raw = base64.b64decode(value["b64"])
    if len(raw) != int(np.prod(shape)):
        raise ValueError(f"extra_info.{name}: {len(raw)} bytes do not fill shape {shape}")
    return np.frombuffer(raw, dtype=np.uint8).reshape(shape)


def video_item(  # noqa: PLR0913 (the item's keyword-only parts: multi-step, anchor, context)
    prompt_id: str,
    prompt_token_ids: Sequence[int],
    target_frame: np.ndarray,
    previous_frame: np.ndarray,
    target_tokens: Sequence[int] = (),
    *,
    inserts: Sequence[Sequence[int]] = (),
    segment_tokens: int = 0,
    anchor: tuple[Sequence[int], tuple[int, int]] | None = None,
    context_tokens: Sequence[int] = (),
) -> PromptItem:
    """A video item: predict the next frame after the laid-out context ``prompt_token_ids``.

    ``target_frame`` is the true next frame (scored against, in pixels, as the paper does),
    ``previous_frame`` the last context frame (the repetition check); ``target_tokens`` the
    tokenizer's codes of the true frame (for reference, e.g. MLE), stored as ``target``.

    **Multi-step** (``inserts`` given): ``target_frame`` is ``(T, H, W, 3)``, the T true frames
    the rollout generates, each of ``segment_tokens`` tokens followed by its forced run
    ``inserts[t]`` (the ground-truth actions), so ``len(inserts) == T``. They are stored as
    ``extra_info.target_frames`` (a list of frames), ``inserts`` and ``segment_tokens``; a
    single-step item has none of these keys (its JSON is what it always was).

    ``context_tokens`` (multi-step, compressive tokenizer): the context frame's tokens, which the
    decoder conditions the generated frames on; stored as ``extra_info.context_tokens`` only
    when given (``video_context``).

    ``anchor`` (single-step only): ``(context_tokens, (rows, cols))``, the last context frame's
    tokens and the token grid, stored as ``extra_info.anchor_tokens`` / ``anchor_grid`` for
    context-anchored decoding (``rlvr_world.video.anchor``, ``video_anchor``)."""
    extra: dict[str, Any] = {}
    if anchor is not None:
        if inserts or segment_tokens:
            raise ValueError("anchor: context-anchored decoding is single-step only")
        tokens, (rows, cols) = anchor
        if rows < 1 or cols < 1 or len(tokens) != rows * cols:
            raise ValueError(
                f"anchor: {len(tokens)} context tokens for a {rows}x{cols} grid (need rows*cols)"
            )
        extra["anchor_tokens"] = [int(t) for t in tokens]
        extra["anchor_grid"] = [int(rows), int(cols)]
    if inserts or segment_tokens:
        frames = np.asarray(target_frame)
        if frames.ndim != FRAMES_NDIM:
            raise ValueError(
                f"target_frame: a multi-step item needs (T, H, W, 3) frames, got {frames.shape}"
            )
        runs = [[int(t) for t in run] for run in inserts]
        if len(runs) != frames.shape[0]:
            raise ValueError(
                f"inserts: {len(runs)} runs for {frames.shape[0]} target frames (one per frame)"
            )
        if any(not run for run in runs):
            raise ValueError("inserts: every run needs at least one token")
        if isinstance(segment_tokens, bool) or segment_tokens < 1:
            raise ValueError(f"segment_tokens: must be >= 1 with inserts, got {segment_tokens!r}")
        extra["target_frames"] = [
            _array_field(f, f"target_frame[{t}]") for t, f in enumerate(frames)
        ]
        extra["inserts"] = runs
        extra["segment_tokens"] = int(segment_tokens)
        if len(context_tokens):
            extra["context_tokens"] = [int(t) for t in context_tokens]
    elif len(context_tokens):
        raise ValueError("context_tokens: the decoder's context is multi-step only (give inserts)")
    else:
        extra["target_frame"] = _array_field(target_frame, "target_frame")
    extra["previous_frame"] = _array_field(previous_frame, "previous_frame")
    return PromptItem(
        prompt_id=prompt_id,
        task="video",
        data_source=VIDEO_DATA_SOURCE,
        prompt="",
        ground_truth="",
        target=" ".join(str(int(t)) for t in target_tokens),
        extra_info=extra,
        prompt_token_ids=[int(t) for t in prompt_token_ids],
    )


def video_frames(item: PromptItem) -> tuple[np.ndarray, np.ndarray]:
    """``(target, previous_frame)`` of a video item, uint8; ``ValueError`` else.

    ``target`` is the frame ``(H, W, 3)`` of a single-step item, the frames ``(T, H, W, 3)`` of
    a multi-step one (``video_inserts``)."""
    if item.task != "video":
        raise ValueError(f"item {item.prompt_id}: task {item.task!r} has no frames")
    previous = _array_of(item.extra_info.get("previous_frame"), "previous_frame")
    many = item.extra_info.get("target_frames")
    if many is None:
        return _array_of(item.extra_info.get("target_frame"), "target_frame"), previous
    if not isinstance(many, list) or not many:
        raise ValueError("extra_info.target_frames: expected a non-empty list of frames")
    frames = [_array_of(f, f"target_frames[{t}]") for t, f in enumerate(many)]
    if len({f.shape for f in frames}) != 1:
        raise ValueError("extra_info.target_frames: frames differ in shape")
    return np.stack(frames), previous


def video_anchor(item: PromptItem) -> tuple[np.ndarray, tuple[int, int]]:
    """``(context_tokens (P,), (rows, cols))`` of a single-step video item built with
    ``anchor``; ``ValueError`` naming the field when it has none or they do not fit."""
    tokens = item.extra_info.get("anchor_tokens")
    grid = item.extra_info.get("anchor_grid")
    if tokens is None or grid is None:
        raise ValueError(
            f"item {item.prompt_id}: no extra_info.anchor_tokens / anchor_grid (built without "
            "anchor), so it cannot be decoded context-anchored"
        )
    if not isinstance(tokens, list) or not all(
        isinstance(t, int) and not isinstance(t, bool) for t in tokens
    ):
        raise ValueError("extra_info.anchor_tokens: expected a list of ints")
    if (
        not isinstance(grid, list)
        or len(grid) != MATRIX_NDIM
        or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 1 for d in grid)
    ):
        raise ValueError(f"extra_info.anchor_grid: expected [rows, cols] >= 1, got {grid!r}")
    if len(tokens) != grid[0] * grid[1]:
        raise ValueError(f"extra_info.anchor_tokens: {len(tokens)} tokens for a grid {grid}")
    return np.asarray(tokens, dtype=np.int64), (grid[0], grid[1])


def video_inserts(item: PromptItem) -> tuple[list[list[int]], int]:
    """``(inserts, segment_tokens)`` of a multi-step video item; ``([], 0)`` for a single-step
    one. ``ValueError`` names the field when they do not fit the target frames."""
    runs = item.extra_info.get("inserts")
    if runs is None:
        return [], 0
    size = item.extra_info.get("segment_tokens")
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        raise ValueError(f"extra_info.segment_tokens: expected an int >= 1, got {size!r}")
    if not isinstance(runs, list) or not all(
        isinstance(run, list) and run and all(isinstance(t, int) for t in run) for run in runs
    ):
        raise ValueError("extra_info.inserts: expected a list of non-empty int lists")
    frames = item.extra_info.get("target_frames")
    if not isinstance(frames, list) or len(frames) != len(runs):
        raise ValueError(
            f"extra_info.inserts: {len(runs)} runs do not match extra_info.target_frames"
        )
    return [list(run) for run in runs], size


def video_context(item: PromptItem) -> list[int]:
    """The context tokens a multi-step item's frames are decoded against (compressive
    tokenizer); empty when it has none. ``ValueError`` when the field is not a list of ints."""
    ctx = item.extra_info.get("context_tokens")
    if ctx is None:
        return []
    if (
        not isinstance(ctx, list)
        or not ctx
        or not all(isinstance(t, int) and not isinstance(t, bool) for t in ctx)
    ):
        raise ValueError("extra_info.context_tokens: expected a non-empty list of ints")
    return list(ctx)


def save_items(items: Iterable[PromptItem], path: Path) -> int:
    """Write items as JSON Lines; returns how many."""
    path.parent.mkdir(parents=True, exist_ok=True)
    count = 0
    with path.open("w", encoding="utf-8") as fh:
        for item in items:
            fh.write(json.dumps(asdict(item), ensure_ascii=False) + "\n")
            count += 1
    return count


def load_items(path: Path) -> list[PromptItem]:
    """Read items written by ``save_items``; ``ValueError`` names the line and field."""
    items: list[PromptItem] = []
    with path.open(encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                items.append(PromptItem(**json.loads(line)))
            except (json.JSONDecodeError, TypeError) as exc:
                raise ValueError(f"{path}:{lineno}: not a prompt item: {exc}") from exc
    return items
