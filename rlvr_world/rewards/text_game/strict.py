"""Strict text-game reward: the paper's metric with the text-game bugs fixed (QN below: the
quirks of docs/reference.md#quirks).

What is compared. Every object has *fields*: ``contains`` (a multiset: order ignored, duplicates
count) and one field per property key. ``name`` and ``type`` are not compared, as in the paper: the
task's own gold diffs (GPT-simulator's ``get_state_diff``, also used for the prompt's examples)
ignore them, so a name-only change (``tree`` -> ``chopped down tree``) is never in the expected
answer. The predicted state is the current
state with ``removed`` uuids taken out and every ``modified`` entry put in, **new uuids included**
(Q1). Then, against the target:

* a target object the prediction lacks costs one error per field it has (Q13: the paper charges
  one error however many fields vanish);
* a predicted object the target lacks (a failed removal, a wrong new object) costs one error per
  field it has (Q4: the paper never looks at it);
* each target field is right or wrong; a predicted property key the target lacks is one error
  (an *extra* key; it never crashes, Q2); a ``properties`` value that is not an object is one
  error, and its target keys count as missing;
* answer-level mistakes cost one error each: a ``modified`` entry that is not an object with an
  integer (or string) uuid, a ``removed`` uuid not in the current state, a uuid both modified
  and removed (the removal wins), two different entries for one uuid (the last wins).

uuids are matched exactly: ``"2"`` is not ``2`` (no normalisation), and booleans are not uuids.
Values compare by JSON meaning: ``120 == 120.0``, but ``true != 1`` and ``"1" != 1``; lists are
ordered; tuples (from a Python ``repr``) are lists.

Score. ``score: {}`` means "unchanged" (the current score entry); a non-empty object is the
predicted score entry, compared key by key, extra keys counting as errors. **A missing ``score``
key, or one that is not an object (``0``, ``null``, a list), counts every target score field as
wrong** (metric ``score_missing`` / ``score_invalid`` = 1): the prompt asks for three keys, and
``{}`` is the explicit way to say "unchanged", so an answer without it is not exact (Q5; the paper
does the same for a missing key by accident and treats an int as "unchanged").

Reward. ``item_accuracy`` = right / (right + wrong) over object fields and answer-level errors
(1.0 when there is nothing to compare), ``score_accuracy`` likewise over score fields,
``exact`` = no error anywhere. *Changed fields* are the fields whose value differs between the
current and the target state (a key added or dropped included), every field of an added object,
and the presence of a removed object; ``changed_accuracy`` is the fraction the prediction gets
right (a dropped key is right when the prediction drops it, a removed object when it is gone).
Binary = ``exact``; task-specific = ``0.09 item + 0.01 score + 0.2 exact + changed_accuracy``
(the last term only when something changed), so a perfect answer scores 1.3 on a transition that
changes anything, adds and removals included, and 0.3 otherwise.

Parsing is in ``extract.strict_parse`` (EOS text removed, Python literals decoded without the
blind rewrite). An answer whose ``modified`` or ``removed`` is not a list is ``unparseable``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field
from typing import Any

from rlvr_world.rewards.text_game.common import GameInputs, task_specific_reward
from rlvr_world.rewards.text_game.extract import ParseFailure, strict_parse
from rlvr_world.rewards.types import RewardResult, Status, failed

FieldKey = tuple[Any, ...]
ABSENT: tuple[str] = ("absent",)
PRESENT: FieldKey = ("<present>",)
#: Answer errors quoted in a result's note (the rest are counted).
NOTE_ERRORS = 3
#: Longest value repr quoted in an answer error, "..." included.
NOTE_VALUE_CHARS = 60
_CUT = "..."


@dataclass
class Prediction:
    """The predicted full state plus what was wrong with the answer's shape."""

    objects: dict[Any, Mapping[str, Any]]
    score: Mapping[str, Any] | None
    score_problem: str = ""
    answer_errors: list[str] = field(default_factory=list)


@dataclass
class Tally:
    """Right and wrong counts of one kind of check."""

    correct: int = 0
    errors: int = 0

    def add(self, ok: bool) -> None:
        """Count one check."""
        self.correct += ok
        self.errors += not ok

    @property
    def accuracy(self) -> float:
        """The share right; 1.0 when nothing was checked."""
        total = self.correct + self.errors
        return self.correct / total if total else 1.0


