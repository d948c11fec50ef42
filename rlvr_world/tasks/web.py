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

``load_web_transitions`` reads both files' JSON Lines formats (and the collector's, which is the
same). ``build_web_prompt`` writes the paper's state-prediction prompt in our own words (the slots,
action vocabulary, format rules and example of the authors' ``rlvr_world_model_prompt.json``), or a
compact variant with the same slots for small models.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlvr_world.tasks.jsonl import iter_records

logger = logging.getLogger(__name__)

__all__ = [
    "PROMPT_STYLES",
    "TreeDiff",
    "WebTransition",
    "build_web_prompt",
    "format_action",
    "load_web_sources",
    "load_web_transitions",
    "render_diff",
    "tree_diff",
    "tree_items",
    "web_transition_files",
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
        """Whether no section changed."""
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
    for record in iter_records(path):
        yield web_transition_from_record(record)


def web_transition_files(path: str | Path) -> list[Path]:
    """The transition files a path stands for: a file itself; a collector's output directory
    (it has ``transitions.jsonl``): that file; another directory (``data/web``): its ``*.jsonl``
    files, sorted. ``FileNotFoundError`` when there is none."""
    path = Path(path)
    if path.is_file():
        return [path]
    if (path / "transitions.jsonl").is_file():
        return [path / "transitions.jsonl"]
    files = sorted(path.glob("*.jsonl")) if path.is_dir() else []
    if not files:
        raise FileNotFoundError(f"{path}: no web transition file (*.jsonl) there")
    return files


def load_web_sources(paths: Iterable[str | Path]) -> list[WebTransition]:
    """Every transition of every file the paths stand for (``web_transition_files``), in order."""
    return [t for p in paths for f in web_transition_files(p) for t in load_web_transitions(f)]


#: The paper's prompt (``rlvr_world_model_prompt.json`` of the authors' web agent), in our words:
#: the same slots in the same order (URL, objective, previous action, current observation,
#: current action), the action vocabulary, the format rules and a three-section example.
PAPER_INSTRUCTION = """\
You are a world model of web pages. Given the page a user is on and the action they take next, \
you predict how the page changes.

You get:
- the user's objective: the task the actions work towards;
- the current page as an accessibility tree: one element a line, indented under its parent, \
written [ID] role 'name' followed by attributes (key: value);
- the URL of the current page;
- the previous actions, oldest first;
- the current action, performed on the current page.

Actions are written as:
click [id]: click the element with this id.
type [id] [text] [1]: type the text into the element, then press Enter; [0] instead of [1]: \
no Enter.
hover [id]: move the mouse over the element.
press [key_comb]: press a key combination, such as Ctrl+v.
scroll [down] or scroll [up]: scroll the page.
new_tab, tab_focus [tab_index], close_tab: open a tab, switch to a tab, close the current tab.
goto [url], go_back, go_forward: navigate.
stop [answer]: end the task, with the answer where one is asked for.

Predict the next state directly from the current action, in three sections separated by an \
empty line:
New items: elements that appear, with new ids.
Deleted items: elements that disappear.
Updated items: elements that keep their id but change, as they read after the action.
Write each item as its tree line without the indentation: [ID] role 'name' attributes \
(for example [1022] gridcell '23' required: False). Write None under a section with no items.

Example answer:
New items:
[1273] StaticText 'Vortex Running Shoes'
[1272] button 'Search'

Deleted items:
None

Updated items:
[1220] textbox '' focused: True required: False
"""

#: The same task in a few lines, for small models with short contexts.
COMPACT_INSTRUCTION = (
    "Predict how the web page changes after the action. Answer with the sections "
    "'New items:', 'Deleted items:' and 'Updated items:' separated by a blank line, one tree "
    "line per item without indentation, and None under a section with no items.\n"
)
PROMPT_STYLES = ("paper", "compact")


def build_web_prompt(transition: WebTransition, style: str = "paper") -> str:
    """The state-prediction prompt: ``paper`` (the paper's slots and rules) or ``compact``.

    Both give the URL, objective, previous actions (``None`` when there are none), the current
    tree and the current action, and end by asking for the answer in the three-section format.
    ``ValueError`` for another style."""
    previous = "\n".join(transition.previous_actions) if transition.previous_actions else "None"
    if style == "paper":
        return (
            f"{PAPER_INSTRUCTION}\n"
            f"URL: {transition.url}\n"
            f"OBJECTIVE: {transition.objective}\n"
            f"PREVIOUS ACTION:\n{previous}\n"
            f"CURRENT OBSERVATION:\n{transition.obs_before}\n"
            f"CURRENT ACTION: {transition.action}\n\n"
            "Give the prediction directly, in the format of the next state prediction.\n"
        )
    if style == "compact":
        return (
            f"{COMPACT_INSTRUCTION}"
            f"URL: {transition.url}\n"
            f"OBJECTIVE: {transition.objective}\n"
            f"PREVIOUS ACTIONS:\n{previous}\n"
            f"OBSERVATION:\n{transition.obs_before}\n"
            f"ACTION: {transition.action}\n"
        )
    raise ValueError(f"prompt style: expected one of {', '.join(PROMPT_STYLES)}, got {style!r}")
