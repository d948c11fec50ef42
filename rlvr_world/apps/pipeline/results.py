"""From held-out answers to the run's headline: the per-item metric of the start, the control and
the RLVR model on the same items, compared with paired bootstrap intervals (``rlvr_world.stats``).

The metric is the task's (``EXACT_MATCH``, ``WEB_F1``, chosen by the task's recipe in
``apps.pipeline.tasks``): exact match for the text game (binary reward 1 with status ok), F1 for
the web (the web scorer's reward; a non-ok status counts 0). An item every model answered is
compared; an item whose evaluation failed for some model (after the retries) is left out for all
of them and counted, never scored as wrong. The split is the gold label: ``changed`` or
``unchanged`` transitions. The no-change diagnostic (the share of answers that predict "nothing
changes", next to the true unchanged share) has one predicate per task; the headline also carries
the score of always answering "nothing changes" (``always_no_change`` of the task's scores: F1 for
the web, exact match for the text game, by the same scorers), the score of that degenerate
policy. Also the train-reward summary the issue's acceptance reads: the mean train reward of the
first and of the last ten GRPO steps.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from rlvr_world.apps.pipeline.evaluate import Answer
from rlvr_world.items import PromptItem, diff_answer
from rlvr_world.rewards.text_game.extract import ParseFailure, strict_parse
from rlvr_world.stats import Headline, build_headline, describe
from rlvr_world.web.items import predicts_no_change as web_predicts_no_change

MODELS = ("start", "control", "rlvr")


def exact(answer: Answer) -> float:
    """1.0 for an exact answer (binary reward 1 with status ok), else 0.0."""
    return 1.0 if answer.status == "ok" and answer.reward >= 1.0 else 0.0


def f1(answer: Answer) -> float:
    """The web scorer's F1 of an answer with status ok, else 0.0."""
    return answer.reward if answer.status == "ok" else 0.0


@dataclass(frozen=True)
class Metric:
    """How a task's held-out answers are scored and reported."""

    name: str  # the headline's ``metric``
    label: str  # in reports and logs
    per_item: Callable[[Answer], float]
    report_key: str  # the ``EvalReport`` field with its mean (``accuracy`` or ``mean_reward``)
    no_change: Callable[[str], bool]  # does an answer predict "nothing changes"


def predicts_no_change(text: str) -> bool:
    """Whether an answer says the action changed nothing (empty ``modified`` and ``removed``;
    ``score`` empty or absent). A world model that always says so is right on every unchanged
    transition and useless: the share of such answers, next to the true unchanged share, shows
    whether a gain in exact match is that collapse."""
    answer = strict_parse(text)
    if isinstance(answer, ParseFailure):
        return False
    return answer["modified"] == [] and answer["removed"] == [] and not answer.get("score")


#: The text game's metric: exact match of the state diff.
EXACT_MATCH = Metric("exact_match", "exact match", exact, "accuracy", predicts_no_change)
#: The web's metric: F1 of the accessibility-tree items.
WEB_F1 = Metric("f1", "F1", f1, "mean_reward", web_predicts_no_change)


def aligned_scores(
    answers: Mapping[str, Sequence[Answer]],
    score: Callable[[Answer], float] = exact,
) -> tuple[list[str], dict[str, list[float]], list[str]]:
    """``(prompt ids, model -> per-item score, per-item split)`` over the items that every
    model in ``answers`` answered, in the first model's order."""
    for name, rows in answers.items():
        if len({a.prompt_id for a in rows}) != len(rows):
            raise ValueError(f"{name}: held-out answers repeat a prompt id; items must be unique")
    by_model = {name: {a.prompt_id: a for a in rows} for name, rows in answers.items()}
    first = next(iter(answers.values()), [])
    ids = [a.prompt_id for a in first if all(a.prompt_id in m for m in by_model.values())]
    scores = {name: [score(m[i]) for i in ids] for name, m in by_model.items()}
    split = ["changed" if by_model[next(iter(by_model))][i].changed else "unchanged" for i in ids]
    return ids, scores, split


