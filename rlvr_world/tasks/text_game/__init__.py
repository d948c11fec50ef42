"""Text-game state prediction (ByteSized32 / GPT-simulator, verl ``data_source = "llm_simulator"``).

* ``records``: transition records (plain or gzip JSON Lines), ``Transition``, changed/unchanged
  and train/test splits;
* ``diff``: the expected answer ``state_diff`` and the paper's "gold" label ``is_gold``;
* ``prompts``: the paper's prompt (byte-exact), a compact prompt, verl rows.
"""

from rlvr_world.tasks.text_game.diff import is_gold, state_diff
from rlvr_world.tasks.text_game.prompts import (
    DATA_SOURCE,
    PromptExamples,
    Rules,
    VerlRow,
    build_compact_prompt,
    build_paper_prompt,
    load_examples,
    load_rules,
    parse_verl_row,
    to_verl_row,
)
from rlvr_world.tasks.text_game.records import (
    Transition,
    iter_records,
    load_test_keys,
    load_transitions,
    split_changed,
    train_transitions,
    transition_from_record,
)

__all__ = [
    "DATA_SOURCE",
    "PromptExamples",
    "Rules",
    "Transition",
    "VerlRow",
    "build_compact_prompt",
    "build_paper_prompt",
    "is_gold",
    "iter_records",
    "load_examples",
    "load_rules",
    "load_test_keys",
    "load_transitions",
    "parse_verl_row",
    "split_changed",
    "state_diff",
    "to_verl_row",
    "train_transitions",
    "transition_from_record",
]
