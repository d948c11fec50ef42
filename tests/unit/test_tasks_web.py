"""Web task: accessibility-tree diffs, their three-section text, records and the prompt."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rlvr_world.rewards.web import score_web
from rlvr_world.tasks.web import (
    TreeDiff,
    WebTransition,
    build_web_prompt,
    format_action,
    load_web_sources,
    load_web_transitions,
    render_diff,
    tree_diff,
    tree_items,
    web_transition_files,
    web_transition_from_record,
)
from tests.helpers.shared import shared_file

BEFORE = """Tab 0 (current): Shop

[1] RootWebArea 'Shop' focused: True
\t[2] textbox 'Search' required: False
\t[3] button 'Go'
\t\tStaticText 'no id'
\t[4] link 'Old'
\t[-1000000005] image ''"""

AFTER = """Tab 0 (current): Shop

[1] RootWebArea 'Shop' focused: True
\t[2] textbox 'Search' focused: True required: False
\t[3] button 'Go'
\t[7] StaticText 'Result'
\t[-1000000009] image ''"""


def test_tree_items_take_id_lines_only() -> None:
    items = tree_items(BEFORE)
    assert list(items) == ["1", "2", "3", "4"]
    assert items["2"] == "[2] textbox 'Search' required: False"  # stripped
    assert "-1000000005" in tree_items(BEFORE, include_negative_ids=True)


def test_tree_diff_new_deleted_updated() -> None:
    diff = tree_diff(BEFORE, AFTER)
    assert diff == TreeDiff(
        new=("[7] StaticText 'Result'",),
        deleted=("[4] link 'Old'",),
        updated=("[2] textbox 'Search' focused: True required: False",),
    )
    wide = tree_diff(BEFORE, AFTER, include_negative_ids=True)
    assert wide.new[-1] == "[-1000000009] image ''"
    assert wide.deleted[-1] == "[-1000000005] image ''"
    assert tree_diff(BEFORE, BEFORE).empty


def test_render_diff_sections_and_none() -> None:
    text = render_diff(tree_diff(BEFORE, AFTER))
    assert text == (
        "New items:\n[7] StaticText 'Result'\n\n"
        "Deleted items:\n[4] link 'Old'\n\n"
        "Updated items:\n[2] textbox 'Search' focused: True required: False"
    )
    assert (
        render_diff(TreeDiff())
        == "New items:\nNone\n\nDeleted items:\nNone\n\nUpdated items:\nNone"
    )


def test_rendered_target_scores_one_against_itself() -> None:
    target = render_diff(tree_diff(BEFORE, AFTER))
    for variant in ("paper", "strict"):
        assert score_web(target, target, variant=variant).reward == 1.0
    assert score_web(render_diff(TreeDiff()), target).reward == 0.0


def test_format_action() -> None:
    assert format_action("click [31]") == "click [31]"
    action = {"function": "click", "kwargs": {"bid": '"5944"'}}
    assert format_action(action) == 'click({"bid": "\\"5944\\""})'
    with pytest.raises(ValueError, match="action"):
        format_action(42)


def test_record_and_prompt() -> None:
    record = {
        "source": "toy",
        "objective": "Search for shoes.",
        "url": "http://shop.test/",
        "previous_actions": [{"function": "click", "kwargs": {"bid": '"2"'}}],
        "action": "type [2] [shoes] [1]",
        "obs_before": BEFORE,
        "obs_after": AFTER,
        "diff": {"new": ["[7] StaticText 'Result'"], "deleted": [], "updated": []},
    }
    t = web_transition_from_record(record)
    assert t.previous_actions == ('click({"bid": "\\"2\\""})',)
    assert t.recorded_diff == TreeDiff(new=("[7] StaticText 'Result'",))
    prompt = build_web_prompt(t)
    for part in ("Search for shoes.", "http://shop.test/", t.previous_actions[0], BEFORE):
        assert part in prompt
    assert "CURRENT ACTION: type [2] [shoes] [1]\n\n" in prompt
    assert prompt.endswith("in the format of the next state prediction.\n")
    assert "AFTER" not in prompt and "[7] StaticText 'Result'" not in prompt
    with pytest.raises(ValueError, match="obs_after"):
        web_transition_from_record({k: v for k, v in record.items() if k != "obs_after"})
    with pytest.raises(ValueError, match=r"diff\.new"):
        web_transition_from_record({**record, "diff": {"new": "x"}})


# --- the shared transition files --------------------------------------------------------------


def web_file(name: str) -> Path:
    return shared_file("data", "web", name)


def agreement(transitions: list[WebTransition], *, include_negative_ids: bool) -> int:
    return sum(
        tree_diff(t.obs_before, t.obs_after, include_negative_ids=include_negative_ids)
        == t.recorded_diff
        for t in transitions
    )


def test_webarena_recorded_diffs_all_reproduced() -> None:
    transitions = list(load_web_transitions(web_file("webarena_transitions.jsonl")))
    assert len(transitions) == 92
    assert agreement(transitions, include_negative_ids=False) == 92
    sources = {t.source for t in transitions}
    assert {"nnetnav-wa", "nnetnav-live"} <= sources


def test_miniwob_recorded_diffs_reproduced_without_negative_ids() -> None:
    """The recorded MiniWoB++ diffs leave out Chromium's negative ids; counting them changes 12."""
    transitions = list(load_web_transitions(web_file("miniwob_transitions.jsonl")))
    assert len(transitions) == 1478
    assert agreement(transitions, include_negative_ids=False) == 1478
    assert agreement(transitions, include_negative_ids=True) == 1478 - 12


def test_webarena_action_text_matches_the_next_steps_history() -> None:
    records = [
        json.loads(line)
        for line in web_file("webarena_transitions.jsonl").read_text("utf-8").splitlines()
    ]
    by_step = {(r["source"], r["traj_id"], r["step"]): r for r in records}
    pairs = [(r, by_step.get((r["source"], r["traj_id"], r["step"] + 1))) for r in records]
    followed = [(r, n) for r, n in pairs if n is not None and n["previous_actions"]]
    assert len(followed) > 50
    assert all(format_action(r["action"]) == n["previous_actions"][-1] for r, n in followed)


def test_sources_files_directories_and_collector_output(tmp_path: Path) -> None:
    record = {"objective": "o", "action": "click [2]", "obs_before": BEFORE, "obs_after": AFTER}
    line = json.dumps(record) + "\n"
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "b.jsonl").write_text(line * 2, encoding="utf-8")
    (tmp_path / "data" / "a.jsonl").write_text(line, encoding="utf-8")
    (tmp_path / "data" / "notes.txt").write_text("not data", encoding="utf-8")
    run = tmp_path / "run"
    run.mkdir()
    (run / "transitions.jsonl").write_text(line * 3, encoding="utf-8")
    (run / "train.jsonl").write_text(line, encoding="utf-8")  # a part of transitions.jsonl
    assert web_transition_files(tmp_path / "data") == [
        tmp_path / "data" / "a.jsonl",
        tmp_path / "data" / "b.jsonl",
    ]
    assert web_transition_files(run) == [run / "transitions.jsonl"]
    assert web_transition_files(run / "train.jsonl") == [run / "train.jsonl"]
    assert len(load_web_sources([tmp_path / "data", run])) == 6
    with pytest.raises(FileNotFoundError, match="no web transition file"):
        web_transition_files(tmp_path / "missing")
