"""State-diff targets for text-game transitions (docs/reference.md#text-game-states).

A state is a list of entries: objects ``{name, uuid, type, properties, contains}`` and one score
entry ``{score, gameOver, gameWon}`` (last by convention). ``state_diff(current, target)`` is the
answer the model must give:

* ``modified``: the *full* target object of every object whose ``properties`` or ``contains``
  changed (in current-state order), then every object created by the transition (in target order);
* ``removed``: the uuids of the current objects the target lacks (in current-state order);
* ``score``: the target score entry when any score field changed, else ``{}``.

This is GPT-simulator's ``get_state_diff`` / ``make_game_state_partial`` rule, which built the
paper's in-context example answers, with two differences:

* created objects are put in ``modified`` as the object itself (the original stores the whole
  uuid -> object table there, docs/reference.md#quirks, Q10);
* values are compared by JSON meaning (``1 == 1.0`` but ``true != 1``; lists ordered, tuples are
  lists; ``contains`` is a multiset), the same rule as the ``strict`` reward, so a diff built here
  always scores an exact match there. The original uses Python ``==`` (``True == 1``).

Like the original, ``name`` and ``type`` are not compared: a rename on its own is not a change
(the rewards never compare them either).

``is_gold(current, target)`` is the paper's train-set "gold" label
(docs/reference.md#text-game-data-rows): some object present in both states has a property value
changed, a property key added or dropped, or its ``contains`` changed
(``get_state_diff_detail_v2``'s ``modified`` entries with a code other than 1). Adding or removing
an object, or a score change, does not on its own make a transition gold.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable, Mapping, Sequence
from typing import Any

from rlvr_world.rewards.text_game.strict import canon

State = Sequence[Mapping[str, Any]]

__all__ = ["is_gold", "objects_of", "same_value", "score_of", "state_diff"]


def objects_of(state: State) -> dict[Any, Mapping[str, Any]]:
    """``uuid -> object`` for the entries that carry a ``uuid`` (the score entry has none)."""
    return {entry["uuid"]: entry for entry in state if "uuid" in entry}


def score_of(state: State) -> Mapping[str, Any]:
    """The last entry with a ``score`` key and no ``uuid``; ``{}`` when there is none."""
    found: Mapping[str, Any] = {}
    for entry in state:
        if "uuid" not in entry and "score" in entry:
            found = entry
    return found


def same_value(a: Any, b: Any) -> bool:
    """Equal by JSON meaning (bool is not a number; lists ordered; dict key order ignored)."""
    return canon(a) == canon(b)


def _contains_key(obj: Mapping[str, Any]) -> Hashable:
    items = obj.get("contains", [])
    if not isinstance(items, (list, tuple)):
        return canon(items)
    return frozenset(Counter(canon(item) for item in items).items())


def _properties(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    props = obj.get("properties", {})
    if not isinstance(props, Mapping):
        raise ValueError(f"object uuid {obj.get('uuid')!r}: 'properties' is not an object")
    return props


def object_changed(before: Mapping[str, Any], after: Mapping[str, Any]) -> bool:
    """Whether a property (value, added or dropped key) or ``contains`` differs."""
    props_a, props_b = _properties(before), _properties(after)
    if props_a.keys() != props_b.keys():
        return True
    if any(not same_value(props_a[key], props_b[key]) for key in props_a):
        return True
    return _contains_key(before) != _contains_key(after)


def _score_changed(before: Mapping[str, Any], after: Mapping[str, Any]) -> bool:
    keys = set(before) | set(after)
    return any(key not in before or key not in after for key in keys) or any(
        not same_value(before[key], after[key]) for key in keys
    )


def state_diff(current: State, target: State) -> dict[str, Any]:
    """The expected answer ``{"modified": [...], "removed": [...], "score": {...}}``."""
    cur, tgt = objects_of(current), objects_of(target)
    modified: list[Mapping[str, Any]] = []
    removed: list[Any] = []
    for uuid, obj in cur.items():
        if uuid not in tgt:
            removed.append(uuid)
        elif object_changed(obj, tgt[uuid]):
            modified.append(tgt[uuid])
    modified.extend(obj for uuid, obj in tgt.items() if uuid not in cur)
    score_now, score_next = score_of(current), score_of(target)
    score = dict(score_next) if _score_changed(score_now, score_next) else {}
    return {"modified": modified, "removed": removed, "score": score}


def is_gold(current: State, target: State) -> bool:
    """The paper's "gold" label: an object present in both states changed (module docstring)."""
    cur, tgt = objects_of(current), objects_of(target)
    return any(object_changed(obj, tgt[uuid]) for uuid, obj in cur.items() if uuid in tgt)
