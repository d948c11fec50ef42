"""Pipeline pure parts: the synthetic kitchen game, items, configs, the trainer config."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rlvr_world.apps.pipeline.config import PipelineConfig, load_pipeline_config
from rlvr_world.items import load_items, save_items, text_game_item
from rlvr_world.rewards.dispatch import score_mapping
from rlvr_world.tasks.text_game import split_changed
from rlvr_world.tasks.text_game.kitchen import (
    enumerate_transitions,
    initial_state,
    split_transitions,
    step,
)

REPO = Path(__file__).resolve().parents[2]
CONFIGS = sorted((REPO / "configs" / "pipeline").glob("*.yaml"))


def test_kitchen_toasting_burns_after_four_ticks() -> None:
    state = step(initial_state(slices=1), "put bread (ID: 5) in the toaster")
    state = step(state, "turn on the toaster")
    bread = next(e for e in state if e.get("uuid") == 5)
    assert bread["properties"] == {"toastedness": 1, "isBurnt": False}
    for _ in range(3):
        state = step(state, "look around")
    bread = next(e for e in state if e.get("uuid") == 5)
    assert bread["properties"] == {"toastedness": 4, "isBurnt": True}
    assert state[-1]["gameOver"] and not state[-1]["gameWon"]


def test_kitchen_eating_removes_the_slice() -> None:
    state = step(initial_state(slices=1), "eat bread (ID: 5)")
    assert all(e.get("uuid") != 5 for e in state)
    counter = next(e for e in state if e.get("uuid") == 2)
    assert counter["contains"] == []


def test_kitchen_transitions_have_both_splits_and_are_deterministic() -> None:
    first = enumerate_transitions(slices=1)
    again = enumerate_transitions(slices=1)
    assert [(t.current, t.action) for t in first] == [(t.current, t.action) for t in again]
    changed, unchanged = split_changed(first)
    assert changed and unchanged
    train, test = split_transitions(first, 0.2)
    assert len(train) + len(test) == len(first) and test
    keys = {(json.dumps(t.current), t.action) for t in train}
    assert all((json.dumps(t.current), t.action) not in keys for t in test)


def test_kitchen_state_diff_scores_exact_one_under_strict() -> None:
    transitions = enumerate_transitions(slices=1)
    for i, t in enumerate(transitions):
        item = text_game_item(t, f"k{i}")
        result = score_mapping(item.reward_row(item.target + "<|eos|>") | {"variant": "strict"})
        assert result.reward == 1.0, (t.action, result)


def test_items_round_trip(tmp_path: Path) -> None:
    items = [text_game_item(t, f"k{i}") for i, t in enumerate(enumerate_transitions(1)[:5])]
    save_items(items, tmp_path / "items.jsonl")
    assert load_items(tmp_path / "items.jsonl") == items


@pytest.mark.parametrize("path", CONFIGS, ids=[p.name for p in CONFIGS])
def test_every_shipped_pipeline_config_parses(path: Path) -> None:
    cfg = load_pipeline_config(path)
    assert isinstance(cfg, PipelineConfig)
    assert (cfg.model.path is None) != (cfg.model.tiny is None)


def test_config_rejects_unknown_fields_and_bad_bounds(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("rl: {group_size: 1}\n")
    with pytest.raises(ValueError, match="group_size"):
        load_pipeline_config(bad)
    bad.write_text("rl: {steps: 3, typo: 1}\n")
    with pytest.raises(ValueError, match="typo"):
        load_pipeline_config(bad)


def test_overrides_and_generated_trainer_config_validate(tmp_path: Path) -> None:
    from rlvr_world.apps.pipeline.runner import trainer_config
    from trainer.config import TrainerConfig

    cfg = load_pipeline_config(CONFIGS[0], {"rl.steps": 7})
    assert cfg.rl.steps == 7
    data = trainer_config(cfg, tmp_path / "model", "redis://x", tmp_path / "trainer")
    tcfg = TrainerConfig.model_validate(data)
    assert tcfg.run.total_steps == 7 and tcfg.queue.max_staleness == cfg.rl.max_staleness
