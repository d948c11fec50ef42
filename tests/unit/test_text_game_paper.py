"""Text-game reward, paper variant: result-for-result parity with the reference on the golden file.

The golden file (``$RLVR_SHARED_DIR/golden/golden_text_game.jsonl``, 90 cases) was computed by the
verbatim reference code with json-repair 0.64.6; ``version_sensitive`` cases differ under 0.44.1
and must match the 0.64.6 values, so the installed version is checked first.
"""

from __future__ import annotations

import json
from importlib.metadata import version
from typing import Any

import pytest

from rlvr_world.rewards.text_game import score_text_game
from rlvr_world.rewards.text_game.extract import paper_answer_text
from rlvr_world.rewards.text_game.paper import recover_game_state_from_partial
from rlvr_world.rewards.types import Status
from tests.helpers.shared import read_jsonl, shared_file

REWARD_KEYS = {"binary": "reward_binary", "task_specific": "reward_task_specific"}
TRACE_COUNTERS = {
    "n_correct": "num_correct",
    "n_errors": "num_errors",
    "n_score_correct": "num_correct_score",
    "n_score_errors": "num_score_errors",
}


def _golden() -> list[dict[str, Any]]:
    return list(read_jsonl(shared_file("golden", "golden_text_game.jsonl")))


def _paper(case: dict[str, Any], reward_type: str) -> Any:
    return score_text_game(
        case["response"],
        case["ground_truth"],
        case["extra_info"],
        variant="paper",
        reward_type=reward_type,
    )


def _reference_failed(case: dict[str, Any], reward_type: str) -> bool:
    """True where the reference's 0 came from a failure rather than from a wrong answer."""
    trace = case["trace"]
    return bool(
        case[f"error_{reward_type}"]
        or "parse_error" in trace
        or "early_exit" in trace
        or trace.get("num_errors") == -1
    )


def test_json_repair_is_the_golden_version() -> None:
    """The version_sensitive cases only hold for the json-repair release the goldens pinned."""
    cases = _golden()
    assert {c["ref"]["json_repair"] for c in cases} == {version("json-repair")}


@pytest.mark.parametrize("reward_type", ["binary", "task_specific"])
def test_golden_rewards_match_reference(reward_type: str) -> None:
    cases = _golden()
    assert len(cases) == 90
    key = REWARD_KEYS[reward_type]
    for case in cases:
        got = _paper(case, reward_type)
        assert case[f"{key}_dispatch"] == pytest.approx(case[key], abs=0), case["id"]
        assert abs(got.reward - case[f"{key}_dispatch"]) <= 1e-9, (case["id"], got)


@pytest.mark.parametrize("reward_type", ["binary", "task_specific"])
def test_golden_statuses_say_when_the_reference_failed(reward_type: str) -> None:
    """A zero the reference produced by failing is never reported as an ok zero."""
    for case in _golden():
        got = _paper(case, reward_type)
        if _reference_failed(case, reward_type):
            assert got.status is not Status.OK, (case["id"], got)
            assert got.message, case["id"]
        else:
            assert got.status is Status.OK, (case["id"], got)


def test_golden_evaluate_counters_match_trace() -> None:
    """Not only the reward: the four evaluate counters agree with the reference's trace."""
    checked = 0
    for case in _golden():
        trace = case["trace"]
        if trace.get("num_errors", -1) < 0:
            continue
        got = _paper(case, "binary")
        for metric, counter in TRACE_COUNTERS.items():
            assert got.metrics[metric] == trace[counter], (case["id"], metric)
        assert got.metrics["item_accuracy"] == pytest.approx(trace["item_score"], abs=1e-12)
        assert got.metrics["score_accuracy"] == pytest.approx(trace["score_score"], abs=1e-12)
        checked += 1
    assert checked > 60


def test_golden_extraction_branch_matches_trace() -> None:
    for case in _golden():
        _, branch = paper_answer_text(case["response"])
        assert branch == case["trace"]["extraction"], case["id"]


def test_keyerror_bug_is_error_status_with_zero_reward() -> None:
    """tg_038 (docs/reference.md#quirks, Q2): binary gives 1, task-specific crashes into 0 in the
    reference."""
    case = next(c for c in _golden() if c["id"] == "tg_038")
    binary, task = _paper(case, "binary"), _paper(case, "task_specific")
    assert (binary.reward, binary.status) == (1.0, Status.OK)
    assert (task.reward, task.status) == (0.0, Status.ERROR)
    assert "KeyError" in task.message


def _tiny_states() -> tuple[dict[str, Any], dict[str, Any]]:
    room = {"name": "room (ID: 1)", "uuid": 1, "type": "World", "properties": {}, "contains": []}
    box = {"name": "box (ID: 2)", "uuid": 2, "type": "Box", "properties": {"isOpen": False}}
    box["contains"] = []
    score = {"score": 0, "gameOver": False, "gameWon": False}
    return {"game_state": [room, box, score]}, {"game_state": [room, dict(box), score]}


def test_recovery_drops_new_objects_and_keeps_unremovable() -> None:
    """reference step 5 by hand: a new uuid is dropped; ``removed: 2`` (an int) removes nothing."""
    current, _ = _tiny_states()
    ghost = {"uuid": 9, "properties": {}, "contains": []}
    recovered = recover_game_state_from_partial(
        current, {"modified": [ghost], "removed": 2, "score": {}}
    )
    uuids = [e.get("uuid") for e in recovered["game_state"]]
    assert uuids == [1, 2, None]
    no_score = recover_game_state_from_partial(current, {"modified": [], "removed": [2]})
    assert [e.get("uuid") for e in no_score["game_state"]] == [1]


def test_missing_data_action_is_invalid_input_in_paper() -> None:
    """The reference reads extra_info['data_action'] and returns 0 without it; we say why."""
    current, target = _tiny_states()
    answer = 'The final answer is: {"modified": [], "removed": [], "score": {}}'
    info = {"data_state": json.dumps(current)}
    got = score_text_game(answer, json.dumps(target), info, variant="paper")
    assert (got.reward, got.status) == (0.0, Status.INVALID_INPUT)
    assert "data_action" in got.message
    info["data_action"] = "look"
    assert score_text_game(answer, json.dumps(target), info, variant="paper").reward == 1.0
