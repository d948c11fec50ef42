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


def test_kitchen_state_ids_are_unique() -> None:
    """Each transition's state_id (and so its prompt id) is unique: the held-out comparison pairs
    answers by prompt id."""
    transitions = enumerate_transitions(slices=2)
    assert len({t.state_id for t in transitions}) == len(transitions)


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
    from rlvr_world.apps.run.grpo import trainer_config
    from trainer.config import TrainerConfig

    cfg = load_pipeline_config(
        CONFIGS[0], {"rl.steps": 7, "run.seed": 3, "rl.norm_adv_by_std": False}
    )
    assert cfg.rl.steps == 7 and cfg.run.seed == 3
    data = trainer_config(
        cfg.rl,
        model=tmp_path / "model",
        redis_url="redis://x",
        trainer_dir=tmp_path / "trainer",
        device="cpu",
        idle_timeout_s=60.0,
        seed=cfg.run.seed,
    )
    tcfg = TrainerConfig.model_validate(data)
    assert tcfg.run.total_steps == 7 and tcfg.queue.max_staleness == cfg.rl.max_staleness
    assert tcfg.run.seed == 3
    assert tcfg.grpo.truncated_reward == cfg.rl.truncated_reward == 0.0
    assert tcfg.grpo.unparseable_reward == cfg.rl.unparseable_reward
    assert tcfg.grpo.norm_adv_by_std is False  # Dr. GRPO reaches the trainer


def test_run_seed_reseeds_the_split_and_the_draw() -> None:
    from rlvr_world.apps.pipeline.config import DataConfig
    from rlvr_world.apps.pipeline.data import build_items

    data = DataConfig(max_train=50, max_test=20)
    train0, test0 = build_items(data, seed=0)
    again0 = build_items(data, seed=0)
    _, test1 = build_items(data, seed=1)
    assert (train0, test0) == again0
    assert [i.prompt_id for i in test0] != [i.prompt_id for i in test1]
    assert {i.prompt_id for i in train0}.isdisjoint({i.prompt_id for i in test0})


def test_split_seed_fixes_the_items_whatever_the_run_seed() -> None:
    """``data.split_seed``: every run seed of a comparison trains and evaluates on the same
    items (several RL seeds from one start); the split is the one run.seed = split_seed gives."""
    from rlvr_world.apps.pipeline.config import DataConfig
    from rlvr_world.apps.pipeline.data import build_items

    fixed = DataConfig(max_train=50, max_test=20, split_seed=0)
    assert build_items(fixed, seed=3) == build_items(fixed, seed=0)
    assert build_items(fixed, seed=3) == build_items(DataConfig(max_train=50, max_test=20), 0)


def test_bare_prompt_drops_only_the_instruction() -> None:
    from rlvr_world.apps.pipeline.config import DataConfig
    from rlvr_world.apps.pipeline.data import build_items
    from rlvr_world.tasks.text_game.prompts import COMPACT_INSTRUCTION

    compact, _ = build_items(DataConfig(max_train=5, max_test=1), seed=0)
    bare, _ = build_items(DataConfig(max_train=5, max_test=1, prompt="bare"), seed=0)
    for c, b in zip(compact, bare, strict=True):
        assert c.prompt == COMPACT_INSTRUCTION + b.prompt
        assert (c.target, c.ground_truth, c.extra_info) == (b.target, b.ground_truth, b.extra_info)


def test_rl_section_is_shared_and_bounds_the_queue() -> None:
    from rlvr_world.apps.pipeline.config import TextRl
    from rlvr_world.apps.run.grpo import RlSection
    from rlvr_world.apps.video.config import VideoRl

    assert issubclass(TextRl, RlSection) and issubclass(VideoRl, RlSection)
    rl = TextRl(groups_per_step=3, max_staleness=2)
    assert rl.stream_bound == 9 and TextRl(queue_bound=11).stream_bound == 11
    with pytest.raises(ValueError, match="max_staleness"):
        VideoRl(max_staleness=5000)


