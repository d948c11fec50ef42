"""What the orchestrator feeds the rollout service: one ``PromptItem`` per dataset prompt.

An item carries everything needed to score a response through the reward service (a verl-style
``data_source`` / ``ground_truth`` / ``extra_info``) and, for SFT, the target text the model should
produce. Builders cover the text game (compact or paper prompt, state-diff target, the current
state in ``extra_info.data_state`` as the paper's rows do), the web task (rendered diff) and the
video task (``video_item``: the prompt is token ids, frames and actions laid out by
``rlvr_world.video.layout``; the true next frame, the last context frame and what decoding needs
travel as a typed ``VideoPayload`` of arrays, ``PromptItem.video``, read back by
``video_frames``; a multi-step item also carries the T true frames and the forced action runs,
``video_inserts``). Items round-trip through JSON Lines (``save_items`` / ``load_items``; only
there are frames written as base64). Pure: no I/O but the files.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from rlvr_world.rewards.video_action import STATE_SIZE
from rlvr_world.shapes import FRAME_NDIM, FRAMES_NDIM, MATRIX_NDIM, RGB_CHANNELS
from rlvr_world.tasks.text_game import DATA_SOURCE, Transition, build_compact_prompt, to_verl_row

__all__ = [
    "ANSWER_PREFIX",
    "PromptItem",
    "VideoPayload",
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
    video: VideoPayload | None = None  # the typed reference of a video item; None for text

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


def _frame(arr: Any, name: str, ndim: int = FRAME_NDIM) -> np.ndarray:
    a = np.ascontiguousarray(arr)
    if a.dtype != np.uint8 or a.ndim != ndim or a.shape[-1] != RGB_CHANNELS:
        want = "(H, W, 3)" if ndim == FRAME_NDIM else "(T, H, W, 3)"
        raise ValueError(f"{name}: need a uint8 {want} frame array, got {a.dtype} {a.shape}")
    return a


def _ints(values: Any, name: str) -> tuple[int, ...]:
    if not isinstance(values, Sequence | np.ndarray) or isinstance(values, str):
        raise ValueError(f"{name}: expected a list of ints, got {type(values).__name__}")
    if not all(isinstance(v, int | np.integer) and not isinstance(v, bool) for v in values):
        raise ValueError(f"{name}: expected a list of ints")
    return tuple(int(v) for v in values)


@dataclass(frozen=True, eq=False)
class VideoPayload:
    """What the orchestrator needs of a video item besides its prompt ids, as arrays.

    ``target``: the true next frame ``(H, W, 3)`` (single-step) or the T true frames
    ``(T, H, W, 3)`` (multi-step, with ``inserts``); ``previous``: the last context frame (the
    repetition check, and the anchor of context-anchored decoding). Multi-step: ``inserts[t]`` is
    the forced token run after generated frame t (its ground-truth actions), ``segment_tokens``
    the tokens of one generated frame, ``context_tokens`` the context frame's tokens a
    compressive tokenizer decodes against. Single-step: ``anchor_tokens`` and ``anchor_grid``
    (rows, cols), the last context frame's tokens for ``rlvr_world.video.anchor``.
    The truth of the action-following reward terms, one row per target frame: ``actions``
    ``(T, A)``, the true action leading to each target frame in the world model's own action
    space (the ``idm`` term; ``previous`` is the frame before the first), and ``states`` ``(T,
    5)``, the simulator's state in each target frame (the ``state`` term; PushT only); None
    where unknown. Both float64.
    Checked on construction (``ValueError`` naming the field)."""

    target: np.ndarray
    previous: np.ndarray
    inserts: tuple[tuple[int, ...], ...] = ()
    segment_tokens: int = 0
    context_tokens: tuple[int, ...] = ()
    anchor_tokens: tuple[int, ...] = ()
    anchor_grid: tuple[int, int] | None = None
    actions: np.ndarray | None = None
    states: np.ndarray | None = None

    def __post_init__(self) -> None:
        multi = bool(self.inserts) or bool(self.segment_tokens)
        set_ = object.__setattr__
        set_(self, "target", _frame(self.target, "target", FRAMES_NDIM if multi else FRAME_NDIM))
        set_(self, "previous", _frame(self.previous, "previous"))
        set_(self, "context_tokens", _ints(self.context_tokens, "context_tokens"))
        set_(self, "anchor_tokens", _ints(self.anchor_tokens, "anchor_tokens"))
        runs = tuple(_ints(run, f"inserts[{t}]") for t, run in enumerate(self.inserts))
        set_(self, "inserts", runs)
        if multi:
            self._check_multi_step()
        elif self.context_tokens:
            raise ValueError("context_tokens: the decoder's context is multi-step only")
        self._check_anchor()
        frames = self.target.shape[0] if multi else 1
        set_(self, "actions", _rows(self.actions, "actions", frames))
        set_(self, "states", _rows(self.states, "states", frames, STATE_SIZE))

    def _check_multi_step(self) -> None:
        if len(self.inserts) != self.target.shape[0]:
            raise ValueError(
                f"inserts: {len(self.inserts)} runs for {self.target.shape[0]} target frames "
                "(one per frame)"
            )
        if any(not run for run in self.inserts):
            raise ValueError("inserts: every run needs at least one token")
        size = self.segment_tokens
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise ValueError(f"segment_tokens: must be >= 1 with inserts, got {size!r}")

    def _check_anchor(self) -> None:
        if self.anchor_grid is None:
            if self.anchor_tokens:
                raise ValueError("anchor_tokens: given without anchor_grid")
            return
        if self.multi_step:
            raise ValueError("anchor: context-anchored decoding is single-step only")
        grid = _ints(self.anchor_grid, "anchor_grid")
        if len(grid) != MATRIX_NDIM or min(grid) < 1:
            raise ValueError(f"anchor_grid: expected (rows, cols) >= 1, got {self.anchor_grid!r}")
        object.__setattr__(self, "anchor_grid", (grid[0], grid[1]))
        if len(self.anchor_tokens) != grid[0] * grid[1]:
            raise ValueError(
                f"anchor_tokens: {len(self.anchor_tokens)} context tokens for a "
                f"{grid[0]}x{grid[1]} grid (need rows*cols)"
            )

    @property
    def multi_step(self) -> bool:
        """True for an item whose rollout generates T frames interleaved with forced runs."""
        return bool(self.inserts)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, VideoPayload):
            return NotImplemented
        return (
            np.array_equal(self.target, other.target)
            and np.array_equal(self.previous, other.previous)
            and (self.inserts, self.segment_tokens, self.context_tokens)
            == (other.inserts, other.segment_tokens, other.context_tokens)
            and (self.anchor_tokens, self.anchor_grid) == (other.anchor_tokens, other.anchor_grid)
            and _same(self.actions, other.actions)
            and _same(self.states, other.states)
        )

    __hash__ = None  # type: ignore[assignment]  # holds arrays: not hashable

    def to_json(self) -> dict[str, Any]:
        """A JSON-able dict (frames as base64 of their bytes, with the shape): the file form."""
        out: dict[str, Any] = {
            "target": _b64(self.target),
            "previous": _b64(self.previous),
        }
        if self.multi_step:
            out |= {
                "inserts": [list(r) for r in self.inserts],
                "segment_tokens": self.segment_tokens,
            }
        if self.context_tokens:
            out["context_tokens"] = list(self.context_tokens)
        if self.anchor_grid is not None:
            out |= {
                "anchor_tokens": list(self.anchor_tokens),
                "anchor_grid": list(self.anchor_grid),
            }
        for name in ("actions", "states"):
            rows = getattr(self, name)
            if rows is not None:  # float64 -> JSON numbers round-trip exactly (repr)
                out[name] = rows.tolist()
        return out

    @classmethod
    def from_json(cls, data: Any) -> VideoPayload:
        """The inverse of ``to_json``; ``ValueError`` naming the field that does not fit."""
        if not isinstance(data, dict):
            raise ValueError(f"video: expected an object, got {type(data).__name__}")
        known = {"target", "previous", "inserts", "segment_tokens", "context_tokens"}
        unknown = set(data) - known - {"anchor_tokens", "anchor_grid", "actions", "states"}
        if unknown:
            raise ValueError(f"video: unknown fields {sorted(unknown)}")
        grid = data.get("anchor_grid")
        return cls(
            target=_unb64(data.get("target"), "video.target"),
            previous=_unb64(data.get("previous"), "video.previous"),
            inserts=tuple(data.get("inserts", ())),
            segment_tokens=data.get("segment_tokens", 0),
            context_tokens=tuple(data.get("context_tokens", ())),
            anchor_tokens=tuple(data.get("anchor_tokens", ())),
            anchor_grid=None if grid is None else _pair(grid),
            actions=data.get("actions"),
            states=data.get("states"),
        )


def _rows(value: Any, name: str, frames: int, width: int | None = None) -> np.ndarray | None:
    """``value`` as finite float64 ``(frames, width)`` rows (any width >= 1 when None), or
    None; ``ValueError`` naming ``name`` otherwise."""
    if value is None:
        return None
    try:
        arr = np.array(value, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{name}: expected rows of numbers, got {type(value).__name__}") from exc
    want = f"({frames}, {'A >= 1' if width is None else width})"
    if (
        arr.ndim != MATRIX_NDIM
        or arr.shape[0] != frames
        or arr.shape[1] < 1
        or (width is not None and arr.shape[1] != width)
    ):
        raise ValueError(
            f"{name}: expected shape {want}, one row per target frame, got {arr.shape}"
        )
    if not np.isfinite(arr).all():
        raise ValueError(f"{name}: contains NaN or infinite values")
    return arr


def _same(a: np.ndarray | None, b: np.ndarray | None) -> bool:
    return (a is None and b is None) or (a is not None and b is not None and np.array_equal(a, b))


def _pair(grid: Any) -> tuple[int, int]:
    values = _ints(grid, "anchor_grid")
    if len(values) != MATRIX_NDIM:
        raise ValueError(f"anchor_grid: expected [rows, cols], got {grid!r}")
    return values[0], values[1]


def _b64(arr: np.ndarray) -> dict[str, Any]:
    return {"b64": base64.b64encode(arr.tobytes()).decode("ascii"), "shape": list(arr.shape)}


def _unb64(value: Any, name: str) -> np.ndarray:
    if not isinstance(value, dict) or "b64" not in value or "shape" not in value:
        raise ValueError(f"{name}: missing or not a {{b64, shape}} frame")
    try:
        shape = tuple(int(d) for d in value["shape"])
        raw = base64.b64decode(value["b64"], validate=True)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{name}: not a {{b64, shape}} frame: {exc}") from exc
    if len(raw) != int(np.prod(shape)):
        raise ValueError(f"{name}: {len(raw)} bytes do not fill shape {shape}")
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
    actions: np.ndarray | None = None,
    states: np.ndarray | None = None,
) -> PromptItem:
    """A video item: predict the next frame after the laid-out context ``prompt_token_ids``.

    ``target_frame`` is the true next frame (scored against, in pixels, as the paper does),
    ``previous_frame`` the last context frame (the repetition check); ``target_tokens`` the
    tokenizer's codes of the true frame (for reference, e.g. MLE), stored as ``target``.

    **Multi-step** (``inserts`` given): ``target_frame`` is ``(T, H, W, 3)``, the T true frames
    the rollout generates, each of ``segment_tokens`` tokens followed by its forced run
    ``inserts[t]`` (the ground-truth actions), so ``len(inserts) == T``. ``context_tokens``
    (compressive tokenizer): the context frame's tokens, which the decoder conditions the
    generated frames on. ``anchor`` (single-step only): ``(context_tokens, (rows, cols))``, the
    last context frame's tokens and the token grid, for context-anchored decoding
    (``rlvr_world.video.anchor``). ``actions`` ``(T, A)`` and ``states`` ``(T, 5)``: the truth
    of the action-following reward terms, one row per target frame. All of it goes into the
    item's ``VideoPayload``."""
    tokens, grid = anchor if anchor is not None else ((), None)
    multi = bool(inserts) or bool(segment_tokens)
    if multi and np.ndim(target_frame) != FRAMES_NDIM:
        raise ValueError(
            f"target_frame: a multi-step item needs (T, H, W, 3) frames, got "
            f"{np.shape(target_frame)}"
        )
    payload = VideoPayload(
        target=_frame(target_frame, "target_frame", FRAMES_NDIM if multi else FRAME_NDIM),
        previous=_frame(previous_frame, "previous_frame"),
        inserts=tuple(tuple(run) for run in inserts),
        segment_tokens=segment_tokens,
        context_tokens=tuple(context_tokens),
        anchor_tokens=tuple(tokens),
        anchor_grid=grid,
        actions=actions,
        states=states,
    )
    return PromptItem(
        prompt_id=prompt_id,
        task="video",
        data_source=VIDEO_DATA_SOURCE,
        prompt="",
        ground_truth="",
        target=" ".join(str(int(t)) for t in target_tokens),
        prompt_token_ids=[int(t) for t in prompt_token_ids],
        video=payload,
    )


