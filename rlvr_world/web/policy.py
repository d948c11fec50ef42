"""The collector's exploration policy: a seeded random choice of the next browser action.

An action acts on one line of the current tree (``axtree.TreeLine``) that stands for a DOM node:
``click [ID]``, or ``type [ID] [text] [0|1]`` (WebArena's action text; ``[1]`` presses Enter after
typing). Interactive roles (buttons, links, form fields, tabs, options, menu items ...) are drawn
four times as often as the other lines; a field that takes text is typed into with probability
``type_probability``. Typed text is a word of the objective (so the page's own answers get
typed sometimes) or, one time in four, a number from 0 to 99.

The policy does not know whether the browser can act on the element (an option of a closed
``<select>`` has no box to click): the caller passes the ids that failed in ``exclude`` and asks
again. Deterministic for the state of ``rng``; no I/O.
"""

from __future__ import annotations

import random
import re
from collections.abc import Collection
from dataclasses import dataclass
from typing import Literal

from rlvr_world.web.axtree import AxSnapshot, TreeLine

__all__ = ["INTERACTIVE_ROLES", "TEXT_ROLES", "PlannedAction", "choose_action", "typed_text"]

INTERACTIVE_ROLES = frozenset(
    {
        "button",
        "link",
        "checkbox",
        "radio",
        "tab",
        "option",
        "menuitem",
        "menuitemcheckbox",
        "menuitemradio",
        "textbox",
        "searchbox",
        "combobox",
        "spinbutton",
        "slider",
        "switch",
        "treeitem",
        "gridcell",
    }
)
TEXT_ROLES = frozenset({"textbox", "searchbox", "spinbutton", "combobox"})
INTERACTIVE_WEIGHT = 4
#: Chance that typed text is a number rather than a word of the objective (one time in four).
NUMBER_PROBABILITY = 0.25
_WORD = re.compile(r"[A-Za-z0-9][A-Za-z0-9@.,:/-]*")


@dataclass(frozen=True)
class PlannedAction:
    """One action on the element with id ``node_id`` of the current tree."""

    kind: Literal["click", "type"]
    node_id: int
    text: str = ""
    enter: bool = False

    def render(self) -> str:
        """WebArena's action text: ``click [3]``, ``type [3] [Lima] [0]``."""
        if self.kind == "click":
            return f"click [{self.node_id}]"
        return f"type [{self.node_id}] [{self.text}] [{int(self.enter)}]"


def typed_text(objective: str, rng: random.Random) -> str:
    """A word of the objective (trailing punctuation dropped), or a number (module docstring)."""
    words: list[str] = [w.rstrip(".,:") for w in _WORD.findall(objective)]
    words = [w for w in words if w]
    if not words or rng.random() < NUMBER_PROBABILITY:
        return str(rng.randrange(100))
    return rng.choice(words)


def choose_action(
    snapshot: AxSnapshot,
    objective: str,
    rng: random.Random,
    *,
    exclude: Collection[int] = (),
    type_probability: float = 0.3,
    enter_probability: float = 0.2,
) -> PlannedAction | None:
    """The next action, or None when no line is left to act on (module docstring)."""
    candidates: list[TreeLine] = [
        line
        for line in snapshot.lines
        if line.backend_id is not None and line.node_id not in exclude
    ]
    if not candidates:
        return None
    weights = [INTERACTIVE_WEIGHT if c.role in INTERACTIVE_ROLES else 1 for c in candidates]
    target = rng.choices(candidates, weights=weights, k=1)[0]
    if target.role in TEXT_ROLES and rng.random() < type_probability:
        text = typed_text(objective, rng)
        return PlannedAction("type", target.node_id, text, rng.random() < enter_probability)
    return PlannedAction("click", target.node_id)
