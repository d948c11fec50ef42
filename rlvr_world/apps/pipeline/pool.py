"""``rlvr-world pool RUN_DIR ...``: one headline over several seeds of a language run (video
runs: ``rlvr_world.apps.video.pool``, which ``pool_runs`` hands them to).

Each run directory is one ``rlvr-world run`` of the same config with another ``run.seed`` (the
held-out items are the same when the config fixes them: every text-game seed draws its own
items, a web config's ``data.split_seed`` keeps them). Its ``eval_start.jsonl``,
``eval_control.jsonl`` and ``eval_rlvr.jsonl`` are read, the items that every model of every run
answered are kept (in the first run's order), and the headline is built from the (seeds, items)
tables: each item's score is averaged over the seeds and the paired bootstrap resamples items
(``rlvr_world.stats``). The per-seed means are reported beside it, so the seed-to-seed spread is
visible.

``across_seeds`` compares the seeds as the units instead: each run's RLVR - control and RLVR -
start on *all* its own held-out items (so it works when every seed draws other items, as the text
game's do, where few items are common to all runs), their mean over the seeds and a 95% Student-t
interval over the seeds (k - 1 degrees of freedom), overall and per split. It carries the
seed-to-seed spread (where SFT lands, where GRPO and the control land from there, which items
are drawn) that the item bootstrap of one run cannot see.

Refused with the reason: fewer than two runs, a missing file, runs of different tasks, metrics or
control budgets, a seed given twice. With no item common to all runs, the item-level headline
is ``None`` and only ``across_seeds`` is reported.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from rlvr_world.apps.pipeline.evaluate import Answer
from rlvr_world.apps.pipeline.results import MODELS, Metric
from rlvr_world.apps.pipeline.tasks import metric_named
from rlvr_world.stats import PoolError, build_headline, describe, t_interval


def _answers(path: Path) -> list[Answer]:
    try:
        rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        return [
            Answer(r["prompt_id"], r.get("changed"), float(r["reward"]), r["status"], r["text"])
            for r in rows
        ]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise PoolError(f"{path}: cannot read held-out answers ({exc})") from None


def _run(run_dir: Path) -> tuple[dict[str, Any], dict[str, list[Answer]]]:
    try:
        summary = json.loads((run_dir / "summary.json").read_text())
    except (OSError, ValueError) as exc:
        raise PoolError(f"{run_dir}: no readable summary.json ({exc})") from None
    if "headline" not in summary:
        raise PoolError(f"{run_dir}: summary.json has no headline (a run that did not finish)")
    return summary, {m: _answers(run_dir / f"eval_{m}.jsonl") for m in MODELS}


def pool_runs(run_dirs: Sequence[Path]) -> dict[str, Any]:
    """The pooled headline (``headline``), its sentence (``headline_text``) and each seed's
    start / control / RLVR means on the pooled items (``per_seed``)."""
    if len(run_dirs) < 2:  # noqa: PLR2004 (a pool is at least two runs)
        raise PoolError(f"pool needs at least 2 run directories, got {len(run_dirs)}")
    runs = [(d, *_run(d)) for d in run_dirs]
    first = runs[0][1]["headline"]
    seeds: list[int] = []
    for run_dir, summary, _ in runs:
        head = summary["headline"]
        for key in ("metric", "control_budget"):
            if head.get(key) != first.get(key):
                raise PoolError(
                    f"{run_dir}: {key} {head.get(key)!r} differs from {run_dirs[0]}'s "
                    f"{first.get(key)!r}"
                )
        seed = int(summary["seed"])
        if seed in seeds:
            raise PoolError(f"{run_dir}: seed {seed} is already in the pool")
        seeds.append(seed)
    metric = metric_named(first["metric"])
    if metric is None:
        raise PoolError(f"{run_dirs[0]}: metric {first['metric']!r} is not a language metric")
    by_run = [{m: {a.prompt_id: a for a in rows[m]} for m in MODELS} for _, _, rows in runs]
    ids = [
        a.prompt_id
        for a in runs[0][2]["start"]
        if all(a.prompt_id in answers[m] for answers in by_run for m in MODELS)
    ]
    seed_level = across_seeds(metric, seeds, [rows for _, _, rows in runs])
    if not ids:
        # every seed drew other items (the text game's draws): only the seed-level comparison
        return {
            "runs": [str(d) for d in run_dirs],
            "headline": None,
            "headline_text": "no held-out item was answered by every model of every run: "
            "only the seed-level comparison (across_seeds)",
            "per_seed": {},
            "across_seeds": seed_level,
        }
    table = {m: [[metric.per_item(r[m][i]) for i in ids] for r in by_run] for m in MODELS}
    split = ["changed" if by_run[0]["start"][i].changed else "unchanged" for i in ids]
    head = build_headline(
        metric.name,
        seeds,
        table,
        split_of=split,
        baselines=first.get("baselines") or {},
        control_budget=str(first.get("control_budget", "")),
    )
    per_seed = {
        str(seed): {m: sum(table[m][k]) / len(ids) for m in MODELS} for k, seed in enumerate(seeds)
    }
    return {
        "runs": [str(d) for d in run_dirs],
        "headline": head.to_dict(),
        "headline_text": describe(head) + _few_common(len(ids), runs),
        "per_seed": per_seed,
        "across_seeds": seed_level,
    }


def _few_common(common: int, runs: Sequence[tuple[Path, Any, dict[str, list[Answer]]]]) -> str:
    """A warning when the pooled items are under half of the items the smallest run scored
    with every model."""
    smallest = min(
        len(set.intersection(*({a.prompt_id for a in rows[m]} for m in MODELS)))
        for _, _, rows in runs
    )
    if 2 * common >= smallest:
        return ""
    return (
        f" (only {common} of the smallest run's {smallest} items are common to every run: "
        "the seed-level comparison, across_seeds, uses them all)"
    )


def across_seeds(
    metric: Metric, seeds: Sequence[int], answers: Sequence[dict[str, list[Answer]]]
) -> dict[str, Any]:
    """Seed-level comparison (module docstring): each run on all its own items."""
    groups: dict[str, list[dict[str, float]]] = {}
    for rows in answers:
        by_model = {m: {a.prompt_id: a for a in rows[m]} for m in MODELS}
        ids = [i for i in by_model["start"] if all(i in by_model[m] for m in MODELS)]
        splits = {"all": ids}
        for i in ids:
            changed = by_model["start"][i].changed
            if changed is not None:
                splits.setdefault("changed" if changed else "unchanged", []).append(i)
        for name, chosen in splits.items():
            means = {
                m: sum(metric.per_item(by_model[m][i]) for i in chosen) / len(chosen)
                for m in MODELS
            }
            groups.setdefault(name, []).append({**means, "n": float(len(chosen))})
    out: dict[str, Any] = {"seeds": list(seeds)}
    for name, runs in groups.items():
        if len(runs) < len(seeds):
            continue  # a split some seed has no item of
        out[name] = {
            **{m: float(np.mean([r[m] for r in runs])) for m in MODELS},
            "n_per_seed": [int(r["n"]) for r in runs],
            "rlvr_minus_control": t_interval([r["rlvr"] - r["control"] for r in runs]),
            "rlvr_minus_start": t_interval([r["rlvr"] - r["start"] for r in runs]),
        }
    return out