def video_payload(item: PromptItem) -> VideoPayload:
    """The item's ``VideoPayload``; ``ValueError`` for an item that has none."""
    if item.video is None:
        raise ValueError(f"item {item.prompt_id}: task {item.task!r} has no video payload")
    return item.video


def video_frames(item: PromptItem) -> tuple[np.ndarray, np.ndarray]:
    """``(target, previous_frame)`` of a video item, uint8; ``ValueError`` else.

    ``target`` is the frame ``(H, W, 3)`` of a single-step item, the frames ``(T, H, W, 3)`` of
    a multi-step one (``video_inserts``)."""
    payload = video_payload(item)
    return payload.target, payload.previous


def video_anchor(item: PromptItem) -> tuple[np.ndarray, tuple[int, int]]:
    """``(context_tokens (P,), (rows, cols))`` of a single-step video item built with
    ``anchor``; ``ValueError`` when it has none."""
    payload = video_payload(item)
    if payload.anchor_grid is None:
        raise ValueError(
            f"item {item.prompt_id}: no anchor tokens (built without anchor), so it cannot be "
            "decoded context-anchored"
        )
    return np.asarray(payload.anchor_tokens, dtype=np.int64), payload.anchor_grid


def video_inserts(item: PromptItem) -> tuple[list[list[int]], int]:
    """``(inserts, segment_tokens)`` of a multi-step video item; ``([], 0)`` for a single-step
    one."""
    payload = video_payload(item)
    return [list(run) for run in payload.inserts], payload.segment_tokens


