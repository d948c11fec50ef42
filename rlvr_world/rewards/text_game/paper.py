"""The paper's text-game reward, reimplemented from docs/reference.md#text-game-reward.

Every quirk is kept (docs/reference.md#text-game-reward and #quirks): the blind literal rewrite,
``json_repair`` then ``dirtyjson``, new objects dropped by the recovery, removals unverified,
``removed`` given as an int / string / null removing nothing, a missing ``score`` key giving no
score entry, Python equality (``1 == 1.0 == True``), names and types never compared, the
task-specific ``KeyError`` on a predicted property key absent from both states (reward 0 although
binary gives 1).

The functions below operate on untyped decoded values (``Any``) on purpose: the reference applies
``in``, indexing and iteration to whatever the model produced (a string's ``in`` is a substring
test, a list's a membership test), and parity needs the very same operations.

Where the reference returns 0 because something failed, the reward is 0.0 as well, but the status
says so (``unparseable`` for an answer it could not use, ``error`` for its own bugs), never ``ok``.

Deliberate differences, both about resource limits: responses over ``MAX_RESPONSE_CHARS`` and
answers over ``MAX_REPAIR_CHARS`` are not parsed (``unparseable``), where the reference would spend
minutes in ``json_repair``; and a missing ``extra_info.data_action``, which makes the reference
raise ``KeyError`` and return 0, is reported as ``invalid_input`` (reward 0).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rlvr_world.rewards.text_game.common import GameInputs, task_specific_reward
from rlvr_world.rewards.text_game.extract import ParseFailure, paper_parse
from rlvr_world.rewards.types import RewardResult, Status, failed


@dataclass
class Counts:
    """``evaluate``'s four counters; all -1 when it hit "Wrong prediction format"."""

    errors: int = 0
    score_errors: int = 0
    correct: int = 0
    score_correct: int = 0
    failure: str = field(default="")


def score_paper(response: str, inputs: GameInputs, reward_type: str) -> RewardResult:
    """Reference ``compute_score`` for one response; see the module docstring for statuses."""
    pred = paper_parse(response)
    if isinstance(pred, ParseFailure):
        return failed(Status.UNPARSEABLE, pred.reason)
    try:
        has_keys = "modified" in pred and "removed" in pred
    except TypeError:
        has_keys = False  # e.g. a number: the reference's membership test raises, reward 0
    if not has_keys:
        return failed(Status.UNPARSEABLE, "answer lacks 'modified' or 'removed' (reference: 0)")
    if inputs.action is None:
        return failed(
            Status.INVALID_INPUT,
            "extra_info.data_action: missing (the reference reads it and returns 0)",
        )
    predicted = recover_game_state_from_partial(inputs.current, pred)
    counts = evaluate(predicted, inputs.target)
    if counts.failure:
        return failed(Status.UNPARSEABLE, f"evaluate: wrong prediction format ({counts.failure})")
    return _finish(counts, inputs, predicted, reward_type)


def _finish(
    counts: Counts, inputs: GameInputs, predicted: dict[str, Any], reward_type: str
) -> RewardResult:
    n_items = counts.correct + counts.errors
    n_score = counts.score_correct + counts.score_errors
    if n_items == 0 or n_score == 0:
        return failed(Status.ERROR, "reference ZeroDivisionError: nothing to compare in the target")
    item = counts.correct / n_items
    score = counts.score_correct / n_score
    exact = item == 1 and score == 1
    metrics = {
        "item_accuracy": item,
        "score_accuracy": score,
        "exact": float(exact),
        "n_fields": float(n_items),
        "n_correct": float(counts.correct),
        "n_errors": float(counts.errors),
        "n_score_correct": float(counts.score_correct),
        "n_score_errors": float(counts.score_errors),
    }
    if reward_type == "binary":
        return RewardResult(reward=float(int(exact)), status=Status.OK, metrics=metrics)
    try:
        changed, note = changed_terms(inputs.current, inputs.target, predicted)
    except KeyError as exc:
        return RewardResult(
            reward=0.0,
            status=Status.ERROR,
            metrics=metrics,
            message=f"reference KeyError {exc}: a predicted property key that the object has in "
            "neither state (docs/reference.md#quirks, Q2); reward 0 as in the reference",
        )
    if changed:
        metrics["changed_accuracy"] = sum(changed) / len(changed)
    metrics["n_changed"] = float(len(changed))
    reward = task_specific_reward(item, score, exact, changed)
    return RewardResult(reward=reward, status=Status.OK, metrics=metrics, message=note)


