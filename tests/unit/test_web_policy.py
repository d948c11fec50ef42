"""The collector's seeded random policy: action text, candidates, weights, typed text."""

from __future__ import annotations

import random
from collections import Counter

from rlvr_world.web.axtree import AxSnapshot, TreeLine
from rlvr_world.web.policy import PlannedAction, choose_action, typed_text


def line(node_id: int, role: str, backend: int | None = 100) -> TreeLine:
    return TreeLine(node_id, backend, role, 0, f"[{node_id}] {role} 'x'")


TREE = AxSnapshot(
    (
        line(1, "StaticText"),
        line(2, "button"),
        line(3, "textbox"),
        line(-1, "image", backend=None),
    )
)


def test_action_text_is_webarenas() -> None:
    assert PlannedAction("click", 3).render() == "click [3]"
    assert PlannedAction("type", 3, "Lima", enter=False).render() == "type [3] [Lima] [0]"
    assert PlannedAction("type", 12, "42", enter=True).render() == "type [12] [42] [1]"


def test_same_seed_same_actions() -> None:
    def run(seed: int) -> list[str]:
        rng = random.Random(seed)
        actions = [choose_action(TREE, "Enter Lima.", rng) for _ in range(50)]
        return [a.render() for a in actions if a is not None]

    assert run(7) == run(7)
    assert run(7) != run(8)


def test_candidates_weights_and_exclusions() -> None:
    rng = random.Random(0)
    picks: Counter[int] = Counter()
    kinds: Counter[str] = Counter()
    for _ in range(3000):
        action = choose_action(TREE, "Enter Lima.", rng, type_probability=0.5)
        assert action is not None
        picks[action.node_id] += 1
        kinds[f"{action.node_id}:{action.kind}"] += 1
    assert -1 not in picks  # a node Chromium made up cannot be acted on
    # weights 1 (StaticText) : 4 (button) : 4 (textbox) -> 1/9, 4/9, 4/9 of 3000
    assert 250 < picks[1] < 420 and 1200 < picks[2] < 1470 and 1200 < picks[3] < 1470
    assert kinds["1:type"] == kinds["2:type"] == 0  # only text fields are typed into
    assert 500 < kinds["3:type"] < 830  # half of the textbox picks
    only = choose_action(TREE, "x", random.Random(1), exclude={1, 2})
    assert only is not None and only.node_id == 3
    assert choose_action(TREE, "x", random.Random(1), exclude={1, 2, 3}) is None
    assert choose_action(AxSnapshot(()), "x", random.Random(1)) is None


def test_typed_text_comes_from_the_objective_or_is_a_number() -> None:
    rng = random.Random(3)
    texts = [typed_text('Enter "Lima" into the field, then Submit.', rng) for _ in range(400)]
    words = {"Enter", "Lima", "into", "the", "field", "then", "Submit"}
    numbers = [t for t in texts if t.isdigit()]
    assert all(t in words or (t.isdigit() and 0 <= int(t) < 100) for t in texts)
    assert 60 < len(numbers) < 150  # one time in four
    assert all("]" not in t for t in texts)
    assert typed_text("", random.Random(0)).isdigit()
