"""Text-game reward, properties: any input gives a RewardResult with a status and a finite reward.

Both variants and both reward types, on arbitrary text, arbitrary bytes decoded with
``errors="replace"``, JSON-ish and Python-ish answers built from random values, deep nesting and
oversized input. Nothing may raise, and an ``ok`` result always lies in the reward's range.
"""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rlvr_world.rewards.text_game import score_text_game
from rlvr_world.rewards.text_game.common import MAX_RESPONSE_CHARS
from rlvr_world.rewards.types import RewardResult, Status

COMBOS = [(v, r) for v in ("paper", "strict") for r in ("binary", "task_specific")]
SCORE0 = {"score": 0, "gameOver": False, "gameWon": False}
CURRENT = {
    "game_state": [
        {"name": "room (ID: 1)", "uuid": 1, "type": "World", "properties": {"open": True},
         "contains": ["box (ID: 2)"]},
        {"name": "box (ID: 2)", "uuid": 2, "type": "Box",
         "properties": {"isOpen": False, "items": [None, "None"]}, "contains": []},
        SCORE0,
    ]
}  # fmt: skip
TARGET = json.loads(json.dumps(CURRENT))
TARGET["game_state"][1]["properties"]["isOpen"] = True
INFO = {"data_state": json.dumps(CURRENT), "data_action": "open box (ID: 2)"}
TRUTH = json.dumps(TARGET)


def _check(result: RewardResult, binary: bool) -> None:
    assert isinstance(result, RewardResult)
    assert isinstance(result.status, Status)
    assert math.isfinite(result.reward)
    assert all(math.isfinite(v) for v in result.metrics.values())
    top = 1.0 if binary else 1.3 + 1e-9
    assert 0.0 <= result.reward <= top
    if result.status is not Status.OK:
        assert result.reward == 0.0 and result.message


def _all_combos(response: str) -> None:
    for variant, reward_type in COMBOS:
        got = score_text_game(response, TRUTH, INFO, variant=variant, reward_type=reward_type)
        _check(got, reward_type == "binary")


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=20,
)
uuids = st.sampled_from([1, 2, 3, "2", True, None, 2.0])
objects = st.fixed_dictionaries(
    {"uuid": uuids},
    optional={
        "name": st.text(max_size=10),
        "properties": st.dictionaries(st.sampled_from(["isOpen", "items", "x"]), json_values)
        | json_values,
        "contains": st.lists(json_values, max_size=3) | json_values,
    },
)
answers = st.fixed_dictionaries(
    {},
    optional={
        "modified": st.lists(objects | json_values, max_size=4) | json_values,
        "removed": st.lists(uuids, max_size=3) | json_values,
        "score": st.fixed_dictionaries({}, optional={"score": json_values}) | json_values,
    },
)


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=400))
def test_arbitrary_text(text: str) -> None:
    _all_combos(text)
    _all_combos("The final answer is: " + text)


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=400))
def test_arbitrary_bytes_decoded_with_replacement(data: bytes) -> None:
    _all_combos(data.decode("utf-8", errors="replace"))


@settings(max_examples=200, deadline=None)
@given(answers, st.booleans())
def test_structured_answers(answer: dict[str, Any], as_repr: bool) -> None:
    """Answers with random shapes and values, rendered as JSON or as a Python repr."""
    body = repr(answer) if as_repr else json.dumps(answer)
    _all_combos("Thinking...</think>\nThe final answer is: " + body + "<|im_end|>")


@settings(max_examples=100, deadline=None)
@given(st.text(max_size=200), st.text(max_size=200) | st.none())
def test_arbitrary_reference_is_invalid_input(truth: str, state: str | None) -> None:
    info = None if state is None else {"data_state": state, "data_action": "x"}
    for variant, reward_type in COMBOS:
        got = score_text_game("{}", truth, info, variant=variant, reward_type=reward_type)
        _check(got, reward_type == "binary")
        assert got.status is Status.INVALID_INPUT


@pytest.mark.parametrize(
    "response",
    [
        "[" * 100_000,
        "{" * 100_000,
        '{"a": ' * 50_000,
        "The final answer is: " + '{"modified": [' * 3_000,
        "The final answer is: " + "{'modified': [" * 3_000 + "]}" * 3_000,
        "The final answer is: " + json.dumps({"modified": [[[[[[[[[[[]]]]]]]]]]], "removed": []}),
    ],
    ids=["brackets", "braces", "objects", "open_answer", "closed_repr", "nested_list"],
)
def test_deep_nesting(response: str) -> None:
    _all_combos(response)


def test_nested_answer_beyond_depth_limit_is_unparseable() -> None:
    deep: Any = []
    for _ in range(200):
        deep = [deep]
    response = "The final answer is: " + json.dumps({"modified": deep, "removed": [], "score": {}})
    got = score_text_game(response, TRUTH, INFO)
    assert got.status is Status.UNPARSEABLE


@pytest.mark.parametrize(
    "filler",
    ["{x} ", "{", "'", '"', "The final answer is: {"],
    ids=["brace_pairs", "open_braces", "single_quotes", "double_quotes", "phrases"],
)
def test_huge_inputs(filler: str) -> None:
    """Over the limit: rejected up front. Just under it: scanned within bounded work."""
    over = filler * (MAX_RESPONSE_CHARS // len(filler) + 1)
    for variant, reward_type in COMBOS:
        got = score_text_game(over, TRUTH, INFO, variant=variant, reward_type=reward_type)
        assert got.status is Status.UNPARSEABLE
    under = filler * ((MAX_RESPONSE_CHARS - 1) // len(filler))
    _all_combos(under)
