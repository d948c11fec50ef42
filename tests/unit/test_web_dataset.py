"""Web data: tasks and families, the split by task, de-duplication, the length check."""

from __future__ import annotations

import dataclasses

import pytest

from rlvr_world.tasks.web import WebTransition
from rlvr_world.web.dataset import (
    dedupe,
    split_tasks,
    strip_variant,
    task_families,
    task_of,
    transition_key,
    within_length,
)

T = WebTransition(
    source="miniwob++/click-tab-2-hard",
    objective="Click on Tab #2.",
    url="file://miniwob/click-tab-2-hard.html",
    previous_actions=("click [3]",),
    action="click [5]",
    obs_before="[1] tab 'A'",
    obs_after="[1] tab 'A' selected: True",
    recorded_diff=None,
)


def test_task_of_and_variants() -> None:
    assert task_of(T) == "click-tab-2-hard"
    webarena = dataclasses.replace(T, source="nnetnav-wa", objective="Buy shoes")
    assert task_of(webarena) == "Buy shoes"
    assert strip_variant("click-tab-2-hard") == "click-tab-2"
    assert strip_variant("choose-date-nodelay") == "choose-date"
    assert strip_variant("click-collapsible-2-nodelay") == "click-collapsible-2"
    assert strip_variant("hard") == "hard"


def test_families_group_variants_and_prefix_tasks() -> None:
    tasks = [
        "click-tab",
        "click-tab-2",
        "click-tab-2-hard",
        "click-button",
        "click-button-sequence",
        "choose-date-easy",
        "choose-date-medium",
        "enter-text",
    ]
    assert task_families(tasks) == {
        "click-tab": "click-tab",
        "click-tab-2": "click-tab",
        "click-tab-2-hard": "click-tab",
        "click-button": "click-button",
        "click-button-sequence": "click-button",
        "choose-date-easy": "choose-date",  # no plain choose-date given: the stripped name
        "choose-date-medium": "choose-date",
        "enter-text": "enter-text",
    }
    # without click-tab in the list, click-tab-2 is its own family
    assert task_families(["click-tab-2", "click-tab-2-hard"])["click-tab-2-hard"] == "click-tab-2"


def test_split_holds_out_whole_families() -> None:
    tasks = ["a", "a-nodelay", "b", "c", "d", "e", "e-hard", "f", "g", "h", "i"]
    split = split_tasks(tasks, test_fraction=0.2, seed=0)
    assert set(split.train) | set(split.test) == set(tasks)
    assert not set(split.train) & set(split.test)
    families = task_families(tasks)
    held = {families[t] for t in split.test}
    assert len(held) == 2  # round(0.2 * 9 families)
    assert all(families[t] not in held for t in split.train)
    assert split == split_tasks(tasks, test_fraction=0.2, seed=0)  # deterministic
    assert any(split_tasks(tasks, test_fraction=0.2, seed=s) != split for s in range(1, 6))
    assert split.side(split.test[0]) == "test" and split.side(split.train[0]) == "train"
    with pytest.raises(KeyError):
        split.side("zzz")


def test_split_edge_cases_and_bad_input() -> None:
    assert split_tasks(["a", "b"], test_fraction=0.01, seed=0).test != ()  # at least one
    assert split_tasks(["a", "b"], test_fraction=0.9, seed=0).train != ()  # at least one left
    assert split_tasks(["a"], test_fraction=0.5, seed=0).test == ()  # one family: all train
    assert split_tasks(["a", "b"], test_fraction=0.0, seed=0).test == ()
    explicit = split_tasks(["a", "a-easy", "b", "c"], test_fraction=0.5, seed=0, test_tasks=["a"])
    assert explicit.test == ("a", "a-easy") and explicit.train == ("b", "c")
    with pytest.raises(ValueError, match="not among the tasks: z"):
        split_tasks(["a", "b"], test_fraction=0.2, seed=0, test_tasks=["z"])
    with pytest.raises(ValueError, match="test_fraction"):
        split_tasks(["a", "b"], test_fraction=1.0, seed=0)


def test_transition_key_and_dedupe() -> None:
    key = transition_key(T)
    assert transition_key(dataclasses.replace(T, recorded_diff=None, source="other")) == key
    for field, value in [
        ("url", "u"),
        ("objective", "o"),
        ("previous_actions", ()),
        ("obs_before", "b"),
        ("action", "click [6]"),
        ("obs_after", "a"),
    ]:
        assert transition_key(dataclasses.replace(T, **{field: value})) != key, field
    other = dataclasses.replace(T, action="click [6]")
    kept, dropped = dedupe([T, other, T, T], transition_key)
    assert kept == [T, other] and dropped == 2


def test_within_length() -> None:
    def words(text: str) -> int:
        return len(text.split())

    assert within_length("a b c", "d e", words, 5)
    assert not within_length("a b c", "d e f", words, 5)
