"""Web-page state prediction on accessibility trees (docs/reference.md#web-diffs-and-reward).

An observation is WebArena accessibility-tree text, one node a line, indented by depth::

    [1220] textbox 'Search' focused: True required: False

The target of a transition is the diff between the trees before and after the action, in three
sections (``render_diff``)::

    New items:
    <lines whose [ID] is only in the tree after> | None

    Deleted items:
    <lines whose [ID] is only in the tree before> | None

    Updated items:
    <lines (as after) whose [ID] is in both trees but whose text changed> | None

Items are stripped lines, matched by their ``[ID]``; lines without an id (the
``Tab 0 (current): ...`` header, WebArena's id-less ``StaticText``) are not items. Negative ids
(``[-1000000019] image ''``: nodes Chromium's accessibility tree numbers itself, renumbered from
one render to the next, so not predictable and not actionable) are skipped unless
``include_negative_ids=True``. New and Updated follow the order of the tree after, Deleted the order
of the tree before; a repeated id keeps its first line. With the default this reproduces every
recorded ``diff`` of the shared WebArena (92/92) and MiniWoB++ (1478/1478) files; counting negative
ids changes 12 MiniWoB++ diffs (``click-menu-2`` images), see the tests.

``load_web_transitions`` reads both files' JSON Lines formats; ``build_web_prompt`` is this
project's prompt (the paper's ``rlvr_world_model_prompt.json`` is not available here; it has the
same slots: objective, URL, previous actions, current tree, action).
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

__all__ = [
    "TreeDiff",
    "WebTransition",
    "build_web_prompt",
    "format_action",
    "load_web_transitions",
    "render_diff",
    "tree_diff",
    "tree_items",
    "web_transition_from_record",
]

SECTION_TITLES = ("New items", "Deleted items", "Updated items")
EMPTY_SECTION = "None"
_ITEM_ID = re.compile(r"^\[(-?\d+)\]")


@dataclass(frozen=True)
class TreeDiff:
    """Item lines per section (empty tuple = the section is unchanged)."""

    new: tuple[str, ...] = ()
    deleted: tuple[str, ...] = ()
    updated: tuple[str, ...] = ()

    @property
    def empty(self) -> bool:
        return not (self.new or self.deleted or self.updated)


@dataclass(frozen=True)
class WebTransition:
    """One recorded step: the page before and after an action."""

    source: str
    objective: str
    url: str
    previous_actions: tuple[str, ...]
    action: str
    obs_before: str
    obs_after: str
    recorded_diff: TreeDiff | None

    def diff(self) -> TreeDiff:
        """The target, ``tree_diff(obs_before, obs_after)``."""
        return tree_diff(self.obs_before, self.obs_after)


def tree_items(tree: str, *, include_negative_ids: bool = False) -> dict[str, str]:
    """``id -> stripped line`` for every line that starts with ``[ID]``, in tree order."""
    items: dict[str, str] = {}
    for raw in tree.split("\n"):
        line = raw.strip()
        match = _ITEM_ID.match(line)
        if match is None:
            continue
        item_id = match.group(1)
        if item_id.startswith("-") and not include_negative_ids:
            continue
        if item_id in items:
            logger.debug("tree: repeated id [%s], keeping its first line", item_id)
            continue
        items[item_id] = line
    return items


def tree_diff(before: str, after: str, *, include_negative_ids: bool = False) -> TreeDiff:
    """New, deleted and updated items between two accessibility trees (module docstring)."""
    old = tree_items(before, include_negative_ids=include_negative_ids)
    new = tree_items(after, include_negative_ids=include_negative_ids)
    return TreeDiff(
        new=tuple(line for i, line in new.items() if i not in old),
        deleted=tuple(line for i, line in old.items() if i not in new),
        updated=tuple(line for i, line in new.items() if i in old and old[i] != line),
    )


def render_diff(diff: TreeDiff) -> str:
    """The three-section target text; an empty section is the single line ``None``."""
    sections = (diff.new, diff.deleted, diff.updated)
    blocks = [
        f"{title}:\n" + ("\n".join(lines) if lines else EMPTY_SECTION)
        for title, lines in zip(SECTION_TITLES, sections, strict=True)
    ]
    return "\n\n".join(blocks)


def format_action(action: Any) -> str:
    """An action as text: strings as they are; WebArena ``{function, kwargs}`` dicts as
    ``function({json kwargs})``, the form of the records' ``previous_actions``."""
    if isinstance(action, str):
        return action
    if isinstance(action, Mapping) and isinstance(action.get("function"), str):
        kwargs = action.get("kwargs") or {}
        return f"{action['function']}({json.dumps(kwargs, ensure_ascii=False)})"
    raise ValueError(f"action: expected a string or a {{function, kwargs}} object, got {action!r}")


