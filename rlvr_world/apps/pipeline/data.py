"""Prompt items of a pipeline run: the synthetic kitchen game or GPT-simulator records.

Three sources:

* the kitchen game (default) or one ``records`` file: every transition is assigned to train or
  held-out by a stable hash of (seed, state, action);
* ``crawl_dir`` + ``test_records`` (the real data): training transitions are the crawl's
  (game, state_id) pairs that are not in the official test records, sampled per game
  (``max_per_game``); the held-out items come from the test records.

Then ``games`` keeps only those games, ``max_prompt_chars`` leaves out transitions whose prompt is
longer (counted, never silently), training is capped at ``max_train`` (a seeded sample) and the
held-out split at ``max_test`` (a seeded draw that keeps the split's changed/unchanged shares), and
each transition becomes a ``PromptItem`` (state-diff target, ``extra_info.data_state`` as the
paper's rows) with the configured prompt: ``compact``, ``bare`` (compact without the instruction
paragraph) or ``paper`` (the paper's prompt, byte-equal to its verl rows, with the game's rules
and in-context examples from ``rules_dir``).

``build_items_with_stats`` is the text game's entry point (its recipe in ``apps.pipeline.tasks``
calls it); ``task: web`` builds its items in ``apps.pipeline.web_data``.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from rlvr_world.apps.pipeline.config import DataConfig
from rlvr_world.items import PromptItem, text_game_item
from rlvr_world.tasks.text_game import (
    Transition,
    build_compact_prompt,
    build_paper_prompt,
    load_examples,
    load_rules,
    load_test_keys,
    load_transitions,
    split_changed,
    train_transitions,
)
from rlvr_world.tasks.text_game.kitchen import enumerate_transitions, split_transitions


@dataclass(frozen=True)
class DataStats:
    """What the source held and what the filters left out."""

    train_available: int
    test_available: int
    too_long: int


PromptFn = Callable[[Transition], str]


def prompt_builder(cfg: DataConfig) -> PromptFn:
    """The configured prompt style as a function of one transition."""
    if cfg.prompt == "paper":
        assert cfg.rules_dir is not None  # the config refuses paper without it
        rules, examples = load_rules(cfg.rules_dir), load_examples(cfg.rules_dir)
        return lambda t: build_paper_prompt(t, rules, examples)
    instruction = cfg.prompt == "compact"
    return lambda t: build_compact_prompt(t, instruction=instruction)


def _splits(cfg: DataConfig, seed: int) -> tuple[list[Transition], list[Transition]]:
    if cfg.crawl_dir is not None and cfg.test_records is not None:
        test = list(load_transitions(cfg.test_records))
        train = train_transitions(
            cfg.crawl_dir,
            load_test_keys(cfg.test_records),
            games=cfg.games,
            max_per_game=cfg.max_per_game,
            seed=seed,
        )
        return list(train), test
    source = (
        load_transitions(cfg.records)
        if cfg.records is not None
        else enumerate_transitions(cfg.kitchen.slices, cfg.kitchen.goal)
    )
    return split_transitions(list(source), cfg.test_fraction, seed)


def _kept(
    cfg: DataConfig, transitions: Iterable[Transition], prompt_of: PromptFn
) -> tuple[list[Transition], int]:
    games = set(cfg.games) if cfg.games is not None else None
    kept, too_long = [], 0
    for t in transitions:
        if games is not None and t.game not in games:
            continue
        if cfg.max_prompt_chars is not None and len(prompt_of(t)) > cfg.max_prompt_chars:
            too_long += 1
            continue
        kept.append(t)
    return kept, too_long


def stratified_draw(transitions: list[Transition], n: int, rng: random.Random) -> list[Transition]:
    """``n`` transitions (all when fewer) keeping the changed/unchanged shares, shuffled."""
    if n >= len(transitions):
        out = list(transitions)
        rng.shuffle(out)
        return out
    changed, unchanged = split_changed(transitions)
    n_changed = round(n * len(changed) / len(transitions))
    out = rng.sample(changed, n_changed) + rng.sample(unchanged, n - n_changed)
    rng.shuffle(out)
    return out


def build_items_with_stats(
    cfg: DataConfig, seed: int
) -> tuple[list[PromptItem], list[PromptItem], DataStats]:
    """``(train, test, stats)`` prompt items (module docstring); the same for the same ``seed``.

    ``cfg.split_seed``, where set, replaces ``seed``: every run seed then has the same items."""
    seed = cfg.split_seed_for(seed)
    prompt_of = prompt_builder(cfg)
    train_all, test_all = _splits(cfg, seed)
    train, long_train = _kept(cfg, train_all, prompt_of)
    test, long_test = _kept(cfg, test_all, prompt_of)
    stats = DataStats(len(train), len(test), long_train + long_test)
    rng = random.Random(seed)
    rng.shuffle(train)
    train = train[: cfg.max_train]
    test = stratified_draw(test, cfg.max_test, rng)

    def item(t: Transition, split: str, index: int) -> PromptItem:
        return text_game_item(
            t, f"{split}-{t.game}-{t.state_id}", prompt=prompt_of(t), split=split, index=index
        )

    return (
        [item(t, "train", i) for i, t in enumerate(train)],
        [item(t, "test", i) for i, t in enumerate(test)],
        stats,
    )


def build_items(cfg: DataConfig, seed: int) -> tuple[list[PromptItem], list[PromptItem]]:
    """``(train, test)`` prompt items (module docstring)."""
    train, test, _ = build_items_with_stats(cfg, seed)
    return train, test
