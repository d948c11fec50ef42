"""Recording one MiniWoB++ episode in a real browser: the transitions, or why it stopped.

An episode opens a task page with a seed, then up to ``max_steps`` times: the policy picks an
element of the current tree, the browser acts on it, and the tree after the action is read once
the page has settled. Each step gives one transition in the shared format
(``../shared/data/web/miniwob_transitions.jsonl``: ``source, episode, step, objective, url,
previous_actions, action, action_target, obs_before, obs_after, diff, episode_done,
raw_reward``). The episode ends when MiniWoB says it is done, after ``max_steps``, or at the first
failure, which is returned with its reason (``FAILURE_REASONS``); transitions recorded before a
failure are kept.

The page seed is ``"<seed>/<task>/<episode>"`` and the policy's generator is seeded with
``"policy/<seed>/<task>/<episode>"``; with the ids numbered per episode (``web.axtree``) an
episode's records depend only on (seed, task, episode) and the pages, not on what ran before.
"""

from __future__ import annotations

import logging
import random
from dataclasses import dataclass, field
from typing import Any

from rlvr_world.apps.collect.browser import (
    ActionUnavailable,
    Browser,
    BrowserCrashed,
    PageLoadFailed,
)
from rlvr_world.tasks.web import tree_diff
from rlvr_world.web.axtree import AxSnapshot, EpisodeIds
from rlvr_world.web.dataset import MINIWOB_PREFIX
from rlvr_world.web.policy import PlannedAction, choose_action

logger = logging.getLogger(__name__)

__all__ = ["FAILURE_REASONS", "EpisodeResult", "EpisodeSpec", "record_episode"]

#: page_load: navigation failed or the page is not a MiniWoB task; browser_crash: the renderer or
#: browser died; tree_too_long: a tree over the character limit; no_action: nothing on the page
#: could be acted on; action_failed: the browser refused the chosen action.
FAILURE_REASONS = ("page_load", "browser_crash", "tree_too_long", "no_action", "action_failed")
#: How many elements the policy may pick in one step before the step is a ``no_action``.
MAX_PICKS = 12


@dataclass(frozen=True)
class EpisodeSpec:
    """Which episode to record and its limits."""

    task: str
    episode: int
    seed: int
    page_url: str  # where the browser loads the page from
    record_url: str  # what the records say (independent of the install path)
    max_steps: int
    max_tree_chars: int
    replacements: tuple[tuple[str, str], ...] = ()  # local paths -> install-independent text

    @property
    def page_seed(self) -> str:
        return f"{self.seed}/{self.task}/{self.episode}"

    @property
    def policy_seed(self) -> str:
        return f"policy/{self.seed}/{self.task}/{self.episode}"


@dataclass
class EpisodeResult:
    """What one episode gave: transitions, at most one failure, and steps not settled."""

    transitions: list[dict[str, Any]] = field(default_factory=list)
    failure: dict[str, Any] | None = None
    unsettled_steps: int = 0

    def to_json(self, spec: EpisodeSpec) -> dict[str, Any]:
        return {
            "task": spec.task,
            "episode": spec.episode,
            "transitions": self.transitions,
            "failures": [] if self.failure is None else [self.failure],
            "unsettled_steps": self.unsettled_steps,
        }


def _failure(spec: EpisodeSpec, step: int, reason: str, detail: str) -> dict[str, Any]:
    logger.info("%s episode %d step %d: %s: %s", spec.task, spec.episode, step, reason, detail)
    return {
        "task": spec.task,
        "episode": spec.episode,
        "step": step,
        "reason": reason,
        "detail": detail,
    }


def _too_long(spec: EpisodeSpec, tree: AxSnapshot) -> int | None:
    size = len(tree.text)
    return size if size > spec.max_tree_chars else None


class _NothingToActOn(ActionUnavailable):
    """The tree has no line that stands for a DOM node."""


async def _act(
    browser: Browser, tree: AxSnapshot, objective: str, rng: random.Random
) -> PlannedAction:
    """Pick and perform an action; ``ActionUnavailable`` when no pick could be performed."""
    tried: set[int] = set()
    last = "every element the policy picked was refused"
    for _ in range(MAX_PICKS):
        action = choose_action(tree, objective, rng, exclude=tried)
        if action is None:
            if not tried:
                raise _NothingToActOn(f"no element to act on among {len(tree.lines)} lines")
            break
        line = tree.line(action.node_id)
        assert line is not None and line.backend_id is not None  # the policy picks such lines
        try:
            if action.kind == "click":
                await browser.click(line.backend_id)
            else:
                await browser.type_text(line.backend_id, action.text, action.enter)
        except ActionUnavailable as exc:
            tried.add(action.node_id)
            last = f"{action.render()}: {exc}"
            continue
        return action
    raise ActionUnavailable(last)


async def record_episode(browser: Browser, spec: EpisodeSpec) -> EpisodeResult:
    """Record one episode (module docstring). ``BrowserCrashed`` is recorded, not raised: the
    caller checks ``browser.crashed`` and starts a new browser."""
    result = EpisodeResult()
    step = 0
    try:
        try:
            objective = await browser.start_task(spec.page_url, spec.page_seed)
        except PageLoadFailed as exc:
            result.failure = _failure(spec, 0, "page_load", str(exc))
            return result
        ids = EpisodeIds()
        rng = random.Random(spec.policy_seed)
        tree, settled = await browser.snapshot(ids, spec.replacements)
        result.unsettled_steps += not settled
        previous: list[str] = []
        for step in range(spec.max_steps):
            size = _too_long(spec, tree)
            if size is not None:
                detail = f"tree before step: {size} chars > {spec.max_tree_chars}"
                result.failure = _failure(spec, step, "tree_too_long", detail)
                return result
            try:
                action = await _act(browser, tree, objective, rng)
            except ActionUnavailable as exc:
                reason = "no_action" if isinstance(exc, _NothingToActOn) else "action_failed"
                result.failure = _failure(spec, step, reason, str(exc))
                return result
            after, settled = await browser.snapshot(ids, spec.replacements)
            result.unsettled_steps += not settled
            size = _too_long(spec, after)
            if size is not None:
                detail = f"tree after {action.render()}: {size} chars > {spec.max_tree_chars}"
                result.failure = _failure(spec, step, "tree_too_long", detail)
                return result
            done, reward = await browser.episode_state()
            target = tree.line(action.node_id)
            diff = tree_diff(tree.text, after.text)
            result.transitions.append(
                {
                    "source": MINIWOB_PREFIX + spec.task,
                    "episode": spec.episode,
                    "step": step,
                    "objective": objective,
                    "url": spec.record_url,
                    "previous_actions": list(previous),
                    "action": action.render(),
                    "action_target": target.text if target is not None else "",
                    "obs_before": tree.text,
                    "obs_after": after.text,
                    "diff": {
                        "new": list(diff.new),
                        "deleted": list(diff.deleted),
                        "updated": list(diff.updated),
                    },
                    "episode_done": done,
                    "raw_reward": reward if done else 0,
                }
            )
            if done:
                break
            previous.append(action.render())
            tree = after
    except BrowserCrashed as exc:
        result.failure = _failure(spec, step, "browser_crash", str(exc))
    return result