def score_strict(response: str, inputs: GameInputs, reward_type: str) -> RewardResult:
    """Strict reward for one response (see the module docstring)."""
    answer = strict_parse(response)
    if isinstance(answer, ParseFailure):
        return failed(Status.UNPARSEABLE, answer.reason)
    current_objs, current_score = split_state(inputs.current["game_state"])
    target_objs, target_score = split_state(inputs.target["game_state"])
    pred = build_prediction(answer, current_objs, current_score)
    if isinstance(pred, ParseFailure):
        return failed(Status.UNPARSEABLE, pred.reason)
    pred_fields = {uuid: object_fields(obj) for uuid, obj in pred.objects.items()}
    items, n_missing, n_extra = compare_objects(target_objs, pred_fields)
    items.errors += len(pred.answer_errors)
    scores = compare_score(target_score, pred.score)
    changed = changed_fields(current_objs, target_objs)
    hits = [int(_changed_hit(c, pred_fields)) for c in changed]
    exact = items.errors == 0 and scores.errors == 0
    metrics = {
        "item_accuracy": items.accuracy,
        "score_accuracy": scores.accuracy,
        "exact": float(exact),
        "n_fields": float(items.correct + items.errors),
        "n_errors": float(items.errors),
        "n_score_errors": float(scores.errors),
        "n_missing_objects": float(n_missing),
        "n_extra_objects": float(n_extra),
        "n_answer_errors": float(len(pred.answer_errors)),
        "n_changed": float(len(hits)),
        "score_missing": float(pred.score_problem == "missing"),
        "score_invalid": float(pred.score_problem == "invalid"),
    }
    if hits:
        metrics["changed_accuracy"] = sum(hits) / len(hits)
    if reward_type == "binary":
        reward = float(exact)
    else:
        reward = task_specific_reward(items.accuracy, scores.accuracy, exact, hits)
    return RewardResult(reward=reward, status=Status.OK, metrics=metrics, message=_note(pred))


def split_state(entries: list[Any]) -> tuple[dict[Any, Mapping[str, Any]], Mapping[str, Any]]:
    """``(uuid -> object, score entry)`` of a validated state."""
    objects = {e["uuid"]: e for e in entries if "uuid" in e}
    score = next(e for e in entries if "uuid" not in e)
    return objects, score


def _valid_uuid(value: Any) -> bool:
    return isinstance(value, (int, str)) and not isinstance(value, bool)


def build_prediction(
    answer: Mapping[str, Any],
    current_objs: Mapping[Any, Mapping[str, Any]],
    current_score: Mapping[str, Any],
) -> Prediction | ParseFailure:
    """Apply the answer's ``removed`` and ``modified`` to the current objects; read its score."""
    modified, removed = answer["modified"], answer["removed"]
    if not isinstance(modified, list) or not isinstance(removed, list):
        return ParseFailure("'modified' and 'removed' must both be lists")
    pred = Prediction(objects=dict(current_objs), score=None)
    gone = _apply_removed(removed, current_objs, pred)
    _apply_modified(modified, gone, pred)
    if "score" not in answer:
        pred.score_problem = "missing"
    elif isinstance(answer["score"], dict):
        pred.score = answer["score"] or current_score
    else:
        pred.score_problem = "invalid"
    return pred


def _apply_removed(
    removed: list[Any], current_objs: Mapping[Any, Any], pred: Prediction
) -> set[Any]:
    gone: set[Any] = set()
    for uuid in removed:
        if not _valid_uuid(uuid):
            pred.answer_errors.append(f"removed: {_short(uuid)} is not a uuid")
        elif uuid not in current_objs:
            pred.answer_errors.append(f"removed: uuid {_short(uuid)} is not in the current state")
        else:
            gone.add(uuid)
            pred.objects.pop(uuid, None)
    return gone


def _apply_modified(modified: list[Any], gone: set[Any], pred: Prediction) -> None:
    seen: dict[Any, Hashable] = {}
    for entry in modified:
        if not isinstance(entry, dict) or not _valid_uuid(entry.get("uuid")):
            pred.answer_errors.append(f"modified: {_short(entry)} is not an object with a uuid")
            continue
        uuid = entry["uuid"]
        if uuid in gone:
            pred.answer_errors.append(f"modified: uuid {uuid!r} is also in removed")
            continue
        key = canon(entry)
        if uuid in seen and seen[uuid] != key:
            pred.answer_errors.append(f"modified: two different entries for uuid {uuid!r}")
        seen[uuid] = key
        pred.objects[uuid] = entry


