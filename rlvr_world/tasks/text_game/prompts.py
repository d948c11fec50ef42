"""Prompts and verl rows for text-game state prediction.

``build_paper_prompt`` reproduces, byte for byte, the prompt of the paper's verl rows
(docs/reference.md#text-game-prompt): GPT-simulator's ``quest_gpt.py`` prompt for the "full" setting
with partial (diff) answers and human-written rules, two in-context examples from the example game
(``dishwasher``: one change by an action, one by a tick), then the target game, plus RLVR-World's
answer-phrase suffix. States are rendered with Python ``str()`` (single quotes, ``True``/``None``),
as the original does. About 20k characters (~6-7k tokens) a prompt.

``build_compact_prompt`` is for small models with short contexts: no rules, no examples, the state
as compact JSON, and a short instruction that names the answer format and the answer phrase that
both reward variants look for (``The final answer is:``). 1.3-4.6k characters on the test
set (median 2.4k), against 20-23k for the paper prompt.

``to_verl_row`` builds the paper's parquet row (docs/reference.md#text-game-data-rows) from a
transition and a prompt.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlvr_world.tasks.text_game.diff import state_diff
from rlvr_world.tasks.text_game.records import Transition, transition_from_record

__all__ = [
    "DATA_SOURCE",
    "PromptExamples",
    "Rules",
    "build_compact_prompt",
    "build_paper_prompt",
    "load_examples",
    "load_rules",
    "parse_verl_row",
    "to_verl_row",
]

DATA_SOURCE = "llm_simulator"
ABILITY = "next state prediction"
ANSWER_SUFFIX = (
    "\nPlease make sure to clearly indicate your answer by starting with 'The final answer is:'.\n"
)
#: Separator between per-object descriptions in ``object_rules.json``; the last part is dropped.
OBJECT_RULE_SEPARATOR = "=========="

_PREAMBLE = (
    "You are a simulator of a text game. Read the task description of a text game. Given the "
    "current game state in JSON, you need to decide the new game state after taking an action "
    "including the game score.\n"
    "You may need to create new objects when you predict the new game state. You should assign "
    "the uuid of new objects starting from the UUID base given in the instructions."
    "Your response should be in the JSON format. It should have three keys: 'modified', "
    "'removed', and 'score'. The 'modified' key stores a list of all the object states that are "
    "added or changed after taking the action. Keep it an empty list if no object is added or "
    "modified. The 'removed' key stores a list of uuids of the objects that are removed. Keep it "
    "an empty list if no object is removed. The 'score' key stores a JSON with three keys: "
    "'score', 'gameOver', and 'gameWon'. 'score' stores the current game score, 'gameOver' "
    "stores a bool value on whether the game is over, and 'gameWon' stores a bool value on "
    "whether the game is won. \n"
    "Note that while game states can be changed by actions, some game states may change over "
    "the time, which is described in the tick function of each object class. \n"
)
_TWO_EXAMPLES = (
    "Here are two examples of both cases. Both examples are from the same example game.\n"
)
_FIRST_EXAMPLE = "In the first example, the game state is changed by an action:\n"
_SECOND_EXAMPLE = (
    "In the second example from the same example game, the game state is changed over the time. "
    "Note that while in this example the game state is changed by time only, it is possible that "
    "a game state is changed by both an action and time.\n"
)


@dataclass(frozen=True)
class Rules:
    """Human-written rules per game (``rules/{object,action,score}_rules.json``)."""

    objects: Mapping[str, str]
    actions: Mapping[str, str]
    scores: Mapping[str, str]

    def for_game(self, game: str) -> tuple[str, str, str]:
        """``(object, action, score)`` rule texts of ``game``, as the prompt shows them."""
        missing = [n for n, t in self._tables() if game not in t]
        if missing:
            raise KeyError(f"rules: no {' / '.join(missing)} rules for game {game!r}")
        parts = self.objects[game].split(OBJECT_RULE_SEPARATOR)[:-1]
        return "".join(parts).strip(), self.actions[game].strip(), self.scores[game].strip()

    def _tables(self) -> tuple[tuple[str, Mapping[str, str]], ...]:
        return (("object", self.objects), ("action", self.actions), ("score", self.scores))


@dataclass(frozen=True)
class PromptExamples:
    """The in-context examples: an action-driven and (optionally) a tick-driven transition."""

    action: Transition
    tick: Transition | None


def _read_json(path: Path) -> object:
    with path.open(encoding="utf-8") as fh:
        return json.load(fh)


def _string_table(path: Path) -> dict[str, str]:
    table = _read_json(path)
    if not isinstance(table, dict) or not all(isinstance(v, str) for v in table.values()):
        raise ValueError(f"{path}: expected an object of game name -> rule text")
    return table


def load_rules(data_dir: str | Path) -> Rules:
    """Rules from GPT-simulator's layout: ``<data_dir>/rules/{object,action,score}_rules.json``."""
    rules_dir = Path(data_dir) / "rules"
    return Rules(
        objects=_string_table(rules_dir / "object_rules.json"),
        actions=_string_table(rules_dir / "action_rules.json"),
        scores=_string_table(rules_dir / "score_rules.json"),
    )


def load_examples(data_dir: str | Path) -> PromptExamples:
    """The "full" examples of ``<data_dir>/examples.json`` (keys ``full.action``, ``full.tick``)."""
    path = Path(data_dir) / "examples.json"
    table = _read_json(path)
    full = table.get("full") if isinstance(table, dict) else None
    if not isinstance(full, dict) or not isinstance(full.get("action"), dict):
        raise ValueError(f"{path}: missing the 'full.action' example record")
    tick = full.get("tick")
    return PromptExamples(
        action=transition_from_record(full["action"]),
        tick=transition_from_record(tick) if isinstance(tick, dict) else None,
    )


