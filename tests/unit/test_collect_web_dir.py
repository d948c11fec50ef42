"""The collector's output directory without a browser: settings checks, the episode log's
cut-off last line, and a directory started with other settings."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rlvr_world.apps.collect.browser import BrowserSettings
from rlvr_world.apps.collect.web import (
    CollectSettings,
    available_tasks,
    collect,
    read_episodes,
    rebuild_outputs,
)


@pytest.fixture
def html_root(tmp_path: Path) -> Path:
    root = tmp_path / "html"
    (root / "miniwob").mkdir(parents=True)
    for task in ("b-task", "a-task", "a-task-hard"):
        (root / "miniwob" / f"{task}.html").write_text("<html></html>", encoding="utf-8")
    (root / "miniwob" / "notes.txt").write_text("not a task", encoding="utf-8")
    return root


def settings(root: Path, **kw: object) -> CollectSettings:
    base: dict[str, object] = {"tasks": ("a-task", "b-task"), "episodes": 1, "html_root": root}
    base.update(kw)
    return CollectSettings(**base)  # type: ignore[arg-type]


def test_tasks_are_the_html_files(html_root: Path, tmp_path: Path) -> None:
    assert available_tasks(html_root) == ["a-task", "a-task-hard", "b-task"]
    with pytest.raises(ValueError, match="no MiniWoB"):
        available_tasks(tmp_path / "nowhere")


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"tasks": ()}, "at least one"),
        ({"tasks": ("a-task", "zz")}, "unknown MiniWoB\\+\\+ tasks: zz \\(3 tasks under"),
        ({"episodes": 0}, "must be >= 1"),
        ({"max_tree_chars": 0}, "must be >= 1"),
        ({"browser": BrowserSettings(step_ms=-1)}, "step_ms"),
        ({"browser": BrowserSettings(settle_s=2.0, max_settle_s=1.0)}, "max_settle"),
        ({"test_tasks": ("zz",)}, "held-out tasks not among the tasks: zz"),
        ({"test_fraction": 1.5}, "test_fraction"),
        ({"browser": BrowserSettings(executable=Path("/no/chromium"))}, "Chromium not found"),
    ],
)
def test_bad_settings_are_refused_before_anything_runs(
    html_root: Path, tmp_path: Path, change: dict[str, object], message: str
) -> None:
    out = tmp_path / "out"
    with pytest.raises((ValueError, FileNotFoundError), match=message):
        collect(settings(html_root, **change), out)
    assert not out.exists()  # nothing written, no browser started


def episode(task: str, n: int) -> dict[str, object]:
    return {"task": task, "episode": n, "transitions": [], "failures": [], "unsettled_steps": 0}


def test_a_cut_last_line_is_dropped_and_the_file_repaired(tmp_path: Path) -> None:
    path = tmp_path / "episodes.jsonl"
    lines = [json.dumps(episode("a-task", 0)), json.dumps(episode("a-task", 1))]
    path.write_text(lines[0] + "\n" + lines[1][:20], encoding="utf-8")
    assert read_episodes(path) == [episode("a-task", 0)]
    assert path.read_text(encoding="utf-8") == lines[0] + "\n"
    assert read_episodes(tmp_path / "absent.jsonl") == []


def test_a_bad_line_inside_the_log_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "episodes.jsonl"
    good = json.dumps(episode("a-task", 0))
    path.write_text(f"{good}\nnot json\n{good}\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"episodes\.jsonl:2: not JSON"):
        read_episodes(path)
    assert path.read_text(encoding="utf-8").count("\n") == 3  # left as it was


def test_a_directory_keeps_its_settings(html_root: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    config = settings(html_root).identity() | {"episodes": 1}
    (out / "config.json").write_text(json.dumps(config), encoding="utf-8")
    with pytest.raises(ValueError, match="other settings \\(max_steps, seed differ\\)"):
        collect(settings(html_root, seed=3, max_steps=2), out)


def test_outputs_are_rebuilt_from_the_log_in_task_order(html_root: Path, tmp_path: Path) -> None:
    record = {
        "source": "miniwob++/b-task",
        "episode": 0,
        "step": 0,
        "objective": "o",
        "url": "file://miniwob/b-task.html",
        "previous_actions": [],
        "action": "click [1]",
        "obs_before": "[1] button 'a'",
        "obs_after": "[1] button 'a' focused: True",
        "diff": {"new": [], "deleted": [], "updated": ["[1] button 'a' focused: True"]},
    }
    failure = {"task": "a-task", "episode": 0, "step": 0, "reason": "page_load", "detail": "x"}
    log = [
        {**episode("b-task", 0), "transitions": [record, record], "unsettled_steps": 1},
        {**episode("a-task", 0), "failures": [failure]},
        episode("gone-task", 0),  # a task no longer asked for is left out
    ]
    (tmp_path / "episodes.jsonl").write_text(
        "".join(json.dumps(e) + "\n" for e in log), encoding="utf-8"
    )
    summary = rebuild_outputs(tmp_path, settings(html_root, test_tasks=("b-task",)))
    assert summary == {
        "episodes": 2,
        "transitions_recorded": 2,
        "duplicates": 1,
        "transitions": 1,
        "changed": 1,
        "unchanged": 0,
        "train": 0,
        "test": 1,
        "train_tasks": ["a-task"],
        "test_tasks": ["b-task"],
        "failures": {"page_load": 1},
        "unsettled_steps": 1,
    }
    assert (tmp_path / "test.jsonl").read_text(encoding="utf-8") == json.dumps(record) + "\n"
    assert (tmp_path / "train.jsonl").read_text(encoding="utf-8") == ""
    assert json.loads((tmp_path / "failures.jsonl").read_text(encoding="utf-8")) == failure
