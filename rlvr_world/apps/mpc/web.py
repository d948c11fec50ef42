"""``rlvr-world run`` for ``task: web_mpc``: model-predictive control on MiniWoB++ pages in real
headless Chromium, with no world model, the base and the RLVR language world model.

Each episode opens a task page with a seed (``"<tasks.seed + i>/<task>"``, the same page for
every planner), then up to ``tasks.max_steps`` times: the candidates of the current tree and
their greedy values (``rlvr_world.web.planning``); a planner picks one; the browser performs it
with real mouse and keyboard events (a refused action: the next best); the tree after it is read.
The episode ends when MiniWoB says it is done; **success** is MiniWoB's own raw reward of 1 (the
task fully done: some tasks pay a part, e.g. click-checkboxes +0.6 for 4 of 5 boxes right, which
is not a success), and the mean raw reward (0 for an episode not done) is reported beside it.

Planners: ``greedy`` (no world model: the best greedy value on the current page), ``random``
(a seeded choice among the candidates), ``base`` / ``rlvr`` (the world model predicts each
candidate's next tree from the web run's compact prompt, in process; candidates are ranked by the
predicted value, ties by the greedy value). For the world models each step also records the
F1 of the prediction for the executed action against the change the browser showed.

Faults are counted per episode with their reason, and the run goes on: ``model_unavailable`` (a
world model that is missing or does not load: every episode of that planner), ``page_load``,
``browser_crash`` (the browser is started again for the next episode), ``tree_too_long``,
``no_action`` (nothing on the page could be acted on). One line per finished episode is appended
to ``episodes.jsonl``; a run started again skips the episodes it holds (``run.summarize_only``
summarises them without a browser). ``summary.json``: ``headline`` per planner (success rate with
its 95% bootstrap interval over episodes) and the paired differences ``rlvr_minus_base``,
``base_minus_greedy`` and ``rlvr_minus_greedy``; ``report.md`` with a table per task.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import time
from pathlib import Path
from typing import Any

from rlvr_world.apps.collect.browser import (
    ActionUnavailable,
    Browser,
    BrowserCrashed,
    BrowserSettings,
    PageLoadFailed,
)
from rlvr_world.apps.collect.web import PORTABLE_ROOT, available_tasks, default_html_root
from rlvr_world.apps.mpc.web_config import WebMpcConfig
from rlvr_world.apps.mpc.web_model import (
    WebWorldModel,
    build_tiny_web_models,
    load_web_world_model,
)
from rlvr_world.apps.mpc.web_report import web_mpc_headline, web_mpc_report
from rlvr_world.devices import resolve_device
from rlvr_world.mpc.dynamics import ModelUnavailable
from rlvr_world.rewards.web import score_web
from rlvr_world.tasks.web import WebTransition, build_web_prompt, render_diff, tree_diff
from rlvr_world.web.axtree import AxSnapshot, EpisodeIds
from rlvr_world.web.dataset import MINIWOB_PREFIX
from rlvr_world.web.planning import (
    Goal,
    ScoredAction,
    candidates,
    element_text,
    goal_terms,
    greedy_value,
    predicted_value,
    rank,
)
from rlvr_world.web.policy import PlannedAction

logger = logging.getLogger(__name__)

__all__ = ["run_web_mpc"]

EPISODES = "episodes.jsonl"
#: Characters of each prediction kept in ``episodes.jsonl``.
KEPT_CHARS = 400
#: MiniWoB's raw reward of a fully done task.
SUCCESS_REWARD = 1.0 - 1e-9


class _Fault(Exception):
    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


class _Episode:
    """What one planner does on one page (module docstring)."""

    def __init__(  # noqa: PLR0917 (one episode's identity, passed on together)
        self,
        cfg: WebMpcConfig,
        task: str,
        index: int,
        planner: str,
        model: WebWorldModel | None,
        html_root: Path,
    ) -> None:
        self.cfg, self.task, self.index, self.planner, self.model = cfg, task, index, planner, model
        self.page_url = (html_root / "miniwob" / f"{task}.html").as_uri()
        self.replacements = ((html_root.as_uri(), PORTABLE_ROOT),)
        self.page_seed = f"{cfg.tasks.seed + index}/{task}"
        self.rng = random.Random(f"{cfg.run.seed}/{planner}/{task}/{index}")
        self.steps: list[dict[str, Any]] = []
        self.greedy_choice: ScoredAction | None = None

    def _prompt(self, objective: str, previous: list[str], tree: AxSnapshot, action: str) -> str:
        t = WebTransition(
            source=MINIWOB_PREFIX + self.task,
            objective=objective,
            url=f"file://miniwob/{self.task}.html",
            previous_actions=tuple(previous),
            action=action,
            obs_before=tree.text,
            obs_after="",
            recorded_diff=None,
        )
        return build_web_prompt(t, "compact")

    async def _score(
        self,
        objective: str,
        previous: list[str],
        tree: AxSnapshot,
        goal: Goal,
        cands: list[PlannedAction],
    ) -> list[ScoredAction]:
        greedy = [greedy_value(tree, a, goal) for a in cands]
        if self.planner == "random":
            order = list(range(len(cands)))
            self.rng.shuffle(order)
            return [ScoredAction(cands[i], greedy[i]) for i in order]
        by_greedy = rank([ScoredAction(a, g) for a, g in zip(cands, greedy, strict=True)])
        if self.model is None:
            return by_greedy
        self.greedy_choice = by_greedy[0]
        prompts = [self._prompt(objective, previous, tree, a.render()) for a in cands]
        answers = await asyncio.to_thread(self.model.predict, prompts)
        scored = []
        for a, g, ans in zip(cands, greedy, answers, strict=True):
            if isinstance(ans, Exception):
                scored.append(ScoredAction(a, g, 0.0, f"error: {type(ans).__name__}: {ans}"))
            else:
                scored.append(ScoredAction(a, g, predicted_value(ans, tree, goal), ans))
        return rank(scored)

    async def _perform(
        self, browser: Browser, tree: AxSnapshot, ranked: list[ScoredAction]
    ) -> ScoredAction:
        refused = []
        for s in ranked:
            line = tree.line(s.action.node_id)
            assert line is not None and line.backend_id is not None  # candidates are such lines
            try:
                if s.action.kind == "click":
                    await browser.click(line.backend_id)
                else:
                    await browser.type_text(line.backend_id, s.action.text, s.action.enter)
            except ActionUnavailable as exc:
                refused.append(f"{s.action.render()}: {exc}")
                continue
            return s
        raise _Fault("no_action", "; ".join(refused) or "no candidate")

    async def run(self, browser: Browser) -> dict[str, Any]:
        tasks = self.cfg.tasks
        try:
            objective = await browser.start_task(self.page_url, self.page_seed)
        except PageLoadFailed as exc:
            raise _Fault("page_load", str(exc)) from exc
        ids = EpisodeIds()
        tree, _ = await browser.snapshot(ids, self.replacements)
        goal, reached, acted = goal_terms(objective), set[str](), set[int]()
        previous: list[str] = []
        done, reward = False, 0.0
        for _ in range(tasks.max_steps):
            if len(tree.text) > tasks.max_tree_chars:
                raise _Fault("tree_too_long", f"{len(tree.text)} chars > {tasks.max_tree_chars}")
            left = goal.remaining(reached)
            cands = candidates(tree, left, acted_on=acted, limit=self.cfg.planner.candidates)
            if not cands:
                raise _Fault("no_action", f"nothing left to act on among {len(tree.lines)} lines")
            t0 = time.perf_counter()
            ranked = await self._score(objective, previous, tree, left, cands)
            plan_s = time.perf_counter() - t0
            chosen = await self._perform(browser, tree, ranked)
            after, _ = await browser.snapshot(ids, self.replacements)
            done, reward = await browser.episode_state()
            self.steps.append(self._step(tree, after, chosen, plan_s, len(cands)))
            acted.add(chosen.action.node_id)
            reached.update(
                left.found_in(element_text(tree, chosen.action.node_id) + " " + chosen.action.text)
            )
            previous.append(chosen.action.render())
            tree = after
            if done:
                break
        return {
            "objective": objective,
            "done": done,
            "raw_reward": reward if done else 0.0,
            "success": bool(done and reward >= SUCCESS_REWARD),
        }

    def _step(
        self, tree: AxSnapshot, after: AxSnapshot, chosen: ScoredAction, plan_s: float, n: int
    ) -> dict[str, Any]:
        diff = tree_diff(tree.text, after.text)
        truth = render_diff(diff)
        step: dict[str, Any] = {
            "action": chosen.action.render(),
            "greedy_value": round(chosen.greedy, 4),
            "candidates": n,
            "plan_seconds": round(plan_s, 4),
            "changed": not diff.empty,
        }
        if chosen.prediction is not None:
            step["predicted_value"] = round(chosen.predicted or 0.0, 4)
            assert self.greedy_choice is not None  # set with every prediction
            step["greedy_choice"] = self.greedy_choice.action.render()
            step["prediction"] = chosen.prediction[:KEPT_CHARS]
            step["prediction_f1"] = (
                None
                if chosen.prediction.startswith("error: ")
                else round(score_web(chosen.prediction, truth).reward, 4)
            )
        return step

    def record(self, status: str, result: dict[str, Any], reason: str = "") -> dict[str, Any]:
        return {
            "planner": self.planner,
            "task": self.task,
            "index": self.index,
            "page_seed": self.page_seed,
            "status": status,
            "reason": reason,
            "success": bool(result.get("success", False)),
            "steps": self.steps,
            **{k: v for k, v in result.items() if k != "success"},
        }


def read_episodes(path: Path) -> list[dict[str, Any]]:
    """The finished episodes of ``path`` (a torn last line, from a run stopped mid-write, is
    dropped with a warning)."""
    if not path.is_file():
        return []
    out = []
    lines = path.read_text().splitlines()
    for n, line in enumerate(lines, 1):
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            if n < len(lines):
                raise ValueError(f"{path}:{n}: not a JSON line") from None
            logger.warning("%s: torn last line dropped (a run stopped mid-write)", path)
    return out


def _models(cfg: WebMpcConfig) -> dict[str, WebWorldModel | ModelUnavailable]:
    import torch

    m = cfg.models
    torch.set_num_threads(m.torch_threads)
    if m.build_tiny:
        corpus = [
            f"New items:\nDeleted items:\nUpdated items:\nNone [{i}] button" for i in range(50)
        ]
        build_tiny_web_models(m.base, m.rlvr, corpus)
    out: dict[str, WebWorldModel | ModelUnavailable] = {}
    for name in ("base", "rlvr"):
        if name not in cfg.run.planners:
            continue
        try:
            out[name] = load_web_world_model(
                name, getattr(m, name), base=m.base, max_tokens=m.max_tokens, device=m.device
            )
        except ModelUnavailable as exc:
            logger.error("world model %s unavailable: %s", name, exc)
            out[name] = exc
    return out


async def _run_all(cfg: WebMpcConfig, out: Path) -> None:
    html_root = cfg.tasks.html_root or default_html_root()
    known = set(available_tasks(html_root))
    unknown = [t for t in cfg.tasks.names if t not in known]
    if unknown:
        raise ValueError(f"tasks.names: unknown MiniWoB++ tasks {unknown} under {html_root}")
    settings = cfg.browser.to(BrowserSettings)
    if not settings.executable.is_file():
        raise FileNotFoundError(f"Chromium not found at {settings.executable}: make chromium-setup")
    kept = read_episodes(out / EPISODES)
    text = (out / EPISODES).read_text() if (out / EPISODES).is_file() else ""
    if text and not text.endswith("\n"):  # a torn last line: rewrite without it, then append
        (out / EPISODES).write_text("".join(json.dumps(r) + "\n" for r in kept))
    done = {(r["planner"], r["task"], r["index"]) for r in kept}
    models = _models(cfg)
    browser: Browser | None = None
    try:
        for task in cfg.tasks.names:
            for index in range(cfg.tasks.seeds):
                for planner in cfg.run.planners:
                    if (planner, task, index) in done:
                        continue
                    model = models.get(planner)
                    ep = _Episode(
                        cfg,
                        task,
                        index,
                        planner,
                        model if isinstance(model, WebWorldModel) else None,
                        html_root,
                    )
                    if isinstance(model, ModelUnavailable):
                        rec = ep.record("fault", {}, f"model_unavailable: {model}")
                    else:
                        if browser is None or browser.crashed:
                            if browser is not None:
                                await browser.close()
                            browser = await Browser.launch(settings)
                        rec = await _one(ep, browser)
                    with (out / EPISODES).open("a") as f:
                        f.write(json.dumps(rec) + "\n")
            logger.info("web MPC: %s done", task)
    finally:
        if browser is not None:
            await browser.close()


async def _one(ep: _Episode, browser: Browser) -> dict[str, Any]:
    try:
        return ep.record("ok", await ep.run(browser))
    except _Fault as exc:
        return ep.record("fault", {}, f"{exc.reason}: {exc.detail}")
    except BrowserCrashed as exc:
        return ep.record("fault", {}, f"browser_crash: {exc}")


def summarize_web_mpc(cfg: WebMpcConfig, config_path: str, wall_s: float) -> dict[str, Any]:
    """``summary.json`` and ``report.md`` from ``episodes.jsonl``."""
    out = cfg.run.run_dir
    records = [
        r
        for r in read_episodes(out / EPISODES)
        if r["task"] in cfg.tasks.names
        and r["index"] < cfg.tasks.seeds
        and r["planner"] in cfg.run.planners
    ]
    headline = web_mpc_headline(
        records, cfg.run.planners, resamples=cfg.run.resamples, seed=cfg.run.seed
    )
    summary = {
        "config": config_path,
        "task": "web_mpc",
        "run_dir": str(out),
        "planners": list(cfg.run.planners),
        "tasks": list(cfg.tasks.names),
        "seeds_per_task": cfg.tasks.seeds,
        "models": {"base": str(cfg.models.base), "rlvr": str(cfg.models.rlvr)},
        "device": resolve_device(cfg.models.device, "models.device"),
        "value_function": "rule-based goal-term matching (rlvr_world.web.planning)",
        "headline": headline,
        "wall_s": round(wall_s, 1),
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    (out / "report.md").write_text(web_mpc_report(summary, records))
    return summary


def run_web_mpc(cfg: WebMpcConfig, config_path: str) -> dict[str, Any]:
    """Run (unless ``run.summarize_only``), then summarise (module docstring)."""
    t0 = time.monotonic()
    resolve_device(cfg.models.device, "models.device")  # a missing CUDA device: refused first
    cfg.run.run_dir.mkdir(parents=True, exist_ok=True)
    if not cfg.run.summarize_only:
        asyncio.run(_run_all(cfg, cfg.run.run_dir))
    return summarize_web_mpc(cfg, config_path, time.monotonic() - t0)
