"""Shared pieces of the text-game scorer: input loading and validation, limits, the reward formula.

Both variants read the same inputs: ``ground_truth`` (JSON of the next state) and
``extra_info["data_state"]`` (JSON of the current state), each ``{"game_state": [obj, ..., score]}``
(docs/reference.md#text-game-states). A state may also be given already decoded (a dict, or the bare
list). A malformed *reference* raises ``InvalidInput`` naming the field; a bad *prediction* never
does (the scorers return a status instead).

A valid state is a list of objects (``uuid`` an integer or string, unique; ``name`` a string;
``properties`` an object; ``contains`` a list) and exactly one score entry (an object with
``score``), which must be the last entry of the current state. These are the fields the reference
itself reads without a guard, so rejecting their absence loses no answer the reference could score
except on data the task never produces.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from rlvr_world.rewards.types import InvalidInput

#: Whole responses longer than this are not scored (status ``unparseable``), in both variants.
MAX_RESPONSE_CHARS = 2_000_000
#: ``json_repair`` is pure Python and degrades badly on brace-dense text (measured: 160 kB of
#: ``"{x} "`` takes 2 s, 2 MB takes over 200 s), so no longer text is handed to it.
MAX_REPAIR_CHARS = 131_072

VARIANTS = ("paper", "strict")
REWARD_TYPES = ("binary", "task_specific")


@dataclass(frozen=True)
class GameInputs:
    """The validated reference side of one request.

    ``current`` and ``target`` are ``{"game_state": [...]}`` dicts exactly as decoded from JSON
    (plain ``dict``/``list``), with the score entry last in ``current``. ``action`` is
    ``extra_info["data_action"]`` when present (the reference reads it, only for its log text).
    """

    current: dict[str, Any]
    target: dict[str, Any]
    action: str | None


def task_specific_reward(item: float, score: float, exact: bool, changed: Sequence[int]) -> float:
    """docs/reference.md#text-game-reward step 9, with the reference's order of float operations.

    ``0.09 * item + 0.01 * score + 0.2 * exact (+ mean(changed) when ``changed`` is non-empty)``.
    """
    base = item * 0.09 + score * 0.01 + 0.2 * int(exact)
    if not changed:
        return base
    return base + sum(changed) / len(changed)


def load_inputs(ground_truth: Any, extra_info: Any) -> GameInputs:
    """Decode and validate ``ground_truth`` and ``extra_info``; ``InvalidInput`` names the field."""
    info = _load_extra_info(extra_info)
    if "data_state" not in info:
        raise InvalidInput("extra_info.data_state: missing (JSON of the current game state)")
    current = _load_state("extra_info.data_state", info["data_state"])
    target = _load_state("ground_truth", ground_truth)
    _check_current_score_last(current["game_state"])
    action = info.get("data_action")
    if action is not None and not isinstance(action, str):
        raise InvalidInput(f"extra_info.data_action: expected a string, got {_kind(action)}")
    return GameInputs(current=current, target=target, action=action)


def _load_extra_info(extra_info: Any) -> Mapping[str, Any]:
    if extra_info is None:
        raise InvalidInput("extra_info: missing; it must hold data_state (the current game state)")
    if isinstance(extra_info, str):
        extra_info = _decode_json("extra_info", extra_info)
    if not isinstance(extra_info, Mapping):
        raise InvalidInput(f"extra_info: expected an object, got {_kind(extra_info)}")
    return extra_info


def _decode_json(field: str, text: str) -> object:
    try:
        return json.loads(text)
    except RecursionError:
        raise InvalidInput(f"{field}: JSON nested too deeply") from None
    except ValueError as exc:
        raise InvalidInput(f"{field}: not valid JSON ({exc})") from None


def _load_state(field: str, value: Any) -> dict[str, Any]:
    if isinstance(value, (str, bytes)):
        text = value.decode("utf-8", errors="replace") if isinstance(value, bytes) else value
        value = _decode_json(field, text)
    if isinstance(value, list):
        value = {"game_state": value}
    if not isinstance(value, Mapping) or not isinstance(value.get("game_state"), list):
        raise InvalidInput(f'{field}: expected {{"game_state": [...]}} or a list of entries')
    entries: list[Any] = value["game_state"]
    _check_entries(field, entries)
    return {"game_state": entries}


def _check_entries(field: str, entries: list[Any]) -> None:
    seen: set[Any] = set()
    n_scores = 0
    for i, entry in enumerate(entries):
        where = f"{field}.game_state[{i}]"
        if not isinstance(entry, Mapping):
            raise InvalidInput(f"{where}: expected an object, got {_kind(entry)}")
        if "uuid" in entry:
            uuid = _check_object(where, entry)
            if uuid in seen:
                raise InvalidInput(f"{where}.uuid: duplicate uuid {uuid!r}")
            seen.add(uuid)
        elif "score" in entry:
            n_scores += 1
        else:
            raise InvalidInput(f"{where}: neither an object (uuid) nor the score entry (score)")
    if n_scores != 1:
        raise InvalidInput(f"{field}.game_state: expected exactly one score entry, got {n_scores}")


def _check_object(where: str, obj: Mapping[str, Any]) -> int | str:
    """The object's uuid; ``InvalidInput`` naming ``where`` for a field of the wrong type."""
    uuid = obj["uuid"]
    if isinstance(uuid, bool) or not isinstance(uuid, (int, str)):
        raise InvalidInput(f"{where}.uuid: expected an integer, got {_kind(uuid)}")
    if not isinstance(obj.get("name"), str):
        raise InvalidInput(f"{where}.name: expected a string")
    if not isinstance(obj.get("properties"), Mapping):
        raise InvalidInput(f"{where}.properties: expected an object")
    if not isinstance(obj.get("contains"), list):
        raise InvalidInput(f"{where}.contains: expected a list")
    return uuid


def _check_current_score_last(entries: list[Any]) -> None:
    last = entries[-1] if entries else None
    if not isinstance(last, Mapping) or "uuid" in last:
        raise InvalidInput("extra_info.data_state.game_state: the score entry must be last")


def _kind(value: Any) -> str:
    return "null" if value is None else type(value).__name__
