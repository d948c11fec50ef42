"""The web collector against real headless Chromium on MiniWoB++ pages from the miniwob package.

Checks: recorded trees show what the page's DOM shows (button texts, checkbox labels, typed
values, checked state); a second run with the same seed writes identical outputs, also for a
page with its own timers (the fake page clock); a resumed run (stopped mid-line, or continued
with more episodes) ends with the same outputs and no duplicate episodes; page-load failures, an
over-long tree and a renderer crash are recorded with their reasons.
Needs Debian's chromium (``make chromium-setup``) and the ``web`` extra.
"""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from rlvr_world.apps.cli import main
from rlvr_world.apps.collect.browser import Browser, BrowserSettings
from rlvr_world.apps.collect.episodes import EpisodeSpec, record_episode
from rlvr_world.apps.collect.web import (
    PORTABLE_ROOT,
    CollectSettings,
    collect,
    default_html_root,
)
from rlvr_world.tasks.web import tree_items
from rlvr_world.web.axtree import EpisodeIds

pytestmark = [pytest.mark.integration, pytest.mark.slow]

TASKS = ("click-button", "click-checkboxes", "enter-text")
#: A page with its own timers: a cursor blinking every 800 ms, and today's date in the text.
TIMED = "terminal"
OUTPUTS = ("transitions.jsonl", "train.jsonl", "test.jsonl", "failures.jsonl", "summary.json")
BROWSER = BrowserSettings(call_timeout_s=60.0)
#: Visible buttons, checkbox labels and text inputs of the task area, as the DOM has them.
DOM_QUERY = """() => {
  const shown = (e) => e.offsetParent !== null;
  const area = document.getElementById('area');
  return {
    query: document.getElementById('query').textContent.replace(/\\s+/g, ' ').trim(),
    buttons: [...area.querySelectorAll('button')].filter(shown).map(b => b.textContent),
    labels: [...area.querySelectorAll('input[type=checkbox]')].filter(shown)
      .map(c => c.parentElement.textContent.trim()),
    inputs: [...area.querySelectorAll('input[type=text]')].filter(shown).length,
  };
}"""


@pytest.fixture(scope="module")
def html_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The package's pages for TASKS, plus a page whose core script is missing and a task file
    that points nowhere (a symlink to a file that does not exist)."""
    if not BROWSER.executable.is_file():
        pytest.fail(f"{BROWSER.executable} is missing: run `make chromium-setup`")
    real = default_html_root()
    root = tmp_path_factory.mktemp("html")
    for folder in ("core", "common", "flight"):
        (root / folder).symlink_to(real / folder)
    pages = root / "miniwob"
    pages.mkdir()
    for task in (*TASKS, TIMED):
        (pages / f"{task}.html").symlink_to(real / "miniwob" / f"{task}.html")
    (pages / "broken-core.html").write_text(
        "<html><head><script src='../core/no-such-core.js'></script></head>"
        "<body><div id='wrap'><div id='query'>Broken.</div><div id='area'></div></div></body>"
        "</html>",
        encoding="utf-8",
    )
    (pages / "missing-page.html").symlink_to(root / "nowhere.html")
    return root


def settings(
    html_root: Path, tasks: tuple[str, ...] = (*TASKS, TIMED), **kw: Any
) -> CollectSettings:
    base: dict[str, Any] = {
        "tasks": tasks,
        "episodes": 2,
        "max_steps": 3,
        "seed": 5,
        "test_tasks": ("enter-text",),
        "html_root": html_root,
        "browser": BROWSER,
    }
    base.update(kw)
    return CollectSettings(**base)


def outputs(folder: Path) -> dict[str, bytes]:
    return {name: (folder / name).read_bytes() for name in OUTPUTS}


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


@pytest.fixture(scope="module")
def collected(html_root: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("collected")
    summary, run = collect(settings(html_root), out)
    assert run["episodes"] == 8 and run["transitions"] == summary["transitions_recorded"] > 0
    assert run["transitions_per_s"] > 0
    return out


def test_recorded_trees_show_what_the_page_shows(html_root: Path, collected: Path) -> None:
    """Each task's first recorded tree is the live page's tree, and holds the DOM's texts."""
    records = read_jsonl(collected / "transitions.jsonl")
    replacements = ((html_root.as_uri(), PORTABLE_ROOT),)

    async def check() -> None:
        browser = await Browser.launch(BROWSER)
        try:
            for task in TASKS:
                first = next(r for r in records if r["source"] == f"miniwob++/{task}")
                assert (first["episode"], first["step"]) == (0, 0)
                url = (html_root / "miniwob" / f"{task}.html").as_uri()
                objective = await browser.start_task(url, f"5/{task}/0")
                tree, settled = await browser.snapshot(EpisodeIds(), replacements)
                assert settled and tree.text == first["obs_before"]
                dom = await browser.evaluate(DOM_QUERY)
                assert objective == first["objective"] == dom["query"]
                assert f"StaticText {dom['query']!r}" in tree.text or task == "enter-text"
                for text in dom["buttons"]:
                    assert f"button {text!r}" in tree.text, (task, text)
                for label in dom["labels"]:
                    assert f"checkbox {label!r} checked: false" in tree.text, (task, label)
                textboxes = [line for line in tree.lines if line.role == "textbox"]
                assert len(textboxes) == dom["inputs"]
                assert dom["buttons"] and (task != "click-checkboxes" or dom["labels"])
                if task == "enter-text":
                    await typed_value_appears(browser, replacements)
                if task == "click-checkboxes":
                    await checked_state_appears(browser, replacements)
        finally:
            await browser.close()

    asyncio.run(check())


