"""Web prompt items: prompt, target, split, length filter, caps, F1 split by change; and the
shared transitions: every target scores exactly 1 with the web scorer."""

from __future__ import annotations

import dataclasses

import pytest

from rlvr_world.rewards.web import score_web
from rlvr_world.tasks.web import (
    TreeDiff,
    WebTransition,
    build_web_prompt,
    load_web_transitions,
    render_diff,
)
from rlvr_world.web.items import (
    build_web_items,
    f1_by_change,
    target_scores_one,
    web_transition_item,
)
from tests.helpers.shared import shared_file

BEFORE = "[1] StaticText 'Pick one'\n[2] button 'OK'\n[3] link 'Old'"
AFTER = "[1] StaticText 'Pick one'\n[2] button 'OK' focused: True\n[4] StaticText 'Done'"


def transition(task: str, action: str = "click [2]", after: str = AFTER) -> WebTransition:
    return WebTransition(
        source=f"miniwob++/{task}",
        objective="Click OK.",
        url=f"file://miniwob/{task}.html",
        previous_actions=(),
        action=action,
        obs_before=BEFORE,
        obs_after=after,
        recorded_diff=None,
    )


def words(text: str) -> int:
    return len(text.split())


def test_item_prompt_target_and_extra_info() -> None:
    t = transition("click-button")
    item = web_transition_item(t, "train-0", split="train", index=0)
    assert item.task == "web" and item.data_source == "web_agent"
    assert item.prompt == build_web_prompt(t, "compact")
    assert (
        item.target
        == item.ground_truth
        == (
            "New items:\n[4] StaticText 'Done'\n\n"
            "Deleted items:\n[3] link 'Old'\n\n"
            "Updated items:\n[2] button 'OK' focused: True"
        )
    )
    assert item.changed is True
    assert item.extra_info == {
        "task": "click-button",
        "source": "miniwob++/click-button",
        "split": "train",
        "index": 0,
    }
    assert target_scores_one(item)
    row = item.reward_row(item.target)
    assert score_web(row["solution_str"], row["ground_truth"]).reward == 1.0
    same = web_transition_item(transition("x", after=BEFORE), "p", style="paper")
    assert same.changed is False and same.target == render_diff(TreeDiff())
    assert same.prompt.startswith("You are a world model of web pages.")


def test_prompts_carry_the_slots_and_not_the_answer() -> None:
    t = dataclasses.replace(transition("a"), previous_actions=("click [1]", "type [2] [x] [0]"))
    for style in ("paper", "compact"):
        prompt = build_web_prompt(t, style)
        for part in ("file://miniwob/a.html", "Click OK.", "click [1]\ntype [2] [x] [0]", BEFORE):
            assert part in prompt
        assert "[4] StaticText 'Done'" not in prompt
        assert "New items:" in prompt and "Deleted items:" in prompt and "None" in prompt
    paper = build_web_prompt(t, "paper")
    # the paper's slot order: URL, objective, previous action, observation, current action
    slots = ["URL:", "OBJECTIVE:", "PREVIOUS ACTION:", "CURRENT OBSERVATION:", "CURRENT ACTION:"]
    positions = [paper.rindex(s) for s in slots]
    assert positions == sorted(positions)
    assert "PREVIOUS ACTION:\nNone\n" in build_web_prompt(transition("a"), "paper")
    with pytest.raises(ValueError, match="prompt style"):
        build_web_prompt(t, "long")


def test_build_items_dedupes_splits_filters_and_caps() -> None:
    data = [
        transition("a"),
        transition("a"),  # duplicate
        transition("a", action="click [3]"),
        transition("a-nodelay"),
        transition("b"),
        transition("b", action="click [1]", after=BEFORE),
        transition("c"),
        transition("d"),
    ]
    base = build_web_items(data, count_tokens=words, max_tokens=10_000, test_tasks=["a"])
    assert base.test_tasks == ("a", "a-nodelay") and base.train_tasks == ("b", "c", "d")
    assert {i.extra_info["task"] for i in base.test} == {"a", "a-nodelay"}
    assert base.report == {
        "transitions": 8,
        "duplicates": 1,
        "train_before_length": 4,
        "train_too_long": 0,
        "train": 4,
        "train_changed": 3,
        "train_unchanged": 1,
        "test_before_length": 3,
        "test_too_long": 0,
        "test": 3,
        "test_changed": 3,
        "test_unchanged": 0,
    }
    size = words(base.train[0].prompt) + words(base.train[0].target)
    # every item here has the same length, except the unchanged one's target ("None" x3)
    unchanged = next(i for i in base.train if not i.changed)
    short = words(unchanged.prompt) + words(unchanged.target)
    assert short < size
    tight = build_web_items(data, count_tokens=words, max_tokens=short, test_tasks=["a"])
    assert tight.report["train"] == 1 and tight.report["train_too_long"] == 3
    assert tight.report["test"] == 0 and tight.report["test_too_long"] == 3
    capped = build_web_items(
        data, count_tokens=words, test_tasks=["a"], max_train=2, max_test=1, max_tokens=10_000
    )
    assert len(capped.train) == 2 and len(capped.test) == 1
    assert capped.report["train_over_cap"] == 2 and capped.report["test_over_cap"] == 2
    assert capped.test[0].prompt_id == "test-0"
    again = build_web_items(
        data, count_tokens=words, test_tasks=["a"], max_train=2, max_test=1, max_tokens=10_000
    )
    assert [i.prompt_id for i in again.train] == [i.prompt_id for i in capped.train]
    with pytest.raises(ValueError, match="max_tokens"):
        build_web_items(data, count_tokens=words, max_tokens=0)


def test_f1_by_change() -> None:
    items = [
        web_transition_item(transition("a"), "0"),
        web_transition_item(transition("a", after=BEFORE), "1"),
        web_transition_item(transition("b"), "2"),
    ]
    split = f1_by_change(items, [1.0, 0.5, 0.25])
    assert split.n == 3 and split.f1 == pytest.approx(1.75 / 3)
    assert split.n_unchanged == 1 and split.f1_unchanged == 0.5
    assert split.n_changed == 2 and split.f1_changed == pytest.approx(0.625)
    empty = f1_by_change([], [])
    assert empty.n == 0 and empty.f1 == 0.0
    with pytest.raises(ValueError, match="2 items but 1 rewards"):
        f1_by_change(items[:2], [1.0])
    with pytest.raises(ValueError, match="changed is not set"):
        f1_by_change([dataclasses.replace(items[0], changed=None)], [1.0])


# --- the shared transition files ----------------------------------------------------------


@pytest.mark.parametrize("name", ["miniwob_transitions.jsonl", "webarena_transitions.jsonl"])
def test_every_shared_target_scores_exactly_one(name: str) -> None:
    path = shared_file("data", "web", name)
    transitions = list(load_web_transitions(path))
    items = [web_transition_item(t, str(i)) for i, t in enumerate(transitions)]
    for item in items:
        for variant in ("strict", "paper"):
            result = score_web(item.target, item.ground_truth, variant=variant)
            assert result.status.value == "ok" and result.reward == 1.0, (item.prompt_id, variant)
    if name.startswith("miniwob"):
        changed = sum(1 for i in items if i.changed)
        assert (changed, len(items) - changed) == (1219, 259)
