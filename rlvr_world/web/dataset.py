"""Which task a web transition belongs to, de-duplication, the split by task, the length filter.

* **Task**: a MiniWoB++ record's ``source`` is ``miniwob++/<task>``; any other record (WebArena)
  has its objective as its task (one objective is one task there).
* **Family**: MiniWoB++ ships variants of one page (``click-collapsible-nodelay``,
  ``click-tab-2-hard``, ``click-checkboxes-large``, ``login-user-popup``). A task's family is its
  name without the ``-nodelay``, ``-easy``, ``-medium`` and ``-hard`` suffixes, cut to the shortest
  dash-separated prefix that is itself such a name among the tasks given: with ``click-tab`` in the
  list, ``click-tab-2-hard`` belongs to ``click-tab``. A split keeps whole families on one side, so
  no held-out page is seen in training as a variant. The rule errs on the side of grouping
  (``click-button-sequence`` goes with ``click-button``).
* **Split**: families are ranked by a SHA-256 of ``seed:family``; the first
  ``round(test_fraction * families)`` (at least one, when there are two families or more) are
  held out. Explicit held-out tasks take their whole families.
* **Duplicates**: two transitions with the same URL, objective, previous actions, tree before,
  action and tree after are one; the first is kept and the others are counted.
* **Length**: an example is kept when the prompt and its target together have at most
  ``max_tokens`` tokens of the caller's tokenizer (the paper drops examples over 5,000 tokens).

Pure: no I/O.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from rlvr_world.tasks.web import WebTransition

__all__ = [
    "MINIWOB_PREFIX",
    "VARIANT_SUFFIXES",
    "TaskSplit",
    "dedupe",
    "split_tasks",
    "strip_variant",
    "task_families",
    "task_of",
    "transition_key",
    "within_length",
]

MINIWOB_PREFIX = "miniwob++/"
VARIANT_SUFFIXES = ("-nodelay", "-easy", "-medium", "-hard")
#: Fewest task families a fraction can split: one held out, one left to train on.
MIN_FAMILIES_TO_SPLIT = 2

T = TypeVar("T")


def task_of(t: WebTransition) -> str:
    """The task a transition belongs to (module docstring)."""
    if t.source.startswith(MINIWOB_PREFIX):
        return t.source[len(MINIWOB_PREFIX) :]
    return t.objective


def strip_variant(task: str) -> str:
    """The task without its variant suffixes: ``click-tab-2-hard`` -> ``click-tab-2``."""
    changed = True
    while changed:
        changed = False
        for suffix in VARIANT_SUFFIXES:
            if task.endswith(suffix) and len(task) > len(suffix):
                task = task[: -len(suffix)]
                changed = True
    return task


def task_families(tasks: Iterable[str]) -> dict[str, str]:
    """``task -> family`` for every task given (module docstring)."""
    unique = list(dict.fromkeys(tasks))
    bases = {strip_variant(t) for t in unique}
    families: dict[str, str] = {}
    for task in unique:
        parts = strip_variant(task).split("-")
        prefixes = ("-".join(parts[: i + 1]) for i in range(len(parts)))
        families[task] = next(p for p in prefixes if p in bases)
    return families


@dataclass(frozen=True)
class TaskSplit:
    """Tasks for training and held-out tasks, each in the order given."""

    train: tuple[str, ...]
    test: tuple[str, ...]

    def side(self, task: str) -> str:
        """``train`` or ``test``; ``KeyError`` for a task in neither."""
        if task in self.test:
            return "test"
        if task in self.train:
            return "train"
        raise KeyError(f"task {task!r} is in neither split")


def _rank(seed: int, family: str) -> str:
    return hashlib.sha256(f"{seed}:{family}".encode()).hexdigest()


def split_tasks(
    tasks: Sequence[str],
    *,
    test_fraction: float,
    seed: int,
    test_tasks: Sequence[str] = (),
) -> TaskSplit:
    """Hold out whole families (module docstring). ``ValueError`` for a fraction outside [0, 1)
    or a held-out task that is not among ``tasks``."""
    if not 0.0 <= test_fraction < 1.0:
        raise ValueError(f"test_fraction: expected a value in [0, 1), got {test_fraction}")
    unique = list(dict.fromkeys(tasks))
    unknown = [t for t in test_tasks if t not in unique]
    if unknown:
        raise ValueError(f"held-out tasks not among the tasks: {', '.join(unknown)}")
    family_of = task_families(unique)
    families = list(dict.fromkeys(family_of.values()))
    if test_tasks:
        held = {family_of[t] for t in test_tasks}
    else:
        n_test = round(test_fraction * len(families))
        if test_fraction > 0 and len(families) >= MIN_FAMILIES_TO_SPLIT:
            n_test = min(max(n_test, 1), len(families) - 1)
        held = set(sorted(families, key=lambda f: _rank(seed, f))[:n_test])
    return TaskSplit(
        train=tuple(t for t in unique if family_of[t] not in held),
        test=tuple(t for t in unique if family_of[t] in held),
    )


def transition_key(t: WebTransition) -> str:
    """What makes two transitions the same (module docstring), as a SHA-256 hex digest."""
    fields = [t.url, t.objective, list(t.previous_actions), t.obs_before, t.action, t.obs_after]
    return hashlib.sha256(json.dumps(fields, ensure_ascii=False).encode()).hexdigest()


def dedupe(items: Iterable[T], key: Callable[[T], str]) -> tuple[list[T], int]:
    """``(first of each key, in order; how many later ones were dropped)``."""
    seen: set[str] = set()
    kept: list[T] = []
    dropped = 0
    for item in items:
        k = key(item)
        if k in seen:
            dropped += 1
            continue
        seen.add(k)
        kept.append(item)
    return kept, dropped


def within_length(
    prompt: str, target: str, count_tokens: Callable[[str], int], max_tokens: int
) -> bool:
    """Whether prompt and target together have at most ``max_tokens`` tokens."""
    return count_tokens(prompt) + count_tokens(target) <= max_tokens
