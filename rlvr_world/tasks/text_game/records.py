"""GPT-simulator / ByteSized32 transition records and the train/test split.

One JSON Lines record (``test.jsonl``, ``crawl/<game>.jsonl.gz``) is
``{game, state_id, current_state, action_state, tick_state, current_score_state,
next_score_state}``; each ``*_state`` holds ``objects`` and ``max_UUID`` among other fields, and the
action is ``tick_state.lastAction``. The paper's "full" transition
(docs/reference.md#text-game-states) goes from ``current_state.objects + [current_score_state]``
to ``tick_state.objects + [next_score_state]``;
the UUID base of the prompt ("The current game UUID base is N") is ``current_state.max_UUID``, as in
GPT-simulator's ``quest_gpt.py`` (checked against the rebuilt rows: the base is 7 for lit-lightbulb
record 0, whose objects have uuids 0-6).

Splits:

* *changed* / *unchanged*: ``Transition.changed`` is the paper's "gold" label
  (``diff.is_gold``: an object present in both states changed); ``has_diff`` is the wider "the
  expected answer is not empty" (adds, removals and score changes included);
* *train*: every (game, state_id) of the crawl that is not in ``test.jsonl`` (data README).
"""

from __future__ import annotations

import logging
import random
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlvr_world.tasks.jsonl import iter_records
from rlvr_world.tasks.text_game.diff import is_gold, state_diff

logger = logging.getLogger(__name__)

__all__ = [
    "Transition",
    "iter_crawl",
    "iter_records",
    "load_test_keys",
    "load_transitions",
    "split_changed",
    "train_transitions",
    "transition_from_record",
]

RECORD_KEYS = ("game", "state_id", "current_state", "tick_state", "current_score_state")


@dataclass(frozen=True)
class Transition:
    """One full text-game transition (objects plus the score entry, last)."""

    game: str
    state_id: int
    action: str
    task_desc: str
    current: list[dict[str, Any]]
    target: list[dict[str, Any]]
    uuid_base: int

    @property
    def key(self) -> tuple[str, int]:
        """``(game, state_id)``, which identifies the transition."""
        return (self.game, self.state_id)

    @property
    def changed(self) -> bool:
        """The paper's "gold" label (``diff.is_gold``)."""
        return is_gold(self.current, self.target)

    @property
    def has_diff(self) -> bool:
        """Whether the expected answer is not empty (adds, removals, score included)."""
        diff = state_diff(self.current, self.target)
        return bool(diff["modified"] or diff["removed"] or diff["score"])

    def diff(self) -> dict[str, Any]:
        """The expected answer, ``diff.state_diff(current, target)``."""
        return state_diff(self.current, self.target)


def _field(record: Mapping[str, Any], *path: str) -> object:
    value: Any = record
    for i, name in enumerate(path):
        if not isinstance(value, Mapping) or name not in value:
            raise ValueError(f"transition record: missing field {'.'.join(path[: i + 1])!r}")
        value = value[name]
    return value


def _objects(record: Mapping[str, Any], state: str) -> list[dict[str, Any]]:
    """The objects of one state, without a score entry already appended to them.

    GPT-simulator's ``quest_gpt.py`` appends the score entry to the record's own ``objects`` list
    (``make_game_state`` shares it), so records saved after it ran (``test_sample_300.jsonl``)
    carry the score there too; it is dropped here and taken from the ``*_score_state`` field.
    """
    objects = _field(record, state, "objects")
    if not isinstance(objects, list) or not all(isinstance(o, dict) for o in objects):
        raise ValueError(f"transition record: {state}.objects must be a list of objects")
    return [o for o in objects if "uuid" in o or "score" not in o]


def _score(record: Mapping[str, Any], name: str) -> dict[str, Any]:
    score = _field(record, name)
    if not isinstance(score, dict):
        raise ValueError(f"transition record: {name} must be an object")
    return score


def transition_from_record(record: Mapping[str, Any]) -> Transition:
    """A ``Transition`` from one decoded record; ``ValueError`` names a missing or bad field."""
    state_id = _field(record, "state_id")
    uuid_base = _field(record, "current_state", "max_UUID")
    if isinstance(state_id, bool) or not isinstance(state_id, int):
        raise ValueError("transition record: state_id must be an integer")
    if isinstance(uuid_base, bool) or not isinstance(uuid_base, int):
        raise ValueError("transition record: current_state.max_UUID must be an integer")
    return Transition(
        game=str(_field(record, "game")),
        state_id=state_id,
        action=str(_field(record, "tick_state", "lastAction")),
        task_desc=str(_field(record, "current_state", "taskDesc")),
        current=[*_objects(record, "current_state"), _score(record, "current_score_state")],
        target=[*_objects(record, "tick_state"), _score(record, "next_score_state")],
        uuid_base=uuid_base,
    )


def load_transitions(path: str | Path) -> Iterator[Transition]:
    """Transitions of a record file (``test.jsonl``, ``crawl/<game>.jsonl.gz``), in file order."""
    for record in iter_records(path):
        yield transition_from_record(record)


def split_changed(transitions: Iterable[Transition]) -> tuple[list[Transition], list[Transition]]:
    """``(changed, unchanged)`` by the paper's gold label, keeping the input order."""
    changed: list[Transition] = []
    unchanged: list[Transition] = []
    for t in transitions:
        (changed if t.changed else unchanged).append(t)
    return changed, unchanged


def load_test_keys(test_path: str | Path) -> set[tuple[str, int]]:
    """The (game, state_id) pairs of the test records: excluded from training."""
    return {(str(r["game"]), int(r["state_id"])) for r in iter_records(test_path)}


def iter_crawl(crawl_dir: str | Path, games: Iterable[str] | None = None) -> Iterator[Path]:
    """The crawl files ``<game>.jsonl.gz`` of a folder, sorted, optionally only ``games``."""
    crawl_dir = Path(crawl_dir)
    wanted = set(games) if games is not None else None
    for path in sorted(crawl_dir.glob("*.jsonl.gz")):
        game = path.name.removesuffix(".jsonl.gz")
        if wanted is None or game in wanted:
            yield path


def train_transitions(
    crawl_dir: str | Path,
    test_keys: set[tuple[str, int]],
    *,
    games: Iterable[str] | None = None,
    max_per_game: int | None = None,
    seed: int = 0,
) -> Iterator[Transition]:
    """Training transitions: every crawl (game, state_id) not in ``test_keys``.

    With ``max_per_game`` each game contributes a uniform sample of at most that many (reservoir
    sampling with ``seed``, returned in crawl order); the crawl is dominated by two games.
    """
    for path in iter_crawl(crawl_dir, games):
        kept: list[tuple[int, dict[str, Any]]] = []
        rng = random.Random(f"{seed}:{path.name}")
        seen = 0
        for record in iter_records(path):
            if (str(record.get("game")), record.get("state_id")) in test_keys:
                continue
            if max_per_game is None or len(kept) < max_per_game:
                kept.append((seen, record))
            else:
                slot = rng.randrange(seen + 1)
                if slot < max_per_game:
                    kept[slot] = (seen, record)
            seen += 1
        logger.debug("%s: %d training records, %d kept", path.name, seen, len(kept))
        for _, record in sorted(kept, key=lambda item: item[0]):
            yield transition_from_record(record)
