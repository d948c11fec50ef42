"""Prompt items of a pipeline run: the synthetic kitchen game or GPT-simulator records.

Transitions are split into train and held-out by a stable hash of (seed, state, action), then
capped (``max_train`` a seeded sample, ``max_test`` a seeded draw of the held-out split), and
turned into ``PromptItem``s (state-diff target, ``extra_info.data_state`` as the paper's rows) with
the configured prompt: ``compact`` or ``bare`` (compact without the instruction paragraph).
"""

from __future__ import annotations

import random

from rlvr_world.apps.pipeline.config import DataConfig
from rlvr_world.items import PromptItem, text_game_item
from rlvr_world.tasks.text_game import Transition, build_compact_prompt, load_transitions
from rlvr_world.tasks.text_game.kitchen import enumerate_transitions, split_transitions


def transitions(cfg: DataConfig) -> list[Transition]:
    """Every transition of the configured source, in a deterministic order."""
    if cfg.records is not None:
        return list(load_transitions(cfg.records))
    return enumerate_transitions(cfg.kitchen.slices, cfg.kitchen.goal)


def prompt_of(cfg: DataConfig, t: Transition) -> str:
    """The prompt text of one transition in the configured style."""
    return build_compact_prompt(t, instruction=cfg.prompt == "compact")


def build_items(cfg: DataConfig, seed: int) -> tuple[list[PromptItem], list[PromptItem]]:
    """``(train, test)`` prompt items (module docstring); the same for the same ``seed``."""
    train, test = split_transitions(transitions(cfg), cfg.test_fraction, seed)
    rng = random.Random(seed)
    rng.shuffle(train)
    rng.shuffle(test)
    train = train[: cfg.max_train]
    test = test[: cfg.max_test]

    def item(t: Transition, split: str, index: int) -> PromptItem:
        return text_game_item(
            t, f"{split}-{t.game}-{t.state_id}", prompt=prompt_of(cfg, t), split=split, index=index
        )

    return (
        [item(t, "train", i) for i, t in enumerate(train)],
        [item(t, "test", i) for i, t in enumerate(test)],
    )