def test_control_budget_matches_grpo() -> None:
    cfg = load_pipeline_config(CONFIGS[0])
    samples = cfg.control.sft_budget(cfg.sft, grpo_s=50.0, trained=641)
    assert samples["max_steps"] == -(-641 // cfg.sft.batch_size) and "max_seconds" not in samples
    assert samples["lr"] == (cfg.control.lr or cfg.sft.lr) and samples["schedule"] == "constant"
    timed = load_pipeline_config(CONFIGS[0], {"control.budget": "wall_time"})
    assert timed.control.sft_budget(timed.sft, grpo_s=123.0, trained=0)["max_seconds"] == 123.0


def _shared_text_game() -> Path:
    from tests.helpers.shared import shared_file

    return shared_file("data", "text_game", "test.jsonl").parent


def test_real_data_trains_on_the_crawl_minus_the_test_split_and_draws_a_stratified_test() -> None:
    from rlvr_world.apps.pipeline.config import DataConfig
    from rlvr_world.apps.pipeline.data import build_items_with_stats
    from rlvr_world.tasks.text_game import load_test_keys

    data = _shared_text_game()
    games = ["bird-life-cycle", "scale-weigh", "volume-stone"]
    cfg = DataConfig(
        crawl_dir=data / "crawl",
        test_records=data / "test.jsonl",
        games=games,
        prompt="bare",
        max_per_game=40,
        max_prompt_chars=1400,
        max_train=1000,
        max_test=60,
    )
    train, test, stats = build_items_with_stats(cfg, seed=0)
    test_keys = {f"{g}-{s}" for g, s in load_test_keys(data / "test.jsonl")}
    assert train and all(i.prompt_id.removeprefix("train-") not in test_keys for i in train)
    assert all(i.prompt_id.removeprefix("test-") in test_keys for i in test)
    assert {i.prompt_id.split("-", 1)[1].rsplit("-", 1)[0] for i in train} <= set(games)
    assert all(len(i.prompt) <= 1400 for i in train + test)
    assert stats.too_long > 0  # scale-weigh's bare prompts are ~1,450 characters
    # the held-out draw keeps the changed share of what was available (within one item)
    share = sum(1 for i in test if i.changed) / len(test)
    assert len(test) == 60 and 0.0 < share < 1.0
    assert build_items_with_stats(cfg, seed=0)[:2] == (train, test)


def test_paper_prompt_comes_from_the_rules_folder() -> None:
    from rlvr_world.apps.pipeline.config import DataConfig
    from rlvr_world.apps.pipeline.data import build_items
    from rlvr_world.tasks.text_game import (
        build_paper_prompt,
        load_examples,
        load_rules,
        load_transitions,
    )

    data = _shared_text_game()
    cfg = DataConfig(
        records=data / "test_sample_300.jsonl",
        prompt="paper",
        rules_dir=data,
        max_train=3,
        max_test=2,
    )
    train, _ = build_items(cfg, seed=0)
    by_id = {f"train-{t.game}-{t.state_id}": t for t in load_transitions(cfg.records)}
    rules, examples = load_rules(data), load_examples(data)
    for item in train:
        assert item.prompt == build_paper_prompt(by_id[item.prompt_id], rules, examples)


def test_data_config_refuses_mixed_or_incomplete_sources(tmp_path: Path) -> None:
    from rlvr_world.apps.pipeline.config import DataConfig

    with pytest.raises(ValueError, match="records or crawl_dir"):
        DataConfig(records=tmp_path, crawl_dir=tmp_path, test_records=tmp_path)
    with pytest.raises(ValueError, match="go together"):
        DataConfig(crawl_dir=tmp_path)
    with pytest.raises(ValueError, match="rules_dir"):
        DataConfig(prompt="paper")


def test_no_change_answers_are_recognised_and_counted() -> None:
    from rlvr_world.apps.pipeline.evaluate import Answer
    from rlvr_world.apps.pipeline.results import no_change_rates, predicts_no_change

    empty = 'The final answer is: {"modified":[],"removed":[],"score":{}}'
    change = (
        'The final answer is: {"modified":[{"uuid":3,"properties":{"isOn":true}}],'
        '"removed":[],"score":{}}'
    )
    assert predicts_no_change(empty)
    assert predicts_no_change('The final answer is: {"modified": [], "removed": []}')
    assert not predicts_no_change(change)
    assert not predicts_no_change('The final answer is: {"modified":[],"removed":[5],"score":{}}')
    assert not predicts_no_change("no JSON here")
    rows = {
        "start": [Answer("a", True, 0.0, "ok", change), Answer("b", False, 1.0, "ok", empty)],
        "rlvr": [Answer("a", True, 0.0, "ok", empty), Answer("b", False, 1.0, "ok", empty)],
    }
    assert no_change_rates(rows) == {"start": 0.5, "rlvr": 1.0}


def test_headline_refuses_repeated_prompt_ids() -> None:
    from rlvr_world.apps.pipeline.evaluate import Answer
    from rlvr_world.apps.pipeline.results import text_headline

    a = Answer("p1", True, 1.0, "ok", "")
    with pytest.raises(ValueError, match="repeat a prompt id"):
        text_headline({"start": [a, a], "control": [a], "rlvr": [a]}, seed=0, budget="samples")


def test_report_gives_start_up_and_peak_rss_only_when_the_summary_has_them(tmp_path: Path) -> None:
    from rlvr_world.apps.pipeline.report import write_report

    base = {"config": "c.yaml", "wall_s": 1.0}
    plain = write_report(tmp_path, base, {}, None).read_text()
    assert "start-up" not in plain and "peak RSS" not in plain
    summary = base | {
        "startup": {
            "redis_s": 0.02,
            "services_s": 5.4,
            "grpo_start_s": 5.4,
            "first_request_s": 5.41,
            "processes": {
                "reward": {"started_s": 0.03, "ready_s": 2.0},
                "rollout": {"started_s": 0.04, "ready_s": 5.4},
                "trainer": {"started_s": 5.4, "ready_s": None},  # never ready: left out
            },
        },
        "peak_rss_mib": {"orchestrator": 1000.0, "rollout": 800.4, "total": 1800.4},
    }
    text = write_report(tmp_path, summary, {}, None).read_text()
    assert (
        "- start-up (after SFT): services ready 5.4 s (slowest: rollout), first GRPO rollout "
        "request 0.01 s after the GRPO phase began" in text
    )
    assert (
        "- peak RSS: 1800 MiB, the sum of each process's peak (orchestrator 1000, rollout 800)"
        in text
    )
