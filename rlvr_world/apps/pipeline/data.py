"""Prompt items of a pipeline run: the synthetic kitchen game or GPT-simulator records.

Transitions are split into train and held-out by a stable hash of (state, action), then capped
(``max_train`` a seeded sample, ``max_test`` the first in order), and turned into compact-prompt
``PromptItem``s (state-diff target, ``extra_info.data_state`` as the paper's rows).
"""

from __future__ import annotations

import random

from rlvr_world.apps.pipeline.config import DataConfig
from rlvr_world.items import PromptItem, text_game_item
from rlvr_world.tasks.text_game import Transition, load_transitions
from rlvr_world.tasks.text_game.kitchen import enumerate_transitions, split_transitions


def transitions(cfg: DataConfig) -> list[Transition]:
    """Every transition of the configured source, in a deterministic order."""
    if cfg.records is not None:
        return list(load_transitions(cfg.records))
    return enumerate_transitions(cfg.kitchen.slices, cfg.kitchen.goal)


def build_items(cfg: DataConfig) -> tuple[list[PromptItem], list[PromptItem]]:
    """``(train, test)`` prompt items (module docstring)."""
    train, test = split_transitions(transitions(cfg), cfg.test_fraction, cfg.seed)
    rng = random.Random(cfg.seed)
    rng.shuffle(train)
    train = train[: cfg.max_train]
    test = test[: cfg.max_test]
    return (
        [
            text_game_item(t, f"train-{t.game}-{t.state_id}", split="train", index=i)
            for i, t in enumerate(train)
        ],
        [
            text_game_item(t, f"test-{t.game}-{t.state_id}", split="test", index=i)
            for i, t in enumerate(test)
        ],
    )