async def typed_value_appears(browser: Browser, replacements: tuple[tuple[str, str], ...]) -> None:
    ids = EpisodeIds()
    tree, _ = await browser.snapshot(ids, replacements)
    box = next(line for line in tree.lines if line.role == "textbox")
    assert box.backend_id is not None
    await browser.type_text(box.backend_id, "Hello there", enter=False)
    after, _ = await browser.snapshot(ids, replacements)
    assert await browser.evaluate("document.getElementById('tt').value") == "Hello there"
    rendered = after.text.splitlines()
    at = next(i for i, line in enumerate(after.lines) if line.node_id == box.node_id)
    assert "focused: True" in rendered[at]
    assert rendered[at + 1].startswith("\t" * (box.depth + 1))
    assert rendered[at + 1].endswith("StaticText 'Hello there'")


async def checked_state_appears(
    browser: Browser, replacements: tuple[tuple[str, str], ...]
) -> None:
    ids = EpisodeIds()
    tree, _ = await browser.snapshot(ids, replacements)
    box = next(line for line in tree.lines if line.role == "checkbox")
    assert box.backend_id is not None
    await browser.click(box.backend_id)
    after, _ = await browser.snapshot(ids, replacements)
    assert await browser.evaluate("document.getElementById('ch0').checked") is True
    changed = tree_items(after.text)[str(box.node_id)]
    assert "checked: true" in changed and "focused: True" in changed


