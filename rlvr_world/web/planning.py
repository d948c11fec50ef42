"""Choosing a web action with or without a world model: candidates and a rule-based value.

Model-predictive control on a MiniWoB++ page (``rlvr_world.apps.mpc.web``) asks, at each step,
which of the page's actions brings it closer to the task's utterance. This module answers with
rules, no learning:

* **Goal terms** (``goal_terms``): the quoted phrases of the utterance, then its other words that
  are not instruction words (``INSTRUCTION_WORDS``: "click", "select", "the", "button" ...), each
  once, in the order the utterance gives them. A term earlier in the utterance weighs more
  (``1 / (1 + rank)``): "Select X and click Submit" ranks X before Submit, so a planner checks X
  first. Terms that an executed action already reached are dropped from the goal (``remaining``).
* **Candidates** (``candidates``): a click on every line of the tree that stands for an element
  with an interactive role (``rlvr_world.web.policy.INTERACTIVE_ROLES``; every element when there
  is none), and, for text fields, typing each quoted phrase of the utterance (or, without quotes,
  each goal term). Elements already acted on are left out. At most ``limit``, the best by the
  greedy value first, then in tree order.
* **Greedy value** (``greedy_value``, no world model): the weight of the goal terms found in the
  text of the element acted on (its role, its own name, its descendants' and, for an unnamed
  element, the next line's when it is text: a checkbox's label) and in the typed text.
* **Predicted value** (``predicted_value``, with a world model): the weight of the goal terms
  found in the items the model predicts as new or updated after the action (for an updated item,
  also the text of its descendants in the current tree). A prediction of no change is worth 0.
  The planner ranks candidates by predicted value and breaks ties by the greedy value, so a model
  that predicts nothing plans exactly as greedy does: what a world model adds is measured as the
  difference from greedy.

The paper's web MPC scores predictions with an LLM judge; this machine has none, and a rule is
what a learned value would be compared with anyway. Pure code: no browser, no model.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Sequence
from dataclasses import dataclass

from rlvr_world.rewards.web import parse_sections_strict
from rlvr_world.tasks.web import EMPTY_SECTION
from rlvr_world.web.axtree import AxSnapshot, TreeLine
from rlvr_world.web.policy import INTERACTIVE_ROLES, TEXT_ROLES, PlannedAction

__all__ = [
    "INSTRUCTION_WORDS",
    "Goal",
    "ScoredAction",
    "candidates",
    "element_text",
    "goal_terms",
    "greedy_value",
    "predicted_value",
    "rank",
]

#: Words of MiniWoB++ utterances that say what to do, not what to act on.
INSTRUCTION_WORDS = frozenset(
    """a an the and or then to into on in of for with from by at as is it its this that click
    select choose enter type press button buttons link field fields text textbox input box
    widget find switch between tabs tab section expand below above all both only item items
    option options checkbox checkboxes radio please your you""".split()  # noqa: SIM905 (a word list)
)
#: Lines that can label the unnamed element before them.
LABEL_ROLES = frozenset({"StaticText", "LabelText"})
_QUOTED = re.compile(r"\"([^\"]+)\"|“([^”]+)”")
_WORD = re.compile(r"[A-Za-z0-9#][A-Za-z0-9#@._-]*")
_LINE_NAME = re.compile(r"^\[-?\d+\]\s+\S+\s+'(.*?)'")
_ITEM_ID = re.compile(r"^\[(-?\d+)\]")


def _words(text: str) -> list[str]:
    return [w.strip("._-").lower() for w in _WORD.findall(text) if w.strip("._-")]


@dataclass(frozen=True)
class Goal:
    """Goal terms in the utterance's order (lower case), and the phrases to type."""

    terms: tuple[str, ...]
    phrases: tuple[str, ...]

    def weight(self, term: str) -> float:
        """``1 / (1 + rank)`` of ``term`` in the goal; ``ValueError`` for a term not in it."""
        return 1.0 / (1.0 + self.terms.index(term))

    def remaining(self, reached: Collection[str]) -> Goal:
        """The goal without the terms already reached (weights re-ranked)."""
        return Goal(tuple(t for t in self.terms if t not in reached), self.phrases)

    def found_in(self, text: str) -> list[str]:
        """The goal terms that occur in ``text`` (as words; a phrase as a substring)."""
        lowered = text.lower()
        words = set(_words(text))
        return [t for t in self.terms if (t in words) or (" " in t and t in lowered)]

    def value(self, text: str) -> float:
        """The summed weights of the goal terms ``text`` contains."""
        return sum(self.weight(t) for t in self.found_in(text))