def canon(value: Any) -> Hashable:
    """A hashable form in which two values are equal iff they mean the same JSON value."""
    if isinstance(value, bool):
        return ("b", value)
    if isinstance(value, (int, float)):
        return ("n", value)
    if isinstance(value, str):
        return ("s", value)
    if value is None:
        return ("z",)
    if isinstance(value, (list, tuple)):
        return ("l", tuple(canon(v) for v in value))
    if isinstance(value, Mapping):
        return ("d", frozenset((canon(k), canon(v)) for k, v in value.items()))
    return ("o", repr(value))


def _multiset(value: Any) -> Hashable:
    if isinstance(value, (list, tuple)):
        return ("m", frozenset(Counter(canon(v) for v in value).items()))
    return canon(value)


def object_fields(obj: Mapping[str, Any]) -> dict[FieldKey, Hashable]:
    """Field -> canonical value for one object; absent fields are absent."""
    out: dict[FieldKey, Hashable] = {}
    if "contains" in obj:
        out[("contains",)] = _multiset(obj["contains"])
    props = obj.get("properties")
    if isinstance(props, Mapping):
        for key, value in props.items():
            out[("properties", key)] = canon(value)
    elif "properties" in obj:
        out[("properties",)] = canon(props)  # not an object: an extra, wrong field
    return out


def compare_objects(
    target_objs: Mapping[Any, Mapping[str, Any]],
    pred_fields: Mapping[Any, dict[FieldKey, Hashable]],
) -> tuple[Tally, int, int]:
    """Field tally over all objects, number of missing and of extra predicted objects."""
    tally = Tally()
    n_missing = 0
    for uuid, obj in target_objs.items():
        expected = object_fields(obj)
        if uuid not in pred_fields:
            n_missing += 1
            tally.errors += len(expected)
            continue
        got = pred_fields[uuid]
        for key, value in expected.items():
            tally.add(got.get(key, ABSENT) == value)
        tally.errors += sum(1 for key in got if key not in expected)
    extra = [uuid for uuid in pred_fields if uuid not in target_objs]
    tally.errors += sum(max(1, len(pred_fields[uuid])) for uuid in extra)
    return tally, n_missing, len(extra)


def compare_score(target: Mapping[str, Any], pred: Mapping[str, Any] | None) -> Tally:
    """Score-field tally; a missing or invalid predicted score gets every field wrong."""
    tally = Tally()
    if pred is None:
        tally.errors = len(target)
        return tally
    for key, value in target.items():
        tally.add(key in pred and canon(pred[key]) == canon(value))
    tally.errors += sum(1 for key in pred if key not in target)
    return tally


def changed_fields(
    current_objs: Mapping[Any, Mapping[str, Any]], target_objs: Mapping[Any, Mapping[str, Any]]
) -> list[tuple[Any, FieldKey, Hashable]]:
    """``(uuid, field, expected value)`` for every field the transition changes."""
    out: list[tuple[Any, FieldKey, Hashable]] = []
    for uuid, obj in target_objs.items():
        after = object_fields(obj)
        if uuid not in current_objs:
            out.extend((uuid, key, value) for key, value in after.items())
            continue
        before = object_fields(current_objs[uuid])
        keys = list(after) + [key for key in before if key not in after]
        for key in keys:
            if after.get(key, ABSENT) != before.get(key, ABSENT):
                out.append((uuid, key, after.get(key, ABSENT)))
    out.extend((uuid, PRESENT, ABSENT) for uuid in current_objs if uuid not in target_objs)
    return out


def _changed_hit(
    change: tuple[Any, FieldKey, Hashable], pred_fields: Mapping[Any, dict[FieldKey, Hashable]]
) -> bool:
    uuid, key, expected = change
    if key == PRESENT:
        return uuid not in pred_fields
    got = pred_fields.get(uuid)
    return got is not None and got.get(key, ABSENT) == expected


def _note(pred: Prediction) -> str:
    parts = []
    if pred.answer_errors:
        shown = "; ".join(pred.answer_errors[:NOTE_ERRORS])
        extra = len(pred.answer_errors) - NOTE_ERRORS
        more = f" (+{extra} more)" if extra > 0 else ""
        parts.append(f"answer errors: {shown}{more}")
    if pred.score_problem:
        parts.append(f"score key {pred.score_problem}: every score field counted wrong")
    return "; ".join(parts)


def _short(value: Any) -> str:
    text = repr(value)
    if len(text) <= NOTE_VALUE_CHARS:
        return text
    return text[: NOTE_VALUE_CHARS - len(_CUT)] + _CUT
