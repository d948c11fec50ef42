"""``task: web`` in ``rlvr-world run``: the config, the items (split by task, both length filters,
the stratified held-out draw), the F1 metric and headline, the no-change diagnostic, the report.
Synthetic transitions written here; the shared MiniWoB++ file where ``RLVR_SHARED_DIR`` is set."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rlvr_world.apps.pipeline.config import (
    DataConfig,
    PipelineConfig,
    WebDataConfig,
    load_pipeline_config,
)
from rlvr_world.apps.pipeline.evaluate import Answer
from rlvr_world.apps.pipeline.results import always_no_change, headline, no_change_rates
from rlvr_world.apps.pipeline.tasks import TASKS as LANGUAGE_TASKS
from rlvr_world.apps.pipeline.web_data import build_web_run_items, fit_to_tokenizer
from rlvr_world.items import PromptItem, web_item
from rlvr_world.web.items import NO_CHANGE_ANSWER, predicts_no_change
from tests.helpers.shared import shared_file

REPO = Path(__file__).resolve().parents[2]
BEFORE = "[1] StaticText 'Pick one'\n[2] button 'OK'"
CHANGED = "[1] StaticText 'Pick one'\n[2] button 'OK' focused: True"


def _record(task: str, i: int, *, changed: bool, pad: int = 0) -> dict[str, object]:
    before = BEFORE + f"\n[9] StaticText 'n{i}{'x' * pad}'"
    after = (CHANGED if changed else BEFORE) + f"\n[9] StaticText 'n{i}{'x' * pad}'"
    return {
        "source": f"miniwob++/{task}",
        "objective": f"Click OK ({i}).",
        "url": f"file://miniwob/{task}.html",
        "previous_actions": [],
        "action": "click [2]",
        "obs_before": before,
        "obs_after": after,
    }


def _write(path: Path, tasks: list[str], per_task: int = 10) -> Path:
    rows = [_record(task, i, changed=i % 2 == 0) for task in tasks for i in range(per_task)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


TASKS = ["click-button", "click-tab", "enter-text", "focus-text", "login-user"]


def test_web_config_parses_and_refuses_what_does_not_fit() -> None:
    cfg = PipelineConfig.model_validate({"task": "web", "data": {"sources": ["x.jsonl"]}})
    assert isinstance(cfg.data, WebDataConfig) and cfg.web_data.max_chars == 2000
    assert isinstance(PipelineConfig().data, DataConfig)  # the text-game default is untouched
    with pytest.raises(ValueError, match="text-game run"):
        _ = cfg.text_data
    bad = [
        ({"task": "web"}, "task: web needs data.sources"),
        ({"data": {"sources": ["x"]}}, "set task: web"),
        ({"task": "web", "data": {"sources": []}}, "at least 1 item"),
        ({"task": "web", "data": {"sources": ["x"], "slices": 2}}, "data.web.slices"),
        ({"task": "web", "data": {"sources": ["x"], "max_chars": 5}}, "greater than or equal"),
        ({"task": "video"}, "task"),
        (
            {"task": "web", "data": {"sources": ["x"]}, "rl": {"reward_type": "binary"}},
            "rl.reward_type binary: not a web reward; expected one of f1, item_f1, soft_item_f1",
        ),
        ({"rl": {"reward_type": "item_f1"}}, "not a text_game reward; expected one of binary"),
    ]
    for raw, message in bad:
        with pytest.raises(ValueError, match=message):
            PipelineConfig.model_validate(raw)


def test_shipped_web_configs_parse() -> None:
    for name in ("web_miniwob.yaml", "web_smoke.yaml"):
        cfg = load_pipeline_config(REPO / "configs" / "pipeline" / name)
        assert cfg.task == "web" and cfg.web_data.split_seed is not None


def test_items_split_by_task_filter_by_length_and_keep_the_held_out_shares(
    tmp_path: Path,
) -> None:
    path = _write(tmp_path / "t.jsonl", TASKS)
    long_row = _record("click-button", 99, changed=True, pad=3000)
    with path.open("a") as fh:
        fh.write(json.dumps(long_row) + "\n")
    cfg = WebDataConfig(sources=[path], test_tasks=["click-tab"], max_chars=1000, max_test=6)
    train, test, report = build_web_run_items(cfg, seed=3)
    assert {i.extra_info["task"] for i in test} == {"click-tab"}
    assert "click-tab" not in {i.extra_info["task"] for i in train}
    assert report["train_too_long_chars"] == 1  # the padded transition, counted
    assert report["test_over_cap"] == 4 and len(test) == 6
    assert sum(1 for i in test if i.changed) == 3  # half of click-tab changed: the share kept
    assert len(train) == 40 and report["transitions"] == 51
    assert report["split_seed"] == 3 and report["test_tasks"] == ["click-tab"]


def test_a_fixed_split_seed_gives_every_run_seed_the_same_held_out_items(tmp_path: Path) -> None:
    path = _write(tmp_path / "t.jsonl", TASKS)
    cfg = WebDataConfig(sources=[path], split_seed=0, test_fraction=0.4)
    tests = [build_web_run_items(cfg, seed)[1] for seed in (0, 1, 2)]
    assert tests[0] == tests[1] == tests[2]
    free = WebDataConfig(sources=[path], test_fraction=0.4)
    splits = {
        tuple(i.extra_info["task"] for i in build_web_run_items(free, s)[1]) for s in range(6)
    }
    assert len(splits) > 1  # unset: the split follows run.seed


def test_bad_sources_get_clear_errors(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="no web transition file"):
        build_web_run_items(WebDataConfig(sources=[tmp_path / "missing"]), 0)
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    with pytest.raises(ValueError, match="no web transition"):
        build_web_run_items(WebDataConfig(sources=[empty]), 0)
    broken = tmp_path / "broken.jsonl"
    broken.write_text('{"objective": "x"}\n')
    with pytest.raises(ValueError, match="missing field"):
        build_web_run_items(WebDataConfig(sources=[broken]), 0)
    path = _write(tmp_path / "t.jsonl", TASKS)
    with pytest.raises(ValueError, match="held-out tasks not among"):
        build_web_run_items(WebDataConfig(sources=[path], test_tasks=["nope"]), 0)
    with pytest.raises(ValueError, match="no train item is left"):
        build_web_run_items(WebDataConfig(sources=[path], max_chars=100), 0)


def test_collector_directories_are_sources(tmp_path: Path) -> None:
    out = tmp_path / "collected"
    out.mkdir()
    _write(out / "transitions.jsonl", TASKS, per_task=4)
    (out / "train.jsonl").write_text("not read: the pipeline splits transitions.jsonl itself\n")
    train, test, report = build_web_run_items(WebDataConfig(sources=[out], split_seed=0), 0)
    assert report["transitions"] == 20 and len(train) + len(test) == 20


def test_token_filter_counts_as_sft_encodes(tmp_path: Path) -> None:
    from transformers import AutoTokenizer

    from rlvr_world.tiny_model import TinyLMConfig, build_tiny_lm
    from trainer.sft import encode

    items = [web_item(f"i{n}", "x " * n, "New items:\nNone") for n in (5, 50, 400)]
    model = build_tiny_lm(
        tmp_path / "m", [i.prompt + i.target for i in items], TinyLMConfig(vocab_size=300)
    )
    tok = AutoTokenizer.from_pretrained(model)
    sizes = [len(encode(tok, i.prompt, i.target, 10_000).input_ids) for i in items]
    limit = sizes[1]  # the middle one fits exactly
    kept, dropped = fit_to_tokenizer(items, model, limit)
    assert [i.prompt_id for i in kept] == ["i5", "i50"] and dropped == 1


def _item(pid: str, truth: str, changed: bool) -> PromptItem:
    from dataclasses import replace

    return replace(web_item(pid, "p", truth), changed=changed)


UPDATED = (
    "New items:\nNone\n\nDeleted items:\nNone\n\nUpdated items:\n[2] button 'OK' focused: True"
)


def test_no_change_answer_and_its_f1_baseline() -> None:
    assert predicts_no_change(NO_CHANGE_ANSWER)
    assert predicts_no_change("New items: None\nDeleted items: None")
    assert not predicts_no_change(UPDATED)
    assert not predicts_no_change("Deleted items:\nDeleted items:\n")  # headers alone say nothing
    assert not predicts_no_change("None")  # no header: not an answer
    items = [_item("a", NO_CHANGE_ANSWER, False), _item("b", UPDATED, True)]
    # On b, three None predictions match the two None truths: P = 2/3, R = 2/3, F1 = 2/3.
    web = LANGUAGE_TASKS["web"]
    baseline = always_no_change(items, lambda i: web.no_change_reward(i, "strict"))
    assert baseline == pytest.approx({"all": (1 + 2 / 3) / 2, "unchanged": 1.0, "changed": 2 / 3})


def _answer(pid: str, reward: float, changed: bool, status: str = "ok") -> Answer:
    return Answer(pid, changed, reward, status, NO_CHANGE_ANSWER if not changed else UPDATED)


def test_f1_headline_scores_partial_credit_and_splits_by_change() -> None:
    start = [_answer("a", 1.0, False), _answer("b", 0.5, True), _answer("c", 0.2, True)]
    control = [_answer("a", 1.0, False), _answer("b", 0.5, True), _answer("c", 0.9, True, "x")]
    rlvr = [_answer("a", 1.0, False), _answer("b", 0.75, True), _answer("c", 0.4, True)]
    web = LANGUAGE_TASKS["web"].metric
    h = headline(
        {"start": start, "control": control, "rlvr": rlvr},
        seed=2,
        budget="samples",
        metric=web,
        baselines={"always_no_change": 0.5},
    )
    assert h.metric == "f1" and h.n == 3 and h.seeds == [2]
    assert h.control == pytest.approx(0.5)  # the non-ok answer counts 0, not its reward
    assert h.rlvr == pytest.approx((1.0 + 0.75 + 0.4) / 3)
    assert h.splits["changed"]["n"] == 2 and h.splits["unchanged"]["rlvr"] == 1.0
    assert h.baselines == {"always_no_change": 0.5}
    rates = no_change_rates({"start": start}, web.no_change)
    assert rates == {"start": pytest.approx(1 / 3)}


def test_web_report_names_f1(tmp_path: Path) -> None:
    from rlvr_world.apps.pipeline.report import write_report

    split = {"n": 1, "accuracy": 0.0, "mean_reward": 0.5}
    report = {
        "n": 2,
        "accuracy": 0.5,
        "mean_reward": 0.75,
        "by_split": {"changed": split, "unchanged": split | {"mean_reward": 1.0}},
    }
    summary = {
        "config": "c.yaml",
        "wall_s": 1.0,
        "no_change_answers": {
            "start": 0.5,
            "true_unchanged_share": 0.5,
            "always_no_change": {"all": 0.8, "unchanged": 1.0, "changed": 0.6},
        },
    }
    text = write_report(tmp_path, summary, {"start": report}, None, label="F1").read_text()
    assert "## Headline (greedy, F1, same held-out items)" in text
    assert "start: F1 0.750, exact 0.500; changed 0.500 (n=1); unchanged 1.000 (n=1)" in text
    assert "no change scores F1 0.800 (unchanged 1.000, changed 0.600)" in text


def test_shared_miniwob_gives_at_least_200_held_out_items_never_trained_on() -> None:
    source = shared_file("data", "web", "miniwob_transitions.jsonl")
    cfg = load_pipeline_config(
        REPO / "configs" / "pipeline" / "web_miniwob.yaml", {"data.sources": [str(source)]}
    )
    train, test, report = build_web_run_items(cfg.web_data, cfg.run.seed)
    assert len(test) >= 200 and len(train) >= 800
    from rlvr_world.web.dataset import task_families

    families = task_families(report["train_tasks"] + report["test_tasks"])
    held = {families[t] for t in report["test_tasks"]}
    assert not held & {families[t] for t in report["train_tasks"]}
    assert {i.extra_info["task"] for i in test} <= set(report["test_tasks"])
    assert all(len(i.prompt) + len(i.target) <= 2000 for i in train + test)
