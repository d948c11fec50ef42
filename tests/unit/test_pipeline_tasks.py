"""The language tasks' recipes (``apps.pipeline.tasks``): one per config task, each with a
serving recipe in the orchestrator, and what each owns: items, the second filter, the SFT
length, the metric, the always-no-change score and the command's line."""

from __future__ import annotations

import asyncio
import typing
from pathlib import Path

import pytest

from rlvr_world.apps.orchestrator.config import OrchestratorConfig
from rlvr_world.apps.orchestrator.recipes import recipes
from rlvr_world.apps.pipeline.config import DataConfig, PipelineConfig, load_pipeline_config
from rlvr_world.apps.pipeline.results import always_no_change
from rlvr_world.apps.pipeline.tasks import TASKS, metric_named, task_of
from rlvr_world.wire.services import ServiceClients

REPO = Path(__file__).resolve().parents[2]


def test_every_config_task_has_a_recipe_and_a_serving_recipe() -> None:
    config_tasks = set(typing.get_args(PipelineConfig.model_fields["task"].annotation))
    assert set(TASKS) == config_tasks
    for name, task in TASKS.items():
        assert task.name == name

    async def served_tasks() -> set[str]:  # gRPC's aio channels need a running loop
        clients = ServiceClients("a:1", "b:2", "c:3")
        try:
            return set(recipes(OrchestratorConfig(), clients))
        finally:
            await clients.close()

    assert config_tasks <= asyncio.run(served_tasks())  # the data path serves every language task


def test_text_game_recipe_builds_items_keeps_them_and_scores_no_change() -> None:
    cfg = PipelineConfig(data=DataConfig(max_train=20, max_test=10))
    task = task_of(cfg)
    assert task.name == "text_game" and task.metric.name == "exact_match"
    train, test, report = task.items(cfg)
    assert len(train) == 20 and len(test) == 10 and report["train_available"] >= 20
    assert task.items(cfg) == (train, test, report)  # seeded by run.seed
    assert not task.fit_needs_policy
    assert task.fit(cfg, Path("/nonexistent"), (train, test, report)) == (train, test, report)
    assert task.sft_max_length(cfg) == cfg.sft.max_length
    baseline = always_no_change(test, lambda i: task.no_change_reward(i, "strict"))
    # answering "nothing changes" is exactly right on every unchanged transition, never on a
    # changed one (exact match of the diff)
    assert baseline["unchanged"] == 1.0 and baseline["changed"] == 0.0
    unchanged = sum(1 for i in test if not i.changed)
    assert baseline["all"] == pytest.approx(unchanged / len(test))
    line = task.eval_line("start", {"accuracy": 0.25, "mean_reward": 0.5, "n": 8})
    assert line == "held-out start: exact match 0.250, mean reward 0.500 (n=8)"


def test_web_recipe_needs_the_policy_and_reports_f1() -> None:
    cfg = load_pipeline_config(REPO / "configs" / "pipeline" / "web_smoke.yaml", {})
    task = task_of(cfg)
    assert task.name == "web" and task.metric.name == "f1" and task.fit_needs_policy
    assert task.sft_max_length(cfg) == cfg.web_data.max_tokens
    line = task.eval_line("rlvr", {"accuracy": 0.125, "mean_reward": 0.75, "n": 4})
    assert line == "held-out rlvr: F1 0.750, exact 0.125 (n=4)"


def test_metric_named_finds_the_language_metrics_only() -> None:
    assert metric_named("exact_match") is TASKS["text_game"].metric
    assert metric_named("f1") is TASKS["web"].metric
    assert metric_named("l1") is None  # a video headline is not a language one