def video_context(item: PromptItem) -> list[int]:
    """The context tokens a multi-step item's frames are decoded against (compressive
    tokenizer); empty when it has none."""
    return list(video_payload(item).context_tokens)


def item_to_json(item: PromptItem) -> dict[str, Any]:
    """The JSON form of an item (``save_items``): its fields, the video payload's ``to_json``."""
    out = {k: v for k, v in asdict(item).items() if k != "video"}
    if item.video is not None:
        out["video"] = item.video.to_json()
    return out


def item_from_json(data: Any) -> PromptItem:
    """The inverse of ``item_to_json``; ``ValueError``/``TypeError`` for what does not fit."""
    if not isinstance(data, dict):
        raise TypeError(f"expected an object, got {type(data).__name__}")
    video = data.get("video")
    fields = {k: v for k, v in data.items() if k != "video"}
    return PromptItem(**fields, video=None if video is None else VideoPayload.from_json(video))


def save_items(items: Iterable[PromptItem], path: Path) -> int:
    """Write items as JSON Lines; returns how many."""
    path.parent.mkdir(parents=True, exist_ok=True)
    count = 0
    with path.open("w", encoding="utf-8") as fh:
        for item in items:
            fh.write(json.dumps(item_to_json(item), ensure_ascii=False) + "\n")
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
                items.append(item_from_json(json.loads(line)))
            except (json.JSONDecodeError, TypeError, ValueError) as exc:
                raise ValueError(f"{path}:{lineno}: not a prompt item: {exc}") from exc
    return items
