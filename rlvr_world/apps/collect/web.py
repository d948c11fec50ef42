"""``rlvr-world collect web``: record MiniWoB++ transitions into a directory, resumably.

The run records ``episodes`` episodes of every task (``episodes.record_episode``) in a fixed
order, task by task, and appends each finished episode as one JSON line to ``episodes.jsonl``
(flushed and synced), so a run that is stopped loses at most the episode in progress. Running
the same command again on the same directory skips the recorded episodes and continues; a run
with more ``--episodes`` adds the missing ones. Other settings must match the directory's
``config.json`` (else ``ValueError``: a directory holds one dataset).

After recording, the directory's outputs are rebuilt from ``episodes.jsonl`` in (task, episode)
order, so they are the same whether the data came in one run or several:

* ``transitions.jsonl``: every transition, de-duplicated (``web.dataset.transition_key``);
* ``train.jsonl`` / ``test.jsonl``: the same split by task family (held-out tasks never appear
  in training);
* ``failures.jsonl``: one line per failure, ``{task, episode, step, reason, detail}``;
* ``summary.json``: counts (episodes, transitions, duplicates, changed and unchanged, per split,
  failures by reason, steps whose page did not settle) and the split's tasks.

``runs.jsonl`` gets one line per invocation with its wall time and transitions per second (the
only output that depends on the machine). A crashed browser is recorded as the episode's failure
and replaced by a new one for the next episode.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import logging
import os
import time
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlvr_world.apps.collect.browser import Browser, BrowserSettings
from rlvr_world.apps.collect.episodes import EpisodeSpec, record_episode
from rlvr_world.tasks.web import web_transition_from_record
from rlvr_world.web.dataset import dedupe, split_tasks, transition_key

logger = logging.getLogger(__name__)

__all__ = ["CollectSettings", "available_tasks", "collect", "default_html_root"]

#: Bump when the directory layout or the record format changes.
FORMAT_VERSION = 1
#: ``file://<html root>`` is written as this in trees, so records do not depend on the install.
PORTABLE_ROOT = "file:///miniwob/html"


def default_html_root() -> Path:
    """The task pages shipped in the ``miniwob`` package (found without importing it, which
    would import Selenium and Gymnasium)."""
    spec = importlib.util.find_spec("miniwob")
    if spec is None or spec.origin is None:
        raise FileNotFoundError(
            "the miniwob package is not installed (pip install miniwob==1.1.0), or pass --html-root"
        )
    return Path(spec.origin).resolve().parent / "html"


def available_tasks(html_root: Path) -> list[str]:
    """Task names: the ``miniwob/<task>.html`` files under ``html_root``, sorted."""
    folder = html_root / "miniwob"
    if not folder.is_dir():
        raise ValueError(f"{folder}: no MiniWoB++ task folder (expected <html root>/miniwob)")
    return sorted(p.name[: -len(".html")] for p in folder.iterdir() if p.name.endswith(".html"))


@dataclass(frozen=True)
class CollectSettings:
    """What to record and where from."""

    tasks: tuple[str, ...]
    episodes: int
    max_steps: int = 5
    seed: int = 0
    test_fraction: float = 0.2
    test_tasks: tuple[str, ...] = ()
    max_tree_chars: int = 20_000
    html_root: Path = field(default_factory=default_html_root)
    browser: BrowserSettings = field(default_factory=BrowserSettings)

    def identity(self) -> dict[str, Any]:
        """The settings a directory is tied to (``episodes`` may grow between runs)."""
        return {
            "format": FORMAT_VERSION,
            "tasks": list(self.tasks),
            "seed": self.seed,
            "max_steps": self.max_steps,
            "max_tree_chars": self.max_tree_chars,
            "test_fraction": self.test_fraction,
            "test_tasks": list(self.test_tasks),
            "step_ms": self.browser.step_ms,
        }

    def validate(self) -> None:
        """``ValueError`` naming the setting that cannot work; ``FileNotFoundError`` without
        Chromium."""
        if not self.tasks:
            raise ValueError("tasks: give at least one MiniWoB++ task")
        if self.episodes < 1 or self.max_steps < 1 or self.max_tree_chars < 1:
            raise ValueError("episodes, max_steps and max_tree_chars must be >= 1")
        b = self.browser
        if not b.executable.is_file():
            raise FileNotFoundError(
                f"Chromium not found at {b.executable}: install Debian's chromium "
                "(make chromium-setup) or pass --chromium PATH"
            )
        if b.step_ms < 0 or b.settle_s < 0 or b.max_settle_s < b.settle_s:
            raise ValueError("step_ms and settle must be >= 0, and max_settle >= settle")
        known = set(available_tasks(self.html_root))
        unknown = [t for t in self.tasks if t not in known]
        if unknown:
            raise ValueError(
                f"unknown MiniWoB++ tasks: {', '.join(unknown)} "
                f"({len(known)} tasks under {self.html_root / 'miniwob'})"
            )
        split_tasks(
            self.tasks, test_fraction=self.test_fraction, seed=self.seed, test_tasks=self.test_tasks
        )


def _check_config(out: Path, settings: CollectSettings) -> None:
    path = out / "config.json"
    wanted = settings.identity()
    episodes = settings.episodes
    if path.exists():
        stored = json.loads(path.read_text(encoding="utf-8"))
        episodes = max(episodes, int(stored.pop("episodes", 0)))
        if stored != wanted:
            diff = sorted(k for k in set(stored) | set(wanted) if stored.get(k) != wanted.get(k))
            raise ValueError(
                f"{out} holds a collection with other settings ({', '.join(diff)} differ); "
                "use another directory or the same settings"
            )
    _write_json(path, {**wanted, "episodes": episodes})


def read_episodes(path: Path) -> list[dict[str, Any]]:
    """The recorded episodes. A last line cut off by a stop is removed from the file (that
    episode is recorded again); a bad line elsewhere is a ``ValueError`` naming it."""
    if not path.exists():
        return []
    raw = path.read_bytes()
    lines = raw.split(b"\n")
    episodes: list[dict[str, Any]] = []
    offset = 0
    for number, line in enumerate(lines, 1):
        if line.strip():
            try:
                episodes.append(json.loads(line))
            except json.JSONDecodeError as exc:
                if any(rest.strip() for rest in lines[number:]):
                    raise ValueError(f"{path}:{number}: not JSON ({exc.msg})") from exc
                logger.warning("%s:%d: an unfinished episode line; dropping it", path, number)
                with path.open("r+b") as fh:
                    fh.truncate(offset)
                break
        offset += len(line) + 1
    return episodes


def _append(path: Path, record: dict[str, Any]) -> None:
    with path.open("a", encoding="utf-8") as fh:
        fh.write(json.dumps(record, ensure_ascii=False) + "\n")
        fh.flush()
        os.fsync(fh.fileno())


def _write_json(path: Path, value: Any) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(value, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def _write_jsonl(path: Path, records: Iterable[dict[str, Any]]) -> int:
    tmp = path.with_suffix(path.suffix + ".tmp")
    count = 0
    with tmp.open("w", encoding="utf-8") as fh:
        for record in records:
            fh.write(json.dumps(record, ensure_ascii=False) + "\n")
            count += 1
    os.replace(tmp, path)
    return count


def _specs(settings: CollectSettings, done: set[tuple[str, int]]) -> Iterator[EpisodeSpec]:
    pages = settings.html_root / "miniwob"
    replacements = ((settings.html_root.as_uri(), PORTABLE_ROOT),)
    for task in settings.tasks:
        for episode in range(settings.episodes):
            if (task, episode) in done:
                continue
            yield EpisodeSpec(
                task=task,
                episode=episode,
                seed=settings.seed,
                page_url=(pages / f"{task}.html").as_uri(),
                record_url=f"file://miniwob/{task}.html",
                max_steps=settings.max_steps,
                max_tree_chars=settings.max_tree_chars,
                replacements=replacements,
            )


async def _record(settings: CollectSettings, out: Path, specs: list[EpisodeSpec]) -> dict[str, Any]:
    """Record the episodes, appending each; returns this invocation's counts and timing."""
    start = time.monotonic()
    browser: Browser | None = None
    transitions = 0
    failures: Counter[str] = Counter()
    try:
        for n, spec in enumerate(specs, 1):
            if browser is None or browser.crashed:
                if browser is not None:
                    await browser.close()
                browser = await Browser.launch(settings.browser)
            result = await record_episode(browser, spec)
            _append(out / "episodes.jsonl", result.to_json(spec))
            transitions += len(result.transitions)
            if result.failure is not None:
                failures[result.failure["reason"]] += 1
            if n % 10 == 0 or n == len(specs):
                elapsed = time.monotonic() - start
                logger.info(
                    "%d/%d episodes, %d transitions, %.2f transitions/s",
                    n,
                    len(specs),
                    transitions,
                    transitions / elapsed,
                )
    finally:
        if browser is not None:
            await browser.close()
    seconds = time.monotonic() - start
    return {
        "episodes": len(specs),
        "transitions": transitions,
        "failures": dict(sorted(failures.items())),
        "seconds": round(seconds, 3),
        "transitions_per_s": round(transitions / seconds, 3) if seconds > 0 else 0.0,
    }