# --------------------------------------------------------------------------------------------
# recover_game_state_from_partial


def recover_game_state_from_partial(current: dict[str, Any], partial: Any) -> dict[str, Any]:
    """The predicted full state: current objects with ``modified`` entries swapped in.

    Entries whose uuid is not in the current state are dropped; ``removed`` must support ``in``;
    the score entry is the predicted one if non-empty, else the current one, and absent when the
    prediction has no ``score`` key (``has_score=True`` path of the reference).
    """
    is_dict = isinstance(partial, dict)
    modified = _modified_map(partial) if is_dict and "modified" in partial else {}
    entries: list[Any] = []
    for obj in current["game_state"][:-1]:
        if is_dict and "removed" in partial and _is_removed(obj["uuid"], partial["removed"]):
            continue
        entries.append(modified.get(obj["uuid"], obj))
    if is_dict and "score" in partial:
        entries.append(_score_entry(partial["score"], current["game_state"][-1]))
    return {"game_state": entries}


def _modified_map(partial: Any) -> dict[Any, Any]:
    out: dict[Any, Any] = {}
    try:
        for entry in partial["modified"]:
            try:
                out[entry["uuid"]] = entry
            except Exception:  # the reference skips any entry that cannot be indexed or hashed
                continue
    except Exception:  # not iterable (e.g. null): the reference uses an empty map
        return {}
    return out


def _is_removed(uuid: Any, removed: Any) -> bool:
    try:
        return bool(uuid in removed) or bool(uuid == removed)
    except Exception:  # e.g. ``removed`` is an int: the reference swallows the TypeError
        return False


def _score_entry(score: Any, current_score: Any) -> object:
    try:
        return score if len(score) > 0 else current_score
    except Exception:  # e.g. an int score: len() raises, the current score is used
        return current_score


# --------------------------------------------------------------------------------------------
# evaluate


def make_state_for_comparison(entries: Any) -> tuple[dict[Any, Any], Any]:
    """``(uuid -> object, score entry)``; ``in`` is a key, substring or membership test."""
    objects: dict[Any, Any] = {}
    score: Any = {}
    for entry in entries:
        if "uuid" in entry:
            objects[entry["uuid"]] = entry
        elif "score" in entry:
            score = entry
    return objects, score


def compare_dict(a: Any, b: Any) -> bool:
    """The reference's recursive dict equality (lists and tuples compare as lists)."""
    if len(a) != len(b):
        return False
    return all(key in b and not values_differ(a[key], b[key]) for key in a)


def values_differ(a: Any, b: Any) -> bool:
    """Exact-type dispatch of the reference: predicted (dirtyjson) containers fall through to !=."""
    if type(a) in (list, tuple) and type(b) in (list, tuple):
        return list(a) != list(b)
    if type(a) is dict and type(b) is dict:
        return not compare_dict(a, b)
    return bool(a != b)


def evaluate(prediction: dict[str, Any], target: dict[str, Any]) -> Counts:
    """Counters of ``evaluate(..., evaluate_score=True)``; any exception -> ``failure`` set."""
    counts = Counts()
    try:
        tgt, score_t = make_state_for_comparison(target["game_state"])
        pred, score_p = make_state_for_comparison(prediction["game_state"])
        for uuid, tobj in tgt.items():
            _compare_object(tobj, pred.get(uuid, _MISSING), counts)
        for key in score_t:
            ok = key in score_p and not bool(score_t[key] != score_p[key])
            if key in score_p:
                _ = str(score_p[key])  # the reference formats the value into its log
            counts.score_correct += ok
            counts.score_errors += not ok
    except (
        Exception
    ) as exc:  # the reference returns -1s on any exception ("Wrong prediction format")
        return Counts(-1, -1, -1, -1, failure=f"{type(exc).__name__}: {exc}"[:200])
    return counts


