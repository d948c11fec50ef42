"""A Chromium accessibility tree (CDP ``Accessibility.getFullAXTree``) as WebArena tree text.

One shown node a line, indented by one tab per shown ancestor::

    [3] textbox 'From:' focused: True required: False

The line is ``[ID] role repr(name)`` and then ``key: value`` for each property, in Chromium's
order, with Python's spelling of values (``True``, ``0``, ``menu``), as WebArena's
``parse_accessibility_tree`` writes it. Choices, matched against the shared MiniWoB++ recordings:

* Not shown (their children move up one level): ignored nodes, the ``RootWebArea``, the roles
  ``none``, ``InlineTextBox`` and ``LineBreak``, a ``generic`` node without a name, and a node
  without a name field (WebArena drops those too). Empty ``paragraph``, ``LabelText``,
  ``listitem`` and ``StaticText ' '`` lines are kept, as in the shared recordings.
* Properties ``focusable``, ``editable``, ``readonly``, ``level``, ``settable``, ``multiline``
  and ``invalid`` are left out (WebArena's ``IGNORED_ACTREE_PROPERTIES``); a property without a
  value is left out.
* Ids: Chromium's own node ids are the renderer's DOM node ids, which depend on everything the
  renderer did before (other pages, earlier episodes), so a resumed run would not reproduce them.
  ``EpisodeIds`` numbers DOM nodes 1, 2, ... in the order an episode first shows them, which
  depends only on the episode's pages; the same element keeps its id for the whole episode.
  Nodes Chromium makes up without a DOM node (``::before`` images, list markers) get -1, -2, ...
  in tree order, per snapshot (``tasks.web.tree_diff`` skips negative ids).
* ``replacements`` rewrite text in names and property values, e.g. the local path of the task
  pages, so trees do not depend on where a package is installed.
* Nodes whose DOM node is in ``exclude`` are left out with their whole subtree (the MiniWoB++
  reward display and its countdown).

Pure: no browser; the node list is the JSON the browser returned.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = [
    "IGNORED_PROPERTIES",
    "AxSnapshot",
    "EpisodeIds",
    "TreeLine",
    "serialise_ax_tree",
]

#: CDP nodes are JSON objects; only the keys read here are relied on.
CdpNode = Mapping[str, Any]

HIDDEN_ROLES = frozenset({"RootWebArea", "none", "InlineTextBox", "LineBreak"})
IGNORED_PROPERTIES = frozenset(
    {"focusable", "editable", "readonly", "level", "settable", "multiline", "invalid"}
)


@dataclass(frozen=True)
class TreeLine:
    """One shown node."""

    node_id: int  # the id in the text; negative for nodes without a DOM node
    backend_id: int | None  # Chromium's backendDOMNodeId, the handle to act on the element
    role: str
    depth: int
    text: str  # the line without its indentation, e.g. "[3] button 'OK'"

    def render(self) -> str:
        """The line indented by ``depth`` tabs."""
        return "\t" * self.depth + self.text


@dataclass(frozen=True)
class AxSnapshot:
    """A serialised tree: its lines, and the text that goes into a transition."""

    lines: tuple[TreeLine, ...]

    @property
    def text(self) -> str:
        """Every rendered line, newline-separated."""
        return "\n".join(line.render() for line in self.lines)

    def line(self, node_id: int) -> TreeLine | None:
        """The line with this id, or None."""
        return next((line for line in self.lines if line.node_id == node_id), None)


class EpisodeIds:
    """Numbers DOM nodes 1, 2, ... in the order an episode first shows them (module docstring)."""

    def __init__(self) -> None:
        self._by_backend: dict[int, int] = {}

    def id_for(self, backend_id: int) -> int:
        """The node's episode id: its own if seen before, else the next number."""
        node_id = self._by_backend.get(backend_id)
        if node_id is None:
            node_id = len(self._by_backend) + 1
            self._by_backend[backend_id] = node_id
        return node_id

    def __len__(self) -> int:
        return len(self._by_backend)


def _rewrite(text: str, replacements: Sequence[tuple[str, str]]) -> str:
    for old, new in replacements:
        text = text.replace(old, new)
    return text


def _value_text(value: Any, replacements: Sequence[tuple[str, str]]) -> str:
    return _rewrite(value if isinstance(value, str) else str(value), replacements)


def node_label(node: CdpNode, replacements: Sequence[tuple[str, str]] = ()) -> str | None:
    """``role repr(name) props...`` of a shown node, or None where the node is not shown."""
    if node.get("ignored"):
        return None
    role = (node.get("role") or {}).get("value")
    name_field = node.get("name")
    if not isinstance(role, str) or role in HIDDEN_ROLES or not isinstance(name_field, Mapping):
        return None
    name = _value_text(name_field.get("value", ""), replacements)
    if role == "generic" and not name.strip():
        return None
    parts = [f"{role} {name!r}"]
    for prop in node.get("properties") or ():
        key = prop.get("name")
        value = (prop.get("value") or {}).get("value")
        if not isinstance(key, str) or key in IGNORED_PROPERTIES or value is None:
            continue
        parts.append(f"{key}: {_value_text(value, replacements)}")
    return " ".join(parts)


def _backend_id(node: CdpNode) -> int | None:
    value = node.get("backendDOMNodeId")
    return value if isinstance(value, int) and value > 0 else None


def serialise_ax_tree(
    nodes: Sequence[CdpNode],
    ids: EpisodeIds,
    *,
    exclude: Iterable[int] = (),
    replacements: Sequence[tuple[str, str]] = (),
) -> AxSnapshot:
    """The tree under the first node (the document), depth first in child order.

    ``ValueError`` when ``nodes`` is empty or a node has no ``nodeId``."""
    if not nodes:
        raise ValueError("accessibility tree: no nodes")
    by_id: dict[str, CdpNode] = {}
    for node in nodes:
        node_id = node.get("nodeId")
        if not isinstance(node_id, str):
            raise ValueError(f"accessibility tree: a node without a string nodeId: {node!r:.200}")
        by_id.setdefault(node_id, node)  # Chromium repeats a few nodes; keep the first
    excluded = frozenset(exclude)
    lines: list[TreeLine] = []
    made_up = 0
    seen: set[str] = set()
    stack: list[tuple[CdpNode, int]] = [(nodes[0], 0)]
    while stack:
        node, depth = stack.pop()
        seen.add(node["nodeId"])
        backend = _backend_id(node)
        if backend is not None and backend in excluded:
            continue
        label = node_label(node, replacements)
        child_depth = depth
        if label is not None:
            if backend is None:
                made_up += 1
                shown_id = -made_up
            else:
                shown_id = ids.id_for(backend)
            role = str(node["role"]["value"])
            lines.append(TreeLine(shown_id, backend, role, depth, f"[{shown_id}] {label}"))
            child_depth = depth + 1
        children = [by_id[c] for c in node.get("childIds") or () if c in by_id and c not in seen]
        stack.extend((child, child_depth) for child in reversed(children))
    return AxSnapshot(tuple(lines))