def goal_terms(utterance: str) -> Goal:
    """The goal of an utterance (module docstring)."""
    phrases = [a or b for a, b in _QUOTED.findall(utterance)]
    terms: list[str] = []
    for phrase in phrases:
        term = phrase.strip().lower()
        if term and term not in terms:
            terms.append(term)
    rest = _QUOTED.sub(" ", utterance)
    for word in _words(rest):
        if word not in INSTRUCTION_WORDS and word not in terms:
            terms.append(word)
    return Goal(tuple(terms), tuple(p.strip() for p in phrases if p.strip()))


def _name(line_text: str) -> str:
    match = _LINE_NAME.match(line_text)
    return match.group(1) if match else ""


def element_text(tree: AxSnapshot, node_id: int) -> str:
    """The element's role, the names of its line and its descendants; for an element with an
    empty name, also the next line at its depth or above when it is text (the label that follows a
    checkbox)."""
    lines = tree.lines
    at = next((i for i, line in enumerate(lines) if line.node_id == node_id), None)
    if at is None:
        return ""
    own = lines[at]
    names = [own.role, _name(own.text)]
    j = at + 1
    while j < len(lines) and lines[j].depth > own.depth:
        names.append(_name(lines[j].text))
        j += 1
    if not any(names[1:]) and j < len(lines) and lines[j].role in LABEL_ROLES:
        names.append(_name(lines[j].text))
    return " ".join(n for n in names if n)


def _actable(tree: AxSnapshot) -> list[TreeLine]:
    lines = [line for line in tree.lines if line.backend_id is not None]
    interactive = [line for line in lines if line.role in INTERACTIVE_ROLES]
    return interactive or lines


def greedy_value(tree: AxSnapshot, action: PlannedAction, goal: Goal) -> float:
    """The greedy value of ``action`` (module docstring)."""
    return goal.value(element_text(tree, action.node_id) + " " + action.text)


def candidates(
    tree: AxSnapshot, goal: Goal, *, acted_on: Collection[int] = (), limit: int = 8
) -> list[PlannedAction]:
    """The actions to consider (module docstring); empty when nothing is left to act on."""
    out: list[PlannedAction] = []
    texts = goal.phrases or tuple(goal.terms[:3])
    for line in _actable(tree):
        if line.node_id in acted_on:
            continue
        out.append(PlannedAction("click", line.node_id))
        if line.role in TEXT_ROLES:
            out.extend(PlannedAction("type", line.node_id, text) for text in texts)
    order = sorted(
        range(len(out)),
        key=lambda i: (-greedy_value(tree, out[i], goal), out[i].kind == "type", i),
    )
    return [out[i] for i in order[:limit]]


def predicted_value(prediction: str, tree: AxSnapshot, goal: Goal) -> float:
    """The value of a predicted change (module docstring); 0 for "None" or an unreadable one."""
    sections, found = parse_sections_strict(prediction)
    if not found:
        return 0.0
    texts: list[str] = []
    for section in ("New items", "Updated items"):
        for item in sections[section]:
            if item == EMPTY_SECTION:
                continue
            texts.append(_name(item) or item)
            match = _ITEM_ID.match(item)
            if section == "Updated items" and match is not None:
                texts.append(element_text(tree, int(match.group(1))))
    return goal.value(" ".join(texts))


@dataclass(frozen=True)
class ScoredAction:
    """A candidate with its values (``predicted`` is None without a world model)."""

    action: PlannedAction
    greedy: float
    predicted: float | None = None
    prediction: str | None = None


def rank(scored: Sequence[ScoredAction]) -> list[ScoredAction]:
    """Best first: by predicted value (when there is one), then greedy value, clicks before
    typing, then the candidates' order."""
    order = sorted(
        range(len(scored)),
        key=lambda i: (
            -(scored[i].predicted or 0.0),
            -scored[i].greedy,
            scored[i].action.kind == "type",
            i,
        ),
    )
    return [scored[i] for i in order]