def test_same_seed_same_outputs_and_resume(
    html_root: Path, collected: Path, tmp_path: Path
) -> None:
    summary = json.loads((collected / "summary.json").read_text())
    assert summary["train_tasks"] == ["click-button", "click-checkboxes", TIMED]
    assert summary["test_tasks"] == ["enter-text"]
    assert summary["changed"] + summary["unchanged"] == summary["transitions"]
    assert summary["train"] + summary["test"] == summary["transitions"]
    assert all(r["source"] == "miniwob++/enter-text" for r in read_jsonl(collected / "test.jsonl"))
    expected = outputs(collected)

    # the same command on the same directory records nothing more and changes nothing
    _, run = collect(settings(html_root), collected)
    assert run["episodes"] == 0 and outputs(collected) == expected

    # a second directory, one episode per task, then two: the same outputs as in one run
    grown = tmp_path / "grown"
    collect(settings(html_root, episodes=1), grown)
    _, run = collect(settings(html_root), grown)
    assert run["episodes"] == 4
    assert outputs(grown) == expected

    # a run stopped while writing an episode: the cut line is dropped and that episode redone
    stopped = tmp_path / "stopped"
    stopped.mkdir()
    shutil.copy(collected / "config.json", stopped / "config.json")
    lines = (collected / "episodes.jsonl").read_bytes().splitlines(keepends=True)
    (stopped / "episodes.jsonl").write_bytes(lines[0] + lines[1][: len(lines[1]) // 2])
    _, run = collect(settings(html_root), stopped)
    assert run["episodes"] == 7
    assert outputs(stopped) == expected
    recorded = [(e["task"], e["episode"]) for e in read_jsonl(stopped / "episodes.jsonl")]
    assert len(recorded) == len(set(recorded)) == 8
    # pages run on the fake clock: the date is the clock's, not today's
    timed = [r for r in read_jsonl(collected / "transitions.jsonl") if TIMED in r["source"]]
    assert timed and all("Last login: Mon Jan 01 2024" in r["obs_before"] for r in timed)


def test_failures_are_recorded_with_their_reasons(html_root: Path, tmp_path: Path) -> None:
    tasks = ("missing-page", "broken-core", "click-button")
    summary, _ = collect(settings(html_root, tasks, episodes=1, test_tasks=()), tmp_path / "a")
    failures = {f["task"]: f for f in read_jsonl(tmp_path / "a" / "failures.jsonl")}
    assert set(failures) == {"missing-page", "broken-core"}
    assert failures["missing-page"]["reason"] == "page_load"
    assert "ERR_FILE_NOT_FOUND" in failures["missing-page"]["detail"]
    assert failures["broken-core"]["reason"] == "page_load"
    assert "no MiniWoB core" in failures["broken-core"]["detail"]
    assert summary["failures"] == {"page_load": 2} and summary["transitions"] > 0

    summary, _ = collect(
        settings(html_root, ("click-button",), episodes=1, test_tasks=(), max_tree_chars=40),
        tmp_path / "b",
    )
    (failure,) = read_jsonl(tmp_path / "b" / "failures.jsonl")
    assert failure["reason"] == "tree_too_long" and failure["step"] == 0
    assert failure["detail"].startswith("tree before step: ") and "> 40" in failure["detail"]
    assert summary["transitions"] == 0 and summary["failures"] == {"tree_too_long": 1}


def test_a_renderer_crash_is_a_recorded_failure(html_root: Path) -> None:
    spec = EpisodeSpec(
        task="click-button",
        episode=0,
        seed=0,
        page_url=(html_root / "miniwob" / "click-button.html").as_uri(),
        record_url="file://miniwob/click-button.html",
        max_steps=2,
        max_tree_chars=20_000,
    )

    async def run() -> None:
        browser = await Browser.launch(BROWSER)
        try:
            await browser.crash_page()
            assert browser.crashed
            result = await record_episode(browser, spec)
        finally:
            await browser.close()
        assert result.transitions == [] and result.failure is not None
        assert result.failure["reason"] == "browser_crash"
        fresh = await Browser.launch(BROWSER)
        try:
            assert (await record_episode(fresh, spec)).transitions
        finally:
            await fresh.close()

    asyncio.run(run())


def test_cli_bad_input(
    html_root: Path, collected: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = ["--html-root", str(html_root)]
    out = ["--out", str(collected)]
    assert main(["collect", "web", *out, "--tasks", "no-such-task", *root]) == 2
    assert "unknown MiniWoB++ tasks: no-such-task" in capsys.readouterr().err
    tasks = ",".join((*TASKS, TIMED))
    args = ["collect", "web", *out, "--tasks", tasks, "--test-tasks", "enter-text"]
    assert main([*args, "--seed", "6", "--max-steps", "3", *root]) == 2
    assert "other settings (seed differ)" in capsys.readouterr().err
    assert main([*args, "--seed", "5", "--max-steps", "3", "--episodes", "2", *root]) == 0
    assert "this run: 0 episodes" in capsys.readouterr().out
