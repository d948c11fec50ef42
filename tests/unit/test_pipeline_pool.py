"""``rlvr-world pool``: one headline over several seeds of a language run, from the run
directories ``rlvr-world run`` writes (``summary.json``, ``eval_<model>.jsonl``); and what each
run set that cannot be pooled gets."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from rlvr_world.apps.cli import main
from rlvr_world.apps.pipeline.pool import pool_runs
from rlvr_world.stats import PoolError, paired_bootstrap

ITEMS = [f"test-{i}" for i in range(6)]
CHANGED = [True, True, False, True, False, False]


def _run(root: Path, seed: int, scores: dict[str, list[float]], **headline: str) -> Path:
    """A finished web run's directory: its summary and the three models' held-out answers."""
    run = root / f"s{seed}"
    run.mkdir(parents=True)
    head = {"metric": "f1", "control_budget": "samples", "baselines": {"always_no_change": 0.7}}
    (run / "summary.json").write_text(json.dumps({"seed": seed, "headline": head | headline}))
    for model, values in scores.items():
        rows = [
            {"prompt_id": i, "changed": c, "reward": v, "status": "ok", "text": "New items:\nNone"}
            for i, c, v in zip(ITEMS, CHANGED, values, strict=True)
        ]
        (run / f"eval_{model}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return run


def _scores(shift: float) -> dict[str, list[float]]:
    rng = np.random.default_rng(int(shift * 10))
    base = rng.uniform(0, 0.8, size=len(ITEMS))
    return {
        "start": list(base),
        "control": list(base + 0.05),
        "rlvr": list(np.minimum(base + shift, 1.0)),
    }


def test_the_pooled_headline_averages_each_item_over_the_seeds(tmp_path: Path) -> None:
    runs = [_run(tmp_path, seed, _scores(0.1 * (seed + 1))) for seed in (0, 1, 2)]
    pooled = pool_runs(runs)
    head = pooled["headline"]
    assert head["seeds"] == [0, 1, 2] and head["n"] == len(ITEMS) and head["metric"] == "f1"
    tables = {m: [_scores(0.1 * (s + 1))[m] for s in (0, 1, 2)] for m in ("control", "rlvr")}
    want = paired_bootstrap(tables["rlvr"], tables["control"])
    assert head["ci95"] == pytest.approx(want.as_list())
    assert head["rlvr"] == pytest.approx(np.mean(tables["rlvr"]))
    assert set(head["splits"]) == {"changed", "unchanged"} and head["splits"]["changed"]["n"] == 3
    assert pooled["per_seed"]["2"]["rlvr"] == pytest.approx(np.mean(tables["rlvr"][2]))
    assert head["baselines"] == {"always_no_change": 0.7}


def test_only_items_every_model_of_every_run_answered_are_pooled(tmp_path: Path) -> None:
    runs = [_run(tmp_path, seed, _scores(0.1)) for seed in (0, 1)]
    rows = (runs[1] / "eval_control.jsonl").read_text().splitlines()
    (runs[1] / "eval_control.jsonl").write_text("\n".join(rows[1:]) + "\n")  # test-0 failed
    pooled = pool_runs(runs)
    assert pooled["headline"]["n"] == len(ITEMS) - 1
    assert "common to every run" not in pooled["headline_text"]
    for model in ("start", "control", "rlvr"):  # seed 1 now shares only test-1 with seed 0
        path = runs[1] / f"eval_{model}.jsonl"
        path.write_text(
            path.read_text().replace('"test-', '"other-').replace('"other-1"', '"test-1"')
        )
    assert "only 1 of the smallest run's 5 items" in pool_runs(runs)["headline_text"]


@pytest.mark.parametrize(
    ("spoil", "message"),
    [
        ("metric", "metric 'exact_match' differs"),
        ("budget", "control_budget 'wall_time' differs"),
        ("seed", "seed 0 is already in the pool"),
        ("missing", "cannot read held-out answers"),
        ("unfinished", "has no headline"),
    ],
)
def test_run_sets_that_cannot_be_pooled_say_why(tmp_path: Path, spoil: str, message: str) -> None:
    first = _run(tmp_path, 0, _scores(0.1))
    second = _run(tmp_path, 1, _scores(0.2))
    summary = json.loads((second / "summary.json").read_text())
    if spoil == "metric":
        summary["headline"]["metric"] = "exact_match"
    elif spoil == "budget":
        summary["headline"]["control_budget"] = "wall_time"
    elif spoil == "seed":
        summary["seed"] = 0
    elif spoil == "missing":
        (second / "eval_rlvr.jsonl").unlink()
    else:
        del summary["headline"]
    (second / "summary.json").write_text(json.dumps(summary))
    with pytest.raises(PoolError, match=message):
        pool_runs([first, second])


def test_the_command_prints_the_headline_and_writes_the_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    runs = [_run(tmp_path, seed, _scores(0.3)) for seed in (0, 1)]
    out = tmp_path / "pooled.json"
    assert main(["pool", *map(str, runs), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "seed 1: start" in printed and "changed (n = 3)" in printed
    assert json.loads(out.read_text())["headline"]["seeds"] == [0, 1]
    assert main(["pool", str(runs[0])]) == 2
    assert "at least 2 run directories" in capsys.readouterr().out


def test_across_seeds_compares_each_run_on_its_own_items(tmp_path: Path) -> None:
    from scipy import stats

    shifts = {0: 0.10, 1: 0.20, 2: 0.15}
    runs = [_run(tmp_path, seed, _scores(shift)) for seed, shift in shifts.items()]
    # seed 2 answered one more item than the others: the headline drops it, across_seeds not
    extra = {"prompt_id": "test-9", "changed": True, "reward": 1.0, "status": "ok", "text": "x"}
    for model in ("start", "control", "rlvr"):
        with (runs[2] / f"eval_{model}.jsonl").open("a") as f:
            f.write(json.dumps(extra) + "\n")
    pooled = pool_runs(runs)
    assert pooled["headline"]["n"] == len(ITEMS)
    seeds = pooled["across_seeds"]
    assert seeds["seeds"] == [0, 1, 2]
    assert seeds["all"]["n_per_seed"] == [6, 6, 7]
    diffs = []
    for seed, shift in shifts.items():
        s = _scores(shift)
        rlvr, control = list(s["rlvr"]), list(s["control"])
        if seed == 2:
            rlvr, control = [*rlvr, 1.0], [*control, 1.0]
        diffs.append(np.mean(rlvr) - np.mean(control))
    d = seeds["all"]["rlvr_minus_control"]
    assert d["per_seed"] == pytest.approx(diffs)
    half = stats.t.ppf(0.975, 2) * np.std(diffs, ddof=1) / np.sqrt(3)
    assert d["ci95"] == pytest.approx([np.mean(diffs) - half, np.mean(diffs) + half])
    assert d["ci95_excludes_zero"] == (np.mean(diffs) - half > 0)
    assert seeds["changed"]["n_per_seed"] == [3, 3, 4]
    assert set(seeds) == {"seeds", "all", "changed", "unchanged"}


def test_runs_with_no_common_item_get_only_the_seed_level_comparison(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    runs = [_run(tmp_path, seed, _scores(0.1 * (seed + 1))) for seed in (0, 1)]
    for model in ("start", "control", "rlvr"):  # seed 1 drew other items
        path = runs[1] / f"eval_{model}.jsonl"
        path.write_text(path.read_text().replace('"test-', '"other-'))
    pooled = pool_runs(runs)
    assert pooled["headline"] is None and "only the seed-level" in pooled["headline_text"]
    assert pooled["across_seeds"]["all"]["n_per_seed"] == [6, 6]
    assert main(["pool", *map(str, runs)]) == 0
    assert "across seeds, all (seeds as units" in capsys.readouterr().out