_MISSING = object()


def _compare_object(tobj: Any, pobj: Any, counts: Counts) -> None:
    _ = tobj["name"]  # the reference formats the name into its log in every branch
    if pobj is _MISSING:
        counts.errors += 1
        return
    if "properties" not in pobj:
        counts.errors += 1
    else:
        t, p = tobj["properties"], pobj["properties"]
        for key in t:
            ok = key in p and not values_differ(t[key], p[key])
            if key in p:
                _ = str(p[key])  # the reference formats the value into its log; str() can raise
            counts.correct += ok
            counts.errors += not ok
    if "contains" not in pobj:
        counts.errors += 1
    else:
        ok = sorted(tobj["contains"]) == sorted(pobj["contains"])
        _ = str(pobj["contains"])
        counts.correct += ok
        counts.errors += not ok


# --------------------------------------------------------------------------------------------
# task-specific term


def get_state_diff_detail_v2(state_1: Any, state_2: Any) -> dict[str, list[Any]]:
    """Per-property diff of two states: ``modified`` holds ``(key, obj_1, obj_2, code)`` with
    code 1 = equal, 0 = differs, 2 = key missing in state 2, 3 = key only in state 2."""
    objs_1, _ = make_state_for_comparison(state_1["game_state"])
    objs_2, _ = make_state_for_comparison(state_2["game_state"])
    diffs: dict[str, list[Any]] = {"added": [], "removed": [], "modified": [], "same": []}
    for uuid in objs_1:
        if uuid not in objs_2:
            diffs["removed"].append((objs_1[uuid], None))
            continue
        o1, o2 = objs_1[uuid], objs_2[uuid]
        p1, p2 = o1["properties"], o2["properties"]
        for key in p1:
            if key not in p2:
                diffs["modified"].append((key, o1, None, 2))
            else:
                diffs["modified"].append((key, o1, o2, 0 if values_differ(p1[key], p2[key]) else 1))
        for key in p2:
            if key not in p1:
                diffs["modified"].append((key, o1, o2, 3))
        same = sorted(o1.get("contains", [])) == sorted(o2.get("contains", []))
        diffs["modified"].append(("contains", o1, o2, 1 if same else 0))
    for uuid in objs_2:
        if uuid not in objs_1:
            diffs["added"].append((None, objs_2[uuid]))
    return diffs


def gold_changed_flags(current: Any, target: Any) -> dict[Any, dict[Any, Any]]:
    """uuid -> key -> 1 (changed), 0 (unchanged) or 'na' (object added or removed)."""
    gold = get_state_diff_detail_v2(current, target)
    stat: dict[Any, dict[Any, Any]] = {}
    for _, obj in gold["added"]:
        stat[obj["uuid"]] = {"contains": 1} | {key: "na" for key in obj["properties"]}
    for obj, _ in gold["removed"]:
        stat[obj["uuid"]] = {"contains": 1} | {key: "na" for key in obj["properties"]}
    for key, obj_1, obj_2, code in gold["modified"]:
        uuid = obj_2["uuid"] if obj_2 is not None else obj_1["uuid"]
        stat.setdefault(uuid, {})[key] = 0 if code == 1 else 1
    return stat


def changed_terms(current: Any, target: Any, predicted: Any) -> tuple[list[int], str]:
    """The list averaged into the task-specific reward, and a note when it was skipped.

    A failure of the diff of target vs prediction leaves the list empty, as in the reference; a
    predicted key unknown to both states raises ``KeyError`` out of here (the reference's bug).
    """
    stat = gold_changed_flags(current, target)
    try:
        diffs = get_state_diff_detail_v2(target, predicted)
    except Exception as exc:  # the reference catches this one and drops the changed term
        return [], f"changed-field term skipped as in the reference ({type(exc).__name__})"
    out: list[int] = []
    for key, obj_1, obj_2, code in diffs["modified"]:
        uuid = obj_1["uuid"] if obj_1 is not None else obj_2["uuid"]
        if stat[uuid][key] == 1:
            out.append(1 if code == 1 else 0)
    return out, ""
