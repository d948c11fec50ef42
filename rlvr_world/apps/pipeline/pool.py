"""``rlvr-world pool RUN_DIR ...``: one headline over several seeds of a language run.

Each run directory is one ``rlvr-world run`` of the same config with another ``run.seed`` (the
held-out items are the same when the config fixes them: every text-game seed draws its own
items, a web config's ``data.split_seed`` keeps them). Its ``eval_start.jsonl``,
``eval_control.jsonl`` and ``eval_rlvr.jsonl`` are read, the items that every model of every run
answered are kept (in the first run's order), and the headline is built from the (seeds, items)
tables: each item's score is averaged over the seeds and the paired bootstrap resamples items
(``rlvr_world.stats``). The per-seed means are reported beside it, so the seed-to-seed spread is
visible. Refused with the reason: fewer than two runs, a missing file, runs of different tasks,
metrics or control budgets, a seed given twice, no item common to all runs.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rlvr_world.apps.pipeline.evaluate import Answer
from rlvr_world.apps.pipeline.results import METRICS, MODELS
from rlvr_world.stats import build_headline, describe


class PoolError(ValueError):
    """A run set that cannot be pooled; the message names the run and the reason."""


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
    metric = next((m for m in METRICS.values() if m.name == first["metric"]), None)
    if metric is None:
        raise PoolError(f"{run_dirs[0]}: metric {first['metric']!r} is not a language metric")
    by_run = [{m: {a.prompt_id: a for a in rows[m]} for m in MODELS} for _, _, rows in runs]
    ids = [
        a.prompt_id
        for a in runs[0][2]["start"]
        if all(a.prompt_id in answers[m] for answers in by_run for m in MODELS)
    ]
    if not ids:
        raise PoolError("no held-out item was answered by every model of every run")
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
        "headline_text": describe(head),
        "per_seed": per_seed,
    }
