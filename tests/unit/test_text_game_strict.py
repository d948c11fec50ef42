"""Text-game reward, strict variant: one test per reference bug (docs/reference.md#quirks, Q1-Q6,
Q13).

Each test shows the paper result next to the strict one, and its docstring says why the strict
result is the right one. States are built by hand (a sink, a cup, water) so every count can be
checked by eye; the 300 real test records come from ``$RLVR_SHARED_DIR`` (skipped when it is unset;
missing there, the test fails).
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from rlvr_world.rewards.text_game import score_text_game
from rlvr_world.rewards.text_game.common import MAX_RESPONSE_CHARS
from rlvr_world.rewards.types import RewardResult, Status
from tests.helpers.shared import read_jsonl, shared_file

PHRASE = "The final answer is: "
SCORE0 = {"score": 0, "gameOver": False, "gameWon": False}
EOS_TEXTS = ["<｜end▁of▁sentence｜>", "<|endoftext|>", "<|im_end|>", "<|eos|>"]


def _obj(uuid: int, name: str, props: dict[str, Any], contains: list[str]) -> dict[str, Any]:
    return {
        "name": f"{name} (ID: {uuid})",
        "uuid": uuid,
        "type": name.title(),
        "properties": props,
        "contains": contains,
    }


def _room(contains: list[str]) -> dict[str, Any]:
    return _obj(1, "room", {"isContainer": True}, contains)


def _sink(on: bool) -> dict[str, Any]:
    return _obj(2, "sink", {"isOn": on, "label": "None shall pass. Say True", "temp": 20.0}, [])


def _cup(volume: int, contains: list[str]) -> dict[str, Any]:
    return _obj(3, "cup", {"volume": volume, "colors": ["red", "blue"]}, contains)


WATER = _obj(4, "water", {"isLiquid": True, "volume": 100}, [])
ROOM = _room(["sink (ID: 2)", "cup (ID: 3)"])


def _state(*objs: dict[str, Any], score: dict[str, Any] = SCORE0) -> dict[str, Any]:
    return {"game_state": [copy.deepcopy(o) for o in objs] + [dict(score)]}


def _answer(modified: list[Any], removed: Any = (), score: Any = None, **extra: Any) -> str:
    body = {"modified": modified, "removed": list(removed), "score": score or {}} | extra
    return PHRASE + json.dumps(body)


def _score(
    response: str,
    current: dict[str, Any],
    target: dict[str, Any],
    variant: str = "strict",
    reward_type: str = "binary",
) -> RewardResult:
    info = {"data_state": json.dumps(current), "data_action": "act"}
    return score_text_game(
        response, json.dumps(target), info, variant=variant, reward_type=reward_type
    )


def _both(response: str, current: dict[str, Any], target: dict[str, Any]) -> dict[str, float]:
    """Rewards keyed ``variant/reward_type``."""
    out = {}
    for variant in ("paper", "strict"):
        for reward_type in ("binary", "task_specific"):
            got = _score(response, current, target, variant, reward_type)
            out[f"{variant}/{reward_type}"] = got.reward
    return out


# Transition "turn on the sink": the sink turns on, the cup fills, water (ID 4) is created.
ADD_CUR = _state(ROOM, _sink(False), _cup(0, []))
ADD_TGT = _state(ROOM, _sink(True), _cup(100, ["water (ID: 4)"]), WATER)
ADD_PERFECT = [_sink(True), _cup(100, ["water (ID: 4)"]), WATER]

# Transition "drink": the water (ID 4) is removed from the cup.
DRINK_CUR = _state(ROOM, _sink(False), _cup(100, ["water (ID: 4)"]), WATER)
DRINK_TGT = _state(ROOM, _sink(False), _cup(0, []))

# Transition "look": nothing changes.
LOOK = _state(ROOM, _sink(False), _cup(0, []))


# --------------------------------------------------------------------------------------------
# Q1 new objects


def test_new_object_is_scored() -> None:
    """Q1: the reference drops predicted objects whose uuid is new, so even the perfect answer
    on a transition that creates an object reads as "missing object" (binary 0). Strict adds them
    to the predicted state: the perfect answer is exact (1.0 / 1.3), as on any other transition."""
    got = _both(_answer(ADD_PERFECT), ADD_CUR, ADD_TGT)
    assert got["strict/binary"] == 1.0
    assert got["strict/task_specific"] == pytest.approx(1.3)
    assert got["paper/binary"] == 0.0
    assert got["paper/task_specific"] < 1.1


def test_missing_new_object_costs_its_fields() -> None:
    """Leaving the new object out is wrong: every field of it is a changed field missed."""
    got = _score(_answer(ADD_PERFECT[:2]), ADD_CUR, ADD_TGT, reward_type="task_specific")
    assert got.metrics["exact"] == 0.0
    assert got.metrics["n_missing_objects"] == 1.0
    # changed: sink.isOn, cup.volume, cup.contains + water's 2 properties and contains = 6
    assert got.metrics["n_changed"] == 6.0
    assert got.metrics["changed_accuracy"] == pytest.approx(3 / 6)


def test_spurious_new_object_is_an_error() -> None:
    """Q1/Q4: a made-up object is a wrong claim about the next state. The paper ignores it
    (exact 1, golden tg_023); strict charges one error per field of the invented object."""
    ghost = _obj(7, "ghost", {"isScary": True}, [])
    assert _score(_answer([ghost]), LOOK, LOOK, "paper").reward == 1.0
    got = _score(_answer([ghost]), LOOK, LOOK)
    assert got.reward == 0.0
    assert got.metrics["n_extra_objects"] == 1.0
    assert got.metrics["n_errors"] == 2.0  # isScary + contains


# --------------------------------------------------------------------------------------------
# Q2 unknown property key


def test_unknown_property_key_is_an_error_not_a_crash() -> None:
    """Q2: a predicted key found in neither state makes the reference's task-specific term raise
    KeyError, so the reward is 0 while binary says 1. Strict scores it: the key is an extra,
    wrong claim (one error, so not exact), and the changed fields still earn their credit."""
    sink = _sink(True)
    sink["properties"]["isBroken"] = False
    answer = _answer([sink, _cup(100, ["water (ID: 4)"]), WATER])
    paper = _score(answer, ADD_CUR, ADD_TGT, "paper", "task_specific")
    assert (paper.reward, paper.status) == (0.0, Status.ERROR)
    got = _score(answer, ADD_CUR, ADD_TGT, reward_type="task_specific")
    assert got.status is Status.OK
    assert got.metrics["exact"] == 0.0
    assert got.metrics["changed_accuracy"] == 1.0
    n_fields = got.metrics["n_fields"]
    assert got.metrics["item_accuracy"] == pytest.approx((n_fields - 1) / n_fields)
    expected = 0.09 * got.metrics["item_accuracy"] + 0.01 + 1.0
    assert got.reward == pytest.approx(expected)


# --------------------------------------------------------------------------------------------
# Q3 Python literals


def _sink_on_answers() -> dict[str, str]:
    diff = {"modified": [_sink(True)], "removed": [], "score": {}}
    as_repr = str(diff)
    with_tuple = as_repr.replace("['red', 'blue']", "('red', 'blue')")
    return {
        "json": PHRASE + json.dumps(diff),
        "python_repr": PHRASE + as_repr,
        "repr_trailing_commas_comment": PHRASE + as_repr.replace("}]", ",},]") + " // done",
        "fenced_repr": "Reasoning.\n```json\n" + as_repr + "\n```",
        "repr_with_tuple": PHRASE + with_tuple,
    }


@pytest.mark.parametrize("rendering", sorted(_sink_on_answers()))
def test_literals_are_parsed_without_corrupting_strings(rendering: str) -> None:
    """Q3: the reference rewrites True/False/None everywhere, string values included, so the
    label "None shall pass. Say True" becomes "null shall pass. Say true" and can never match
    (golden tg_100-101). Strict decodes JSON, then Python literals (ast.literal_eval), and only
    then json_repair, none of which touch string contents."""
    current, target = _state(ROOM, _sink(False)), _state(ROOM, _sink(True))
    response = _sink_on_answers()[rendering]
    assert _score(response, current, target, "paper").reward == 0.0
    strict = _score(response, current, target, reward_type="task_specific")
    assert strict.reward == pytest.approx(1.3), strict


def test_true_is_not_one_but_int_equals_float() -> None:
    """Values compare by JSON meaning: 20 and 20.0 are the same number, but true is not 1 (the
    reference's Python == says it is, golden tg_043)."""

    def lamp(on: Any, watts: Any) -> dict[str, Any]:
        return _obj(5, "lamp", {"isOn": on, "watts": watts}, [])

    current, target = _state(ROOM, lamp(False, 60.0)), _state(ROOM, lamp(True, 60.0))
    assert _score(_answer([lamp(True, 60)]), current, target).reward == 1.0
    as_one = lamp(1, 60.0)
    assert _score(_answer([as_one]), current, target, "paper").reward == 1.0
    assert _score(_answer([as_one]), current, target).reward == 0.0


# --------------------------------------------------------------------------------------------
# Q4 removals


def test_forgotten_removal_is_an_error() -> None:
    """Q4: the reference only walks target objects, so keeping an object the target removed
    costs nothing (golden tg_071). The predicted state then has an object the real one lacks:
    strict counts it (extra object) and the removal is a changed field missed."""
    cup = _cup(0, [])
    assert _score(_answer([cup], removed=[4]), DRINK_CUR, DRINK_TGT).reward == 1.0
    assert _score(_answer([cup]), DRINK_CUR, DRINK_TGT, "paper").reward == 1.0
    got = _score(_answer([cup]), DRINK_CUR, DRINK_TGT, reward_type="task_specific")
    assert got.metrics["exact"] == 0.0
    assert got.metrics["n_extra_objects"] == 1.0
    assert got.metrics["changed_accuracy"] == pytest.approx(2 / 3)  # volume, contains, removal


def test_wrong_removal_and_unknown_uuid_are_errors() -> None:
    """Removing an object the target keeps loses all of its fields; removing a uuid that does not
    exist is an answer-level error (the reference ignores it silently)."""
    cup = _cup(0, [])
    wrong = _score(_answer([cup], removed=[4, 2]), DRINK_CUR, DRINK_TGT)
    assert (wrong.reward, wrong.metrics["n_missing_objects"]) == (0.0, 1.0)
    assert wrong.metrics["n_errors"] == 4.0  # sink: isOn, label, temp, contains
    ghost = _score(_answer([cup], removed=[4, 99]), DRINK_CUR, DRINK_TGT)
    assert (ghost.reward, ghost.metrics["n_answer_errors"]) == (0.0, 1.0)
    assert "99" in ghost.message


def test_removed_must_be_a_list() -> None:
    """``removed: 4`` silently removes nothing in the reference (golden tg_072); strict refuses
    the answer's shape with a message instead of guessing."""
    response = PHRASE + json.dumps({"modified": [_cup(0, [])], "removed": 4, "score": {}})
    assert _score(response, DRINK_CUR, DRINK_TGT, "paper").reward == 1.0
    got = _score(response, DRINK_CUR, DRINK_TGT)
    assert (got.reward, got.status) == (0.0, Status.UNPARSEABLE)
    assert "removed" in got.message


def test_string_uuid_is_not_normalised() -> None:
    """uuid "3" is not 3 (documented: no normalisation). It is a new object with a string uuid,
    so the cup keeps its old state and an extra object appears."""
    cup = _cup(0, [])
    cup["uuid"] = "3"
    got = _score(_answer([cup], removed=[4]), DRINK_CUR, DRINK_TGT)
    assert got.reward == 0.0
    assert got.metrics["n_extra_objects"] == 1.0


def test_modified_and_removed_together_is_an_error() -> None:
    """An object both modified and removed is a contradiction: the removal wins, plus 1 error."""
    got = _score(_answer([_cup(0, []), WATER], removed=[4]), DRINK_CUR, DRINK_TGT)
    assert got.reward == 0.0
    assert got.metrics["n_answer_errors"] == 1.0


# --------------------------------------------------------------------------------------------
# Q5 score key


def test_missing_score_key_counts_every_score_field_wrong() -> None:
    """Q5: the prompt asks for three keys and ``score: {}`` is how an answer says "unchanged",
    so an answer without ``score`` is not exact: every target score field is wrong, and the
    result says so (metric ``score_missing``, message) instead of failing silently."""
    response = PHRASE + json.dumps({"modified": [], "removed": []})
    got = _score(response, LOOK, LOOK, reward_type="task_specific")
    assert got.status is Status.OK
    assert got.metrics["score_missing"] == 1.0
    assert got.metrics["score_accuracy"] == 0.0
    assert got.reward == pytest.approx(0.09)
    assert "score" in got.message


def test_int_score_is_invalid_not_unchanged() -> None:
    """Q5: ``score: 0`` silently means "unchanged" in the reference (len() raises, golden
    tg_009). An int is not a score entry; strict counts the score fields wrong."""
    response = PHRASE + json.dumps({"modified": [], "removed": [], "score": 0})
    assert _score(response, LOOK, LOOK, "paper").reward == 1.0
    got = _score(response, LOOK, LOOK)
    assert (got.reward, got.metrics["score_invalid"]) == (0.0, 1.0)


def test_score_change_must_be_predicted_in_full() -> None:
    """A score change answered with ``{}`` or with a partial entry is wrong on the missing keys."""
    won = {"score": 1, "gameOver": True, "gameWon": True}
    target = _state(ROOM, _sink(False), _cup(0, []), score=won)
    assert _score(_answer([], score=won), LOOK, target).reward == 1.0
    assert _score(_answer([]), LOOK, target).metrics["score_accuracy"] == 0.0
    partial = _score(_answer([], score={"score": 1}), LOOK, target)
    assert partial.metrics["score_accuracy"] == pytest.approx(1 / 3)


# --------------------------------------------------------------------------------------------
# Q6 end-of-sequence text


@pytest.mark.parametrize("eos", EOS_TEXTS)
def test_eos_text_is_stripped(eos: str) -> None:
    """Q6: verl decodes without skip_special_tokens. When the model stops right after the last
    value, before closing the braces, json_repair swallows the EOS text into that value, and the
    reference scores a corrupted state. Strict removes the EOS text first, then repairs."""
    won = {"score": 1, "gameOver": True, "gameWon": True}
    target = _state(ROOM, _sink(False), _cup(0, []), score=won)
    full = _answer([], score=won)
    assert full.endswith("true}}")
    for response in (full + eos, full[:-2] + eos):
        assert _score(response, LOOK, target).reward == 1.0
    assert _score(full[:-2] + eos, LOOK, target, "paper").reward == 0.0
    assert _score(full[:-2], LOOK, target, "paper").reward == 1.0


# --------------------------------------------------------------------------------------------
# Q13 item_score denominators


def test_missing_object_costs_one_error_per_field() -> None:
    """Q13: in the reference a missing object is one error however many fields it has, so its
    fields vanish from the denominator. Strict charges each of them: wrongly removing the sink
    (3 properties + contains) is 4 errors, as if each had been predicted wrong."""
    response = _answer([], removed=[2])
    paper = _score(response, LOOK, LOOK, "paper")
    strict = _score(response, LOOK, LOOK)
    assert paper.metrics["n_errors"] == 1.0
    assert strict.metrics["n_errors"] == 4.0
    assert strict.metrics["item_accuracy"] < paper.metrics["item_accuracy"]


def test_object_without_properties_keeps_the_changed_term() -> None:
    """Q13 (golden tg_040): a predicted object without ``properties`` makes the reference's
    diff raise, and the whole changed-field term silently disappears. Strict keeps it: the sink's
    changed ``isOn`` is simply missed, the cup's change still counts."""
    bare_sink = {k: v for k, v in _sink(True).items() if k != "properties"}
    response = _answer([bare_sink, _cup(100, ["water (ID: 4)"]), WATER])
    paper = _score(response, ADD_CUR, ADD_TGT, "paper", "task_specific")
    assert "changed_accuracy" not in paper.metrics
    got = _score(response, ADD_CUR, ADD_TGT, reward_type="task_specific")
    assert got.metrics["changed_accuracy"] == pytest.approx(5 / 6)


# --------------------------------------------------------------------------------------------
# shape of the answer, inputs, limits


def test_contains_is_a_multiset_and_lists_are_ordered() -> None:
    """``contains`` order is free but duplicates count; other lists keep their order."""
    current, target = _state(ROOM, _cup(0, [])), _state(ROOM, _cup(0, ["a", "b"]))
    assert _score(_answer([_cup(0, ["b", "a"])]), current, target).reward == 1.0
    assert _score(_answer([_cup(0, ["a", "b", "b"])]), current, target).reward == 0.0
    swapped = _cup(0, ["a", "b"])
    swapped["properties"]["colors"] = ["blue", "red"]
    assert _score(_answer([swapped]), current, target).reward == 0.0


def test_prose_braces_before_the_answer_are_skipped() -> None:
    """Golden tg_126: braces in prose after the phrase make json_repair build the wrong object."""
    response = (
        PHRASE + "per the rules {the sink turns on}, " + _answer([_sink(True)])[len(PHRASE) :]
    )
    current, target = _state(ROOM, _sink(False)), _state(ROOM, _sink(True))
    assert _score(response, current, target, "paper").reward == 0.0
    assert _score(response, current, target).reward == 1.0


@pytest.mark.parametrize("variant", ["paper", "strict"])
def test_invalid_inputs_name_the_field(variant: str) -> None:
    answer = _answer([])
    cases: list[tuple[Any, Any, str]] = [
        ("{not json", {"data_state": json.dumps(LOOK)}, "ground_truth"),
        (json.dumps({"state": []}), {"data_state": json.dumps(LOOK)}, "ground_truth"),
        (json.dumps(LOOK), {}, "extra_info.data_state"),
        (json.dumps(LOOK), None, "extra_info"),
        (json.dumps(LOOK), "[1, 2]", "extra_info"),
        (json.dumps(LOOK), {"data_state": "[{}]"}, "extra_info.data_state.game_state[0]"),
    ]
    for truth, info, field in cases:
        got = score_text_game(answer, truth, info, variant=variant)
        assert got.status is Status.INVALID_INPUT, (truth, info)
        assert got.message.startswith(field), got.message


def test_unknown_options_are_invalid_input() -> None:
    info = {"data_state": json.dumps(LOOK), "data_action": "look"}
    bad_variant = score_text_game(_answer([]), json.dumps(LOOK), info, variant="fast")
    assert bad_variant.status is Status.INVALID_INPUT and "variant" in bad_variant.message
    bad_type = score_text_game(_answer([]), json.dumps(LOOK), info, reward_type="dense")
    assert bad_type.status is Status.INVALID_INPUT and "reward_type" in bad_type.message


def test_extra_info_as_json_text_and_state_as_list() -> None:
    info = json.dumps({"data_state": LOOK["game_state"], "data_action": "look"})
    assert score_text_game(_answer([]), json.dumps(LOOK), info).reward == 1.0


def test_response_over_the_limit_is_unparseable() -> None:
    response = _answer([]) + " " * MAX_RESPONSE_CHARS
    got = _score(response, LOOK, LOOK)
    assert (got.reward, got.status) == (0.0, Status.UNPARSEABLE)
    assert str(MAX_RESPONSE_CHARS) in got.message


# --------------------------------------------------------------------------------------------
# real records


def _records() -> list[dict[str, Any]]:
    return list(read_jsonl(shared_file("data", "text_game", "test_sample_300.jsonl")))


def _record_states(rec: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The paper's "full" transition: current objects + current score -> tick objects + next."""
    cur = [o for o in rec["current_state"]["objects"] if "uuid" in o]
    nxt = [o for o in rec["tick_state"]["objects"] if "uuid" in o]
    return (
        {"game_state": [*cur, rec["current_score_state"]]},
        {"game_state": [*nxt, rec["next_score_state"]]},
    )


def _perfect_diff(rec: dict[str, Any], current: dict[str, Any], target: dict[str, Any]) -> Any:
    """``_derived.gold_diff`` with quirk Q10 undone: GPT-simulator's diff stores the whole
    uuid->object map in place of a created object; put the created objects themselves there."""
    gold = rec["_derived"]["gold_diff"]
    before = {o["uuid"] for o in current["game_state"][:-1]}
    modified = [m for m in gold["modified"] if "uuid" in m]
    listed = {m["uuid"] for m in modified}
    created = [o for o in target["game_state"][:-1] if o["uuid"] not in before | listed]
    return {"modified": modified + created, "removed": gold["removed"], "score": gold["score"]}


def _changes(current: dict[str, Any], target: dict[str, Any]) -> tuple[bool, bool]:
    """(anything compared changes, an object is created), computed straight from the states."""

    def view(state: dict[str, Any]) -> dict[Any, Any]:
        return {
            o["uuid"]: (o["properties"], sorted(o["contains"])) for o in state["game_state"][:-1]
        }

    before, after = view(current), view(target)
    return before != after, bool(set(after) - set(before))


def test_perfect_answers_on_300_real_records() -> None:
    """The expected answer is exact in strict on every record, creations and removals included;
    in the paper it fails exactly on the records that create an object (Q1)."""
    records = _records()
    assert len(records) == 300
    paper_exact = 0
    for rec in records:
        current, target = _record_states(rec)
        response = PHRASE + json.dumps(_perfect_diff(rec, current, target))
        changed, created = _changes(current, target)
        strict = _score(response, current, target, reward_type="task_specific")
        assert strict.metrics["exact"] == 1.0, rec["game"]
        assert strict.reward == pytest.approx(1.3 if changed else 0.3), rec["game"]
        paper = _score(response, current, target, "paper")
        assert paper.reward == float(not created), rec["game"]
        paper_exact += int(paper.reward)
    assert paper_exact < 300


def test_raw_gold_diff_object_map_is_flagged() -> None:
    """Q10: the raw gold diff holds a uuid->object map where a created object belongs; strict
    reports it as an answer-level error instead of silently skipping it."""
    flagged = 0
    for rec in _records():
        gold = rec["_derived"]["gold_diff"]
        if all("uuid" in m for m in gold["modified"]):
            continue
        current, target = _record_states(rec)
        got = _score(PHRASE + json.dumps(gold), current, target)
        assert got.reward == 0.0 and got.metrics["n_answer_errors"] >= 1.0, rec["game"]
        flagged += 1
    assert flagged > 0