def _recorded_diff(value: Any) -> TreeDiff | None:
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise ValueError("web transition: diff must be an object {new, deleted, updated}")
    parts: list[tuple[str, ...]] = []
    for key in ("new", "deleted", "updated"):
        lines = value.get(key, [])
        if not isinstance(lines, list) or not all(isinstance(x, str) for x in lines):
            raise ValueError(f"web transition: diff.{key} must be a list of strings")
        parts.append(tuple(lines))
    return TreeDiff(*parts)


def web_transition_from_record(record: Mapping[str, Any]) -> WebTransition:
    """A ``WebTransition`` from a WebArena or MiniWoB++ record; ``ValueError`` names the field."""
    for key in ("objective", "obs_before", "obs_after", "action"):
        if key not in record:
            raise ValueError(f"web transition: missing field {key!r}")
    for key in ("objective", "obs_before", "obs_after"):
        if not isinstance(record[key], str):
            raise ValueError(f"web transition: {key} must be a string")
    previous = record.get("previous_actions") or []
    if not isinstance(previous, list):
        raise ValueError("web transition: previous_actions must be a list")
    return WebTransition(
        source=str(record.get("source", "")),
        objective=record["objective"],
        url=str(record.get("url", "")),
        previous_actions=tuple(format_action(a) for a in previous),
        action=format_action(record["action"]),
        obs_before=record["obs_before"],
        obs_after=record["obs_after"],
        recorded_diff=_recorded_diff(record.get("diff")),
    )


def load_web_transitions(path: str | Path) -> Iterator[WebTransition]:
    """Transitions of a JSON Lines file (``webarena_transitions.jsonl``, ``miniwob_...``)."""
    path = Path(path)
    with path.open(encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ValueError(f"{path}:{lineno}: not JSON: {exc.msg}") from exc
            if not isinstance(record, dict):
                raise ValueError(f"{path}:{lineno}: a record must be a JSON object")
            yield web_transition_from_record(record)


WEB_INSTRUCTION = (
    "You are a world model of web pages. Given a web page as an accessibility tree (one element "
    "a line: [ID] role 'name' attributes) and an action, predict how the page changes after "
    "the action.\n"
    "Answer with three sections separated by a blank line:\n"
    "New items: the lines of elements that appear (with new IDs)\n"
    "Deleted items: the lines of elements that disappear\n"
    "Updated items: the new lines of elements that keep their ID but change\n"
    "Write one element line per line, exactly as in the tree without indentation, and write "
    "None for a section with no items.\n"
)


def build_web_prompt(transition: WebTransition) -> str:
    """This project's prompt: instruction, objective, URL, previous actions, tree, action."""
    previous = "\n".join(transition.previous_actions) if transition.previous_actions else "None"
    return (
        f"{WEB_INSTRUCTION}\n"
        f"OBJECTIVE: {transition.objective}\n"
        f"URL: {transition.url}\n"
        f"PREVIOUS ACTIONS:\n{previous}\n"
        f"OBSERVATION:\n{transition.obs_before}\n"
        f"CURRENT ACTION: {transition.action}\n"
    )