def rebuild_outputs(out: Path, settings: CollectSettings) -> dict[str, Any]:
    """Write transitions, splits, failures and the summary from ``episodes.jsonl``."""
    order = {task: i for i, task in enumerate(settings.tasks)}
    episodes = [e for e in read_episodes(out / "episodes.jsonl") if e["task"] in order]
    episodes.sort(key=lambda e: (order[e["task"]], e["episode"]))
    records = [t for e in episodes for t in e["transitions"]]
    unique, duplicates = dedupe(records, lambda r: transition_key(web_transition_from_record(r)))
    split = split_tasks(
        settings.tasks,
        test_fraction=settings.test_fraction,
        seed=settings.seed,
        test_tasks=settings.test_tasks,
    )
    by_side = {
        side: [r for r in unique if split.side(r["source"].split("/", 1)[1]) == side]
        for side in ("train", "test")
    }
    failures = [f for e in episodes for f in e["failures"]]
    _write_jsonl(out / "transitions.jsonl", unique)
    for side, side_records in by_side.items():
        _write_jsonl(out / f"{side}.jsonl", side_records)
    _write_jsonl(out / "failures.jsonl", failures)
    changed = sum(1 for r in unique if any(r["diff"].values()))
    summary = {
        "episodes": len(episodes),
        "transitions_recorded": len(records),
        "duplicates": duplicates,
        "transitions": len(unique),
        "changed": changed,
        "unchanged": len(unique) - changed,
        "train": len(by_side["train"]),
        "test": len(by_side["test"]),
        "train_tasks": list(split.train),
        "test_tasks": list(split.test),
        "failures": dict(sorted(Counter(f["reason"] for f in failures).items())),
        "unsettled_steps": sum(e.get("unsettled_steps", 0) for e in episodes),
    }
    _write_json(out / "summary.json", summary)
    return summary


def collect(settings: CollectSettings, out: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """Record what is missing in ``out``, then rebuild its outputs (module docstring).

    Returns ``(summary, this run)``."""
    settings.validate()
    out.mkdir(parents=True, exist_ok=True)
    _check_config(out, settings)
    done = {(e["task"], e["episode"]) for e in read_episodes(out / "episodes.jsonl")}
    specs = list(_specs(settings, done))
    logger.info("%d episodes recorded before, %d to record", len(done), len(specs))
    run = asyncio.run(_record(settings, out, specs))
    _append(out / "runs.jsonl", run)
    return rebuild_outputs(out, settings), run
