"""Web transitions as prompt items, split by task and filtered by length; F1 split by change.

``web_transition_item`` turns one ``WebTransition`` into a ``PromptItem``: the prompt of
``tasks.web.build_web_prompt``, the rendered tree diff as both the ground truth the web F1 scorer
compares with and the SFT target, ``changed`` = the diff is not empty, and ``extra_info`` with the
task, source, split and index (the web scorer needs nothing else: it compares the two texts).

``build_web_items`` does the whole preparation in a fixed order: de-duplicate, split by task
family (``web.dataset``), drop examples whose prompt + target exceed ``max_tokens``, and cap each
side (``max_train`` a seeded sample, ``max_test`` the first in order). ``WebItems.report`` says
what each stage kept, so nothing is dropped silently.

``f1_by_change`` is the evaluation aggregate: mean F1 over all items, over the unchanged ones
(the answer is three ``None`` sections) and over the changed ones. ``predicts_no_change`` says
whether an answer is that "nothing changes" answer (``NO_CHANGE_ANSWER``): a world model that
always gives it is useless, yet F1 credits it on every unchanged item and, through the ``None``
sections, partly on changed ones.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from rlvr_world.items import PromptItem, web_item
from rlvr_world.rewards.web import parse_sections_strict, score_web
from rlvr_world.tasks.web import (
    EMPTY_SECTION,
    TreeDiff,
    WebTransition,
    build_web_prompt,
    render_diff,
)
from rlvr_world.web.dataset import dedupe, split_tasks, task_of, transition_key, within_length

__all__ = [
    "DEFAULT_MAX_TOKENS",
    "NO_CHANGE_ANSWER",
    "F1Split",
    "WebItems",
    "build_web_items",
    "f1_by_change",
    "predicts_no_change",
    "target_scores_one",
    "web_transition_item",
]

#: The CPU-sized length limit: prompt + target tokens (the paper's is 5,000), the context of the
#: pipeline's default tiny model (``TinyLMConfig.max_positions``).
DEFAULT_MAX_TOKENS = 1024

#: The answer "the action changes nothing": three ``None`` sections.
NO_CHANGE_ANSWER = render_diff(TreeDiff())


def web_transition_item(
    t: WebTransition,
    prompt_id: str,
    *,
    style: str = "compact",
    split: str = "train",
    index: int = 0,
) -> PromptItem:
    """One item (module docstring)."""
    diff = t.diff()
    item = web_item(prompt_id, build_web_prompt(t, style), render_diff(diff))
    extra: dict[str, Any] = {
        "task": task_of(t),
        "source": t.source,
        "split": split,
        "index": index,
    }
    return dataclasses.replace(item, extra_info=extra, changed=not diff.empty)


def target_scores_one(item: PromptItem) -> bool:
    """Whether the item's target, as an answer, gets F1 = 1 from both scorer variants."""
    return all(
        score_web(item.target, item.ground_truth, variant=v).reward == 1.0
        for v in ("strict", "paper")
    )


@dataclass
class WebItems:
    """Train and held-out items, the tasks on each side, and what each stage kept."""

    train: list[PromptItem]
    test: list[PromptItem]
    train_tasks: tuple[str, ...]
    test_tasks: tuple[str, ...]
    report: dict[str, int] = field(default_factory=dict)


def build_web_items(  # noqa: PLR0913 (an optional keyword per preparation stage)
    transitions: Iterable[WebTransition],
    *,
    count_tokens: Callable[[str], int],
    max_tokens: int = DEFAULT_MAX_TOKENS,
    test_fraction: float = 0.2,
    test_tasks: Sequence[str] = (),
    seed: int = 0,
    style: str = "compact",
    max_train: int | None = None,
    max_test: int | None = None,
) -> WebItems:
    """De-duplicate, split by task, filter by length, cap (module docstring).

    ``ValueError`` when ``max_tokens < 1`` or a held-out task is not in the data."""
    if max_tokens < 1:
        raise ValueError(f"max_tokens: expected >= 1, got {max_tokens}")
    all_t = list(transitions)
    unique, duplicates = dedupe(all_t, transition_key)
    split = split_tasks(
        [task_of(t) for t in unique], test_fraction=test_fraction, seed=seed, test_tasks=test_tasks
    )
    report = {"transitions": len(all_t), "duplicates": duplicates}
    sides: dict[str, list[PromptItem]] = {"train": [], "test": []}
    for name in ("train", "test"):
        tasks = set(split.train if name == "train" else split.test)
        chosen = [t for t in unique if task_of(t) in tasks]
        items = [
            web_transition_item(t, f"{name}-{i}", style=style, split=name, index=i)
            for i, t in enumerate(chosen)
        ]
        fits = [i for i in items if within_length(i.prompt, i.target, count_tokens, max_tokens)]
        report[f"{name}_before_length"] = len(items)
        report[f"{name}_too_long"] = len(items) - len(fits)
        cap = max_train if name == "train" else max_test
        if name == "train":
            random.Random(seed).shuffle(fits)
        if cap is not None:
            report[f"{name}_over_cap"] = max(0, len(fits) - cap)
            fits = fits[:cap]
        report[name] = len(fits)
        report[f"{name}_changed"] = sum(1 for i in fits if i.changed)
        report[f"{name}_unchanged"] = sum(1 for i in fits if not i.changed)
        sides[name] = fits
    return WebItems(sides["train"], sides["test"], split.train, split.test, report)


@dataclass(frozen=True)
class F1Split:
    """Mean F1 over all items and split by the true diff being empty or not."""

    n: int
    f1: float
    n_unchanged: int
    f1_unchanged: float
    n_changed: int
    f1_changed: float


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def f1_by_change(items: Sequence[PromptItem], rewards: Sequence[float]) -> F1Split:
    """The evaluation aggregate (module docstring); ``rewards[i]`` is item i's F1 (a failed
    score counts as 0). ``ValueError`` for unequal lengths or an item without ``changed``."""
    if len(items) != len(rewards):
        raise ValueError(f"{len(items)} items but {len(rewards)} rewards")
    unchanged: list[float] = []
    changed: list[float] = []
    for item, reward in zip(items, rewards, strict=True):
        if item.changed is None:
            raise ValueError(f"item {item.prompt_id}: changed is not set (not a web item?)")
        (changed if item.changed else unchanged).append(float(reward))
    return F1Split(
        n=len(items),
        f1=_mean(unchanged + changed),
        n_unchanged=len(unchanged),
        f1_unchanged=_mean(unchanged),
        n_changed=len(changed),
        f1_changed=_mean(changed),
    )


def predicts_no_change(text: str) -> bool:
    """Whether an answer says nothing changed: parsed strictly, it has at least one ``None`` item
    and no other item (headers alone, with no item at all, say nothing)."""
    sections, found = parse_sections_strict(text)
    items = set().union(*sections.values())
    return found and items == {EMPTY_SECTION}