def _game_state(entries: list[dict[str, Any]]) -> dict[str, Any]:
    return {"game_state": entries}


def _example_block(t: Transition) -> str:
    return (
        f"Here is the game state:\n{_game_state(t.current)}\n\n"
        f"The current game UUID base is {t.uuid_base}\n"
        f"The action to take is: {t.action}\n"
        f"The expected response is:\n{state_diff(t.current, t.target)}\n\n"
    )


def build_paper_prompt(transition: Transition, rules: Rules, examples: PromptExamples) -> str:
    """The paper's prompt for one transition (module docstring); byte-equal to the verl rows."""
    ex = examples.action
    ex_objects, ex_actions, ex_score = rules.for_game(ex.game)
    objects, actions, score = rules.for_game(transition.game)
    parts = [_PREAMBLE]
    if examples.tick is not None:
        parts.append(_TWO_EXAMPLES)
    parts += [
        f"Example game task description:\n{ex.task_desc}\n",
        f"Here are the descriptions of all game objects properties in the example game:\n"
        f"{ex_objects}\n",
        f"Here are the descriptions of all game actions in the example game:\n{ex_actions}\n",
        f"Here is a description of the score function of the example game:\n{ex_score}\n",
    ]
    if examples.tick is not None:
        parts += [
            _FIRST_EXAMPLE,
            _example_block(ex),
            _SECOND_EXAMPLE,
            _example_block(examples.tick),
        ]
    else:
        parts.append(_example_block(ex))
    parts += [
        f"Here is the game that you need to simulate:\nTask Description:\n{transition.task_desc}\n",
        f"Here are the descriptions of all game objects properties:\n{objects}\n",
        f"Here are the descriptions of all game actions:\n{actions}\n",
        f"Here is a description of the game score function:\n{score}\n",
        f"Here is the game state:\n{_game_state(transition.current)}\n\n",
        f"The current game UUID base is {transition.uuid_base}\n",
        f"The action to take is:\n{transition.action}\n",
        ANSWER_SUFFIX,
    ]
    return "".join(parts)


COMPACT_INSTRUCTION = (
    "You simulate a text game. Given the game state (JSON objects, the last entry is the score) "
    "and an action, predict the state after the action and one time step.\n"
    'Answer with JSON {"modified": [...], "removed": [...], "score": {...}}: "modified" lists '
    "the full new state of every object that changed or was created (new objects get uuids "
    'starting from the UUID base), "removed" lists the uuids of removed objects, "score" is '
    '{"score", "gameOver", "gameWon"} if any of them changed, else {}.\n'
    "End with: The final answer is: <JSON>\n"
)


def build_compact_prompt(transition: Transition, *, instruction: bool = True) -> str:
    """A short prompt for small models: instruction, task, JSON state, UUID base, action.

    ``instruction=False`` leaves the instruction paragraph out (about 120 tokens): a model trained
    from scratch on the targets cannot read it, and it costs every forward pass."""
    state = json.dumps(transition.current, separators=(",", ":"), ensure_ascii=False)
    return (
        f"{COMPACT_INSTRUCTION if instruction else ''}"
        f"Task: {transition.task_desc}\n"
        f"State: {state}\n"
        f"UUID base: {transition.uuid_base}\n"
        f"Action: {transition.action}\n"
    )


def to_verl_row(transition: Transition, prompt: str, split: str, index: int) -> dict[str, Any]:
    """The paper's verl parquet row (docs/reference.md#text-game-data-rows) of a transition."""
    return {
        "data_source": DATA_SOURCE,
        "prompt": [{"role": "user", "content": prompt}],
        "ability": ABILITY,
        "reward_model": {
            "style": "rule",
            "ground_truth": json.dumps(_game_state(transition.target)),
        },
        "extra_info": {
            "split": split,
            "index": index,
            "data_state": json.dumps(_game_state(transition.current)),
            "data_action": transition.action,
        },
    }


@dataclass(frozen=True)
class VerlRow:
    """The parts of a paper verl row that a trainer or evaluator needs."""

    prompt: str
    current: list[dict[str, Any]]
    target: list[dict[str, Any]]
    action: str
    split: str
    index: int


def _decoded_state(field: str, text: Any) -> list[dict[str, Any]]:
    state = json.loads(text) if isinstance(text, str) else text
    entries = state.get("game_state") if isinstance(state, dict) else None
    if not isinstance(entries, list):
        raise ValueError(f"verl row: {field} must hold {{'game_state': [...]}}")
    return entries


def parse_verl_row(row: Mapping[str, Any]) -> VerlRow:
    """Read back a paper row (from parquet or ``to_verl_row``); ``ValueError`` names the field."""
    try:
        messages = row["prompt"]
        extra = row["extra_info"]
        ground_truth = row["reward_model"]["ground_truth"]
    except (KeyError, TypeError) as exc:
        raise ValueError(f"verl row: missing field {exc}") from exc
    prompt = "".join(str(m["content"]) for m in messages if m.get("role") == "user")
    return VerlRow(
        prompt=prompt,
        current=_decoded_state("extra_info.data_state", extra.get("data_state")),
        target=_decoded_state("reward_model.ground_truth", ground_truth),
        action=str(extra.get("data_action", "")),
        split=str(extra.get("split", "")),
        index=int(extra.get("index", -1)),
    )