def headline(
    answers: Mapping[str, Sequence[Answer]],
    seed: int,
    budget: str,
    metric: Metric = EXACT_MATCH,
    baselines: Mapping[str, float] | None = None,
) -> Headline:
    """The headline of a language run from the three models' answers (module docstring)."""
    missing = [m for m in MODELS if m not in answers]
    if missing:
        raise ValueError(f"no held-out answers of {missing}")
    _, scores, split = aligned_scores({m: answers[m] for m in MODELS}, metric.per_item)
    if not split:
        raise ValueError("no held-out item was answered by every model")
    return build_headline(
        metric.name,
        [seed],
        scores,
        split_of=split,
        baselines=baselines,
        control_budget=budget,
    )


def text_headline(answers: Mapping[str, Sequence[Answer]], seed: int, budget: str) -> Headline:
    """The headline of a text-game run (exact match)."""
    return headline(answers, seed, budget, EXACT_MATCH)


#: The text-game answer "nothing changes" (what ``predicts_no_change`` recognises).
TEXT_NO_CHANGE_ANSWER = diff_answer({"modified": [], "removed": [], "score": {}})


def always_no_change(
    items: Sequence[PromptItem], no_change_reward: Callable[[PromptItem], float]
) -> dict[str, float]:
    """The mean of ``no_change_reward`` (a task's metric of answering "nothing changes",
    ``LanguageTask.no_change_reward``) over all items, the unchanged and the changed ones: the
    score of the degenerate policy."""
    rows: dict[str, list[float]] = {"all": [], "unchanged": [], "changed": []}
    for item in items:
        value = no_change_reward(item)
        rows["all"].append(value)
        rows["changed" if item.changed else "unchanged"].append(value)
    return {k: sum(v) / len(v) if v else 0.0 for k, v in rows.items()}


def step_reward(step: Mapping[str, Any]) -> float:
    """A step's mean train reward over every sample it read (``reward_read_mean``: with dynamic
    sampling ``reward_mean`` covers only the groups it trained on, a biased subset)."""
    return float(step.get("reward_read_mean", step.get("reward_mean", 0.0)))


def no_change_rates(
    answers: Mapping[str, Sequence[Answer]],
    predicate: Callable[[str], bool] = predicts_no_change,
) -> dict[str, float]:
    """Per model: the share of its answers that predict no change (``predicate``)."""
    return {
        name: sum(predicate(a.text) for a in rows) / len(rows) if rows else 0.0
        for name, rows in answers.items()
    }


def reward_trend(steps: Sequence[Mapping[str, Any]], window: int = 10) -> dict[str, float]:
    """Mean train reward of the first and of the last ``window`` steps (and their difference)."""
    rewards = [step_reward(s) for s in steps]
    if not rewards:
        return {"first": 0.0, "last": 0.0, "gain": 0.0, "window": float(window)}
    first = sum(rewards[:window]) / len(rewards[:window])
    last = sum(rewards[-window:]) / len(rewards[-window:])
    return {"first": first, "last": last, "gain": last - first, "window": float(window)}


def headline_summary(
    answers: Mapping[str, Sequence[Answer]],
    baseline: Mapping[str, float],
    *,
    seed: int,
    budget: str,
    metric: Metric,
) -> dict[str, Any]:
    """A run's ``headline``, ``headline_text`` and ``no_change_answers`` (with ``baseline``, the
    always-no-change scores of the held-out items, ``always_no_change``)."""
    head = headline(answers, seed, budget, metric, baselines={"always_no_change": baseline["all"]})
    unchanged = sum(1 for a in answers["start"] if a.changed is False)
    no_change = {
        **no_change_rates(answers, metric.no_change),
        "true_unchanged_share": unchanged / max(len(answers["start"]), 1),
        "always_no_change": dict(baseline),
    }
    return {
        "headline": head.to_dict(),
        "headline_text": describe(head),
        "no_change_answers": no_change,
    }
