"""The tasks of a language run, one recipe each: everything that differs between the text game
and the web outside the data path.

A ``LanguageTask`` owns its task's

* **items**: the prompt items (train, held-out) and the data report, seeded by ``run.seed``
  (``apps.pipeline.data`` for the text game, ``apps.pipeline.web_data`` for the web);
* **second filter**, once the policy's tokenizer exists (``fit``: the web's token-length filter;
  the text game has none), and whether it needs the policy's folder for it;
* **SFT length**: the most tokens of one SFT example;
* **evaluation**: the metric of the held-out answers (``results.Metric``: exact match, F1), the
  score of answering "nothing changes" on an item by the real scorer (the always-no-change
  baseline), and the command's line per evaluation.

The other half of a task, the serving half (the rollout request, the decode request and the
reward request of a prompt's samples), is the orchestrator's recipe of the same name
(``apps.orchestrator.recipes``); the held-out evaluation's requests are the same for both tasks
(``apps.pipeline.evaluate``). ``rlvr-world run``, ``rlvr-world orchestrate``, the pool and the
SFT phase look a task up in ``TASKS`` and have no task branches: a new language task is one
class here, its config section (``apps.pipeline.config``) and its serving recipe. Video runs are
their own run type (``apps.video``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Protocol

from rlvr_world.apps.pipeline.config import PipelineConfig
from rlvr_world.apps.pipeline.data import build_items_with_stats
from rlvr_world.apps.pipeline.results import EXACT_MATCH, TEXT_NO_CHANGE_ANSWER, WEB_F1, Metric
from rlvr_world.items import PromptItem
from rlvr_world.rewards.text_game import score_text_game
from rlvr_world.rewards.web import score_web
from rlvr_world.web.items import NO_CHANGE_ANSWER

#: ``(train, held-out, data report)``
Items = tuple[list[PromptItem], list[PromptItem], dict[str, Any]]


class LanguageTask(Protocol):
    """One language task's recipe outside the data path (module docstring)."""

    @property
    def name(self) -> str:
        """The config's ``task``."""
        ...

    @property
    def metric(self) -> Metric:
        """How the held-out answers are scored and reported."""
        ...

    @property
    def fit_needs_policy(self) -> bool:
        """Whether ``fit`` reads the policy's folder (its tokenizer)."""
        ...

    def items(self, cfg: PipelineConfig) -> Items:
        """The run's prompt items and data report, seeded by ``run.seed``."""
        ...

    def fit(self, cfg: PipelineConfig, model: Path, items: Items) -> Items:
        """``items`` filtered once the policy at ``model`` exists, counted in the report."""
        ...

    def sft_max_length(self, cfg: PipelineConfig) -> int:
        """The most tokens of one SFT example."""
        ...

    def no_change_reward(self, item: PromptItem, variant: str) -> float:
        """The metric of answering "nothing changes" on ``item`` (a non-ok status scores 0)."""
        ...

    def eval_line(self, name: str, report: Mapping[str, Any]) -> str:
        """The command's line for the held-out evaluation ``name`` (an ``EvalReport`` dict)."""
        ...


@dataclass(frozen=True)
class TextGameTask:
    """The text game: JSON state diffs, exact match."""

    name: str = "text_game"
    metric: Metric = EXACT_MATCH
    fit_needs_policy: bool = False

    def items(self, cfg: PipelineConfig) -> Items:
        train, test, stats = build_items_with_stats(cfg.text_data, cfg.run.seed)
        return train, test, asdict(stats)

    def fit(self, cfg: PipelineConfig, model: Path, items: Items) -> Items:
        return items  # the prompt-length filter ran on characters already

    def sft_max_length(self, cfg: PipelineConfig) -> int:
        return cfg.sft.max_length

    def no_change_reward(self, item: PromptItem, variant: str) -> float:
        result = score_text_game(
            TEXT_NO_CHANGE_ANSWER, item.ground_truth, item.extra_info, variant=variant
        )
        return result.reward if result.ok else 0.0

    def eval_line(self, name: str, report: Mapping[str, Any]) -> str:
        return (
            f"held-out {name}: exact match {report['accuracy']:.3f}, "
            f"mean reward {report['mean_reward']:.3f} (n={report['n']})"
        )


@dataclass(frozen=True)
class WebTask:
    """The web: accessibility-tree diffs, F1 of the items."""

    name: str = "web"
    metric: Metric = WEB_F1
    fit_needs_policy: bool = True

    def items(self, cfg: PipelineConfig) -> Items:
        from rlvr_world.apps.pipeline.web_data import build_web_run_items

        return build_web_run_items(cfg.web_data, cfg.run.seed)

    def fit(self, cfg: PipelineConfig, model: Path, items: Items) -> Items:
        from rlvr_world.apps.pipeline.web_data import fit_run_items

        return fit_run_items(model, *items, cfg.web_data.max_tokens)

    def sft_max_length(self, cfg: PipelineConfig) -> int:
        return cfg.web_data.max_tokens

    def no_change_reward(self, item: PromptItem, variant: str) -> float:
        result = score_web(NO_CHANGE_ANSWER, item.ground_truth, variant=variant)
        return result.reward if result.ok else 0.0

    def eval_line(self, name: str, report: Mapping[str, Any]) -> str:
        return (
            f"held-out {name}: F1 {report['mean_reward']:.3f}, "
            f"exact {report['accuracy']:.3f} (n={report['n']})"
        )


#: The config's ``task`` -> its recipe. Explicit on purpose: no registry.
TASKS: dict[str, LanguageTask] = {"text_game": TextGameTask(), "web": WebTask()}


def task_of(cfg: PipelineConfig) -> LanguageTask:
    """The recipe of ``cfg.task``."""
    return TASKS[cfg.task]


def metric_named(name: str) -> Metric | None:
    """The language metric whose headline name is ``name`` (``exact_match``, ``f1``), or None."""
    return next((t.metric for t in TASKS.values() if t.metric.name == name), None)
