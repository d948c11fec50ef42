"""CDP accessibility tree -> WebArena tree text: what is shown, ids, properties, exclusions."""

from __future__ import annotations

from typing import Any

import pytest

from rlvr_world.tasks.web import tree_diff
from rlvr_world.web.axtree import EpisodeIds, node_label, serialise_ax_tree


def node(
    node_id: str,
    role: str,
    name: str | None = "",
    *,
    backend: int | None = None,
    children: tuple[str, ...] = (),
    props: tuple[tuple[str, Any], ...] = (),
    ignored: bool = False,
) -> dict[str, Any]:
    out: dict[str, Any] = {
        "nodeId": node_id,
        "ignored": ignored,
        "role": {"type": "role", "value": role},
        "childIds": list(children),
        "properties": [{"name": k, "value": {"type": "x", "value": v}} for k, v in props],
    }
    if name is not None:
        out["name"] = {"type": "computedString", "value": name}
    if backend is not None:
        out["backendDOMNodeId"] = backend
    return out


def page_nodes(extra_first: bool = False) -> list[dict[str, Any]]:
    """A MiniWoB-like page: root, an ignored wrapper, a nameless div holding the task, the HUD."""
    task_children = ("4", "5", "6", "7", "9", "10", "15")
    if extra_first:
        task_children = ("30", *task_children)
    nodes = [
        node("1", "RootWebArea", "Task", backend=1, children=("2",), props=(("focused", True),)),
        node("2", "none", None, backend=2, children=("3", "20"), ignored=True),
        node("3", "generic", "", backend=3, children=task_children),
        node("4", "StaticText", 'Click "ok".', backend=4, children=("-100",)),
        node("-100", "InlineTextBox", "Click"),
        node(
            "5",
            "button",
            "it's",
            backend=50,
            children=("11",),
            props=(("focusable", True), ("invalid", "false"), ("focused", True)),
        ),
        node("11", "StaticText", "it's", backend=11),
        node(
            "6",
            "textbox",
            "",
            backend=6,
            children=("12",),
            props=(("editable", "plaintext"), ("settable", True), ("required", False)),
        ),
        node("12", "generic", "", backend=12, children=("13",)),
        node("13", "StaticText", "typed", backend=13),
        node("7", "checkbox", "a", backend=7, props=(("checked", "false"), ("valuemin", 0))),
        node("9", "LineBreak", "\n", backend=9),
        node(
            "10",
            "link",
            "Tab",
            backend=10,
            children=("-200", "14"),
            props=(("url", "file:///pkg/html/miniwob/x.html#t"), ("controls", "t1")),
        ),
        node("-200", "image", ""),
        node("14", "generic", "named div", backend=14),
        node("15", "paragraph", None, backend=15, children=("16",)),
        node("16", "StaticText", " ", backend=16),
        node("20", "generic", "", backend=99, children=("21",)),
        node("21", "StaticText", "Time left: 9", backend=21),
    ]
    # a relation without a value (Chromium's labelledby) is left out
    nodes[12]["properties"].append({"name": "labelledby", "value": {"type": "nodeList"}})
    if extra_first:
        nodes.append(node("30", "button", "New", backend=77))
    return nodes


EXPECTED = "\n".join(
    [
        "[1] StaticText 'Click \"ok\".'",
        '[2] button "it\'s" focused: True',
        '\t[3] StaticText "it\'s"',
        "[4] textbox '' required: False",
        "\t[5] StaticText 'typed'",
        "[6] checkbox 'a' checked: false valuemin: 0",
        "[7] link 'Tab' url: file:///miniwob/html/miniwob/x.html#t controls: t1",
        "\t[-1] image ''",
        "\t[8] generic 'named div'",
        "[9] StaticText ' '",
    ]
)
REWRITE = (("file:///pkg/html", "file:///miniwob/html"),)


def test_serialise_shows_what_webarena_shows_with_episode_ids() -> None:
    tree = serialise_ax_tree(page_nodes(), EpisodeIds(), exclude={99}, replacements=REWRITE)
    assert tree.text == EXPECTED
    button = tree.line(2)
    assert button is not None and button.backend_id == 50 and button.role == "button"
    image = tree.line(-1)
    assert image is not None and image.backend_id is None


def test_excluded_subtree_and_no_rewrite() -> None:
    tree = serialise_ax_tree(page_nodes(), EpisodeIds())
    assert tree.text.endswith("[9] StaticText ' '\n[10] StaticText 'Time left: 9'")
    assert "file:///pkg/html/miniwob/x.html#t" in tree.text


def test_ids_stay_with_their_element_across_snapshots() -> None:
    ids = EpisodeIds()
    before = serialise_ax_tree(page_nodes(), ids, exclude={99})
    after = serialise_ax_tree(page_nodes(extra_first=True), ids, exclude={99})
    assert len(ids) == 10
    # the new button is shown first but numbered after everything the episode showed before
    assert after.text.splitlines()[0] == "[10] button 'New'"
    assert after.text.splitlines()[1:] == before.text.splitlines()
    diff = tree_diff(before.text, after.text)
    assert diff.new == ("[10] button 'New'",) and not diff.deleted and not diff.updated


def test_repeated_node_ids_and_bad_input() -> None:
    nodes = page_nodes()
    nodes.append(node("4", "StaticText", "a repeat", backend=4))
    assert (
        serialise_ax_tree(nodes, EpisodeIds(), exclude={99}).text
        == serialise_ax_tree(page_nodes(), EpisodeIds(), exclude={99}).text
    )
    with pytest.raises(ValueError, match="no nodes"):
        serialise_ax_tree([], EpisodeIds())
    with pytest.raises(ValueError, match="nodeId"):
        serialise_ax_tree([{"role": {"value": "button"}}], EpisodeIds())


def test_node_label_rules() -> None:
    assert node_label(node("1", "button", "OK", props=(("disabled", True),))) == (
        "button 'OK' disabled: True"
    )
    assert node_label(node("1", "generic", "")) is None
    assert node_label(node("1", "generic", "x")) == "generic 'x'"
    assert node_label(node("1", "button", "OK", ignored=True)) is None
    assert node_label(node("1", "button", None)) is None  # no name field: WebArena drops it
    assert node_label(node("1", "paragraph", "")) == "paragraph ''"
    assert node_label(node("1", "spinbutton", "", props=(("valuetext", -1),))) == (
        "spinbutton '' valuetext: -1"
    )
    assert node_label(node("1", "StaticText", "a\nb")) == "StaticText 'a\\nb'"  # one line
