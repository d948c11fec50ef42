"""Web MPC against real headless Chromium on MiniWoB++ pages from the miniwob package.

Checks: the smoke config runs end to end (four planners; tiny random language models built in
the model-folder and trainer-checkpoint layouts); the greedy planner solves click-button pages
with real clicks (MiniWoB's own reward); each fault is an episode with its reason and the run
goes on: a world model that is not there (every episode of that planner), a page that does not
load, a page stuck in its script (the browser is declared crashed and started again); a run
started again skips finished episodes, and episodes redone after a cut give the same records.
Needs Debian's chromium (``make chromium-setup``) and the ``web`` extra.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from rlvr_world.apps.cli import main
from rlvr_world.apps.collect.web import default_html_root
from rlvr_world.apps.mpc.web import read_episodes, run_web_mpc
from rlvr_world.apps.mpc.web_config import load_web_mpc_config
from rlvr_world.apps.mpc.web_model import build_tiny_web_models

pytestmark = [pytest.mark.integration, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
SMOKE = REPO / "configs" / "mpc" / "smoke_web_miniwob.yaml"
CHROMIUM = Path("/usr/bin/chromium")
TIMING = ("plan_seconds",)


@pytest.fixture(scope="module")
def html_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """click-button and click-checkboxes from the package, a page whose core script is missing,
    and a click-button page whose problem generator never returns."""
    if not CHROMIUM.is_file():
        pytest.fail(f"{CHROMIUM} is missing: run `make chromium-setup`")
    real = default_html_root()
    root = tmp_path_factory.mktemp("html")
    for folder in ("core", "common"):
        (root / folder).symlink_to(real / folder)
    pages = root / "miniwob"
    pages.mkdir()
    for task in ("click-button", "click-checkboxes"):
        (pages / f"{task}.html").symlink_to(real / "miniwob" / f"{task}.html")
    (pages / "broken-core.html").write_text(
        "<html><head><script src='../core/no-such-core.js'></script></head><body></body></html>"
    )
    page = (real / "miniwob" / "click-button.html").read_text()
    stuck = page.replace("var genProblem = function() {", "var genProblem = function() { for(;;){}")
    assert stuck != page
    (pages / "stuck.html").write_text(stuck)
    return root


def strip_timing(record: dict[str, Any]) -> dict[str, Any]:
    return record | {
        "steps": [{k: v for k, v in s.items() if k not in TIMING} for s in record["steps"]]
    }


def test_smoke_config_runs_the_four_planners(tmp_path: Path) -> None:
    out, models = tmp_path / "run", tmp_path / "models"
    rc = main(
        [
            "run",
            str(SMOKE),
            "--set",
            f"run.run_dir={out}",
            "--set",
            f"models.base={models / 'base'}",
            "--set",
            f"models.rlvr={models / 'rlvr' / 'checkpoints' / 'latest'}",
        ]
    )
    assert rc == 0
    summary = json.loads((out / "summary.json").read_text())
    head = summary["headline"]
    for planner in ("greedy", "random", "base", "rlvr"):
        assert head[planner]["n"] == 4 and head[planner]["faults"] == 0, planner
        assert 0.0 <= head[planner]["value"] <= 1.0
    for pair in ("rlvr_minus_base", "base_minus_greedy", "rlvr_minus_greedy"):
        assert head[pair]["n"] == 4 and len(head[pair]["ci95"]) == 2
    assert head["base"]["plan_seconds_per_step"] > 0
    assert (models / "rlvr" / "checkpoints" / "latest").read_text().strip() == "step_00000001"
    assert not (models / "rlvr" / "checkpoints" / "step_00000001" / "tokenizer.json").exists()
    records = read_episodes(out / "episodes.jsonl")
    assert len(records) == 16
    greedy_button = [r for r in records if r["planner"] == "greedy" and r["task"] == "click-button"]
    # the page's own reward: the button named in the utterance was clicked, for real
    assert all(r["success"] and r["raw_reward"] == 1.0 for r in greedy_button)
    for r in greedy_button:
        name = r["objective"].split('"')[1]
        assert r["steps"][0]["greedy_value"] == 1.0, (name, r["steps"])
    assert "| click-button | 2/2 |" in (out / "report.md").read_text()


def test_faults_are_counted_per_episode_and_the_run_goes_on(
    tmp_path: Path, html_root: Path
) -> None:
    out, models = tmp_path / "run", tmp_path / "models"
    build_tiny_web_models(models / "base", models / "rlvr", ["New items:\nNone [1] button"])
    overrides = {
        "models.build_tiny": False,
        "run.run_dir": str(out),
        "run.planners": ["greedy", "base", "rlvr"],
        "models.base": str(models / "base"),
        "models.rlvr": str(tmp_path / "no-such-checkpoint"),
        "tasks.names": ["click-button", "broken-core", "stuck", "click-checkboxes"],
        "tasks.seeds": 1,
        "tasks.html_root": str(html_root),
        "browser.call_timeout_s": 5.0,
    }
    cfg = load_web_mpc_config(SMOKE, overrides)
    summary = run_web_mpc(cfg, str(SMOKE))
    head = summary["headline"]
    records = read_episodes(out / "episodes.jsonl")
    by = {(r["planner"], r["task"]): r for r in records}
    assert len(records) == 12
    assert head["rlvr"]["fault_reasons"] == {"model_unavailable": 4}
    assert "no-such-checkpoint" in by["rlvr", "click-button"]["reason"]
    for planner in ("greedy", "base"):
        assert head[planner]["fault_reasons"] == {"page_load": 1, "browser_crash": 1}
        assert head[planner]["n"] == 2  # click-button and click-checkboxes ran
        assert "no MiniWoB core" in by[planner, "broken-core"]["reason"]
        assert "no answer from the browser" in by[planner, "stuck"]["reason"]
        # after the crash a new browser ran the next page
        assert by[planner, "click-checkboxes"]["status"] == "ok"
    assert head["rlvr_minus_base"]["n"] == 0 and head["base_minus_greedy"]["n"] == 2

    # started again: nothing is redone; cut the last two episodes and they are redone the same
    before = (out / "episodes.jsonl").read_text()
    run_web_mpc(cfg, str(SMOKE))
    assert (out / "episodes.jsonl").read_text() == before
    lines = before.splitlines(keepends=True)
    (out / "episodes.jsonl").write_text("".join(lines[:-2]) + lines[-2][:15])  # a torn line
    run_web_mpc(cfg, str(SMOKE))
    redone = read_episodes(out / "episodes.jsonl")
    assert len(redone) == 12
    assert [strip_timing(r) for r in redone[-2:]] == [strip_timing(r) for r in records[-2:]]
