"""``rlvr-world pool RUN_DIR ...`` for video runs: one headline over several runs of one video
config with other ``run.seed`` (each run its own tokenizer, MLE model and RL seeds), on the same
held-out clips (``data.seed`` fixes them).

Each run directory is read as ``rlvr-world run`` wrote it: ``config.json`` (``task: video``, its
``run.seed``), ``summary.json`` (the headline: its metric and RL seeds), ``eval/mle/eval.json``
(the start, with the per-clip scores of copying the last frame) and, per RL seed,
``seed<n>/eval/rlvr/eval.json`` and ``seed<n>/eval/mle_continued/eval.json``. Each run's
control and RLVR are first averaged per clip over its RL seeds, so every run weighs the same
however many RL seeds it had; the headline (and one per metric in ``headline_terms``) then
averages each clip over the runs and the paired bootstrap resamples clips
(``rlvr_world.stats``), with copying the last frame as the baseline.

``action_reading`` (when every run evaluated its models with shuffled actions too, as runs with
``eval.shuffled_actions`` do): the shuffle gaps, the agent-position error and the IDM measures of
the start, the control and RLVR (``apps.video.reading.action_reading``), each run's RL seeds
averaged per clip first, then clip by clip over the runs.

``across_seeds`` takes the runs as the units instead: each run's mean RLVR - control, RLVR -
start, RLVR - copy and control - copy on the reward, their mean and a 95% Student-t interval over
the runs. It carries what the clip bootstrap cannot see: where each tokenizer and MLE seed lands.

Refused with the reason (``PoolError``): fewer than two runs, a run that is not a video run or
did not finish, a missing or unreadable report, a report with another number of clips than its
start's, a ``run.seed`` given twice, runs of different metrics, or runs whose held-out clips
differ (another ``data`` section or ``eval.clips`` in their ``config.json``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from rlvr_world.apps.video.evaluation import TERMS
from rlvr_world.apps.video.reading import MEASURES, action_reading
from rlvr_world.stats import Headline, PoolError, build_headline, describe, t_interval

#: The arms of a run, by the name of their evaluation folder.
ARMS = {"control": "mle_continued", "rlvr": "rlvr"}


def _json(path: Path, what: str) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise PoolError(f"{path}: cannot read {what} ({exc})") from None
    if not isinstance(data, dict):
        raise PoolError(f"{path}: {what} is not a JSON object")
    return data


def is_video_run(run_dir: Path) -> bool:
    """Whether ``run_dir``'s ``config.json`` names ``task: video`` (False when unreadable: the
    language reader then says what is missing)."""
    try:
        return bool(json.loads((run_dir / "config.json").read_text()).get("task") == "video")
    except (OSError, ValueError, AttributeError):
        return False


class _VideoRun:
    """One run directory's per-clip scores: ``start`` (one row), ``control`` and ``rlvr`` (one
    row per RL seed) and ``copy``, per metric."""

    def __init__(self, run_dir: Path) -> None:
        self.dir = run_dir
        config = _json(run_dir / "config.json", "the run's config")
        if config.get("task") != "video":
            raise PoolError(f"{run_dir}: not a video run (task {config.get('task')!r})")
        summary = _json(run_dir / "summary.json", "summary.json")
        head = summary.get("headline")
        if not isinstance(head, dict):
            raise PoolError(f"{run_dir}: summary.json has no headline (a run that did not finish)")
        self.metric = str(head.get("metric"))
        self.budget = str(head.get("control_budget") or "wall_time")
        try:
            self.rl_seeds = [int(s) for s in head.get("seeds", [])]
            self.seed = int((config.get("run") or {}).get("seed", 0))
        except (TypeError, ValueError):
            raise PoolError(f"{run_dir}: seeds that are not integers") from None
        self.perceptual = str((summary.get("perceptual") or {}).get("metric", ""))
        if not self.perceptual:
            raise PoolError(f"{run_dir}: summary.json does not name its perceptual metric")
        path = run_dir / "eval" / "mle" / "eval.json"
        start = _json(path, "the MLE start's evaluation")
        self.keys = ["reward", self.perceptual, *(k for k, _ in TERMS)]
        self.start = {k: self._clips(start, "per_clip", k, path) for k in self.keys}
        self.copy = {k: self._clips(start, "per_clip_copy", k, path) for k in self.keys}
        if not self.rl_seeds:
            raise PoolError(f"{run_dir}: the headline names no RL seed")
        #: what fixes the held-out clips (the recording, its split and its draw)
        self.data = (config.get("data"), (config.get("eval") or {}).get("clips"))
        self.clips = self.copy["reward"].shape[0]
        if self.start["reward"].shape != (self.clips,):
            raise PoolError(f"{path}: per-clip scores of two lengths (the model's and the copy's)")
        self.arms: dict[str, dict[str, np.ndarray]] = {}
        for arm, folder in ARMS.items():
            rows: dict[str, list[np.ndarray]] = {k: [] for k in self.keys}
            for seed in self.rl_seeds:
                p = run_dir / f"seed{seed}" / "eval" / folder / "eval.json"
                report = _json(p, f"the {arm} evaluation of RL seed {seed}")
                for k in self.keys:
                    rows[k].append(self._clips(report, "per_clip", k, p))
                if rows["reward"][-1].shape != (self.clips,):
                    raise PoolError(
                        f"{p}: {rows['reward'][-1].shape[0]} clips where the start has {self.clips}"
                    )
            # each run weighs the same: its RL seeds averaged per clip first
            self.arms[arm] = {k: np.mean(v, axis=0) for k, v in rows.items()}
        self.reading = self._reading(start)

    def _reading(
        self, start: Mapping[str, Any]
    ) -> dict[str, tuple[dict[str, Any], dict[str, Any]]] | None:
        """Per model (start, control, RLVR): its per-clip action-reading measures with true and
        with shuffled actions, RL seeds averaged; None when a shuffled evaluation is missing."""
        keys = [k for k in ("reward", *MEASURES) if k in start.get("per_clip", {})]
        folders = {"start": ("mle", [self.dir])}
        folders |= {arm: (name, [self.dir / f"seed{s}" for s in self.rl_seeds]) for arm, name in
                    (("control", ARMS["control"]), ("rlvr", ARMS["rlvr"]))}  # fmt: skip
        out: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {}
        for model, (name, dirs) in folders.items():
            pair = []
            for folder in (name, f"{name}_shuffled_actions"):
                paths = [d / "eval" / folder / "eval.json" for d in dirs]
                if not all(p.is_file() for p in paths):
                    return None
                reports = [_json(p, f"the {folder} evaluation") for p in paths]
                table = {
                    k: np.mean([self._clips(rep, "per_clip", k, p) for rep, p in
                                zip(reports, paths, strict=True)], axis=0).tolist()
                    for k in keys
                }  # fmt: skip
                pair.append({"per_clip": table})
            out[model] = (pair[0], pair[1])
        return out

    @staticmethod
    def _clips(report: Mapping[str, Any], table: str, key: str, path: Path) -> np.ndarray:
        try:
            return np.asarray(report[table][key], dtype=np.float64)
        except (KeyError, TypeError, ValueError):
            raise PoolError(f"{path}: no per-clip {key!r} under {table!r}") from None


def _check(runs: Sequence[_VideoRun]) -> None:
    first = runs[0]
    seeds: list[int] = []
    for run in runs:
        if run.metric != first.metric:
            raise PoolError(
                f"{run.dir}: metric {run.metric!r} differs from {first.dir}'s {first.metric!r}"
            )
        if run.seed in seeds:
            raise PoolError(f"{run.dir}: run.seed {run.seed} is already in the pool")
        seeds.append(run.seed)
        if run.data != first.data or run.clips != first.clips:
            raise PoolError(
                f"{run.dir}: its held-out clips differ from {first.dir}'s (another data "
                f"section or eval.clips; {run.clips} against {first.clips} clips): pool runs "
                "of one config that differ in run.seed only"
            )


def pool_video_runs(run_dirs: Sequence[Path]) -> dict[str, Any]:
    """The pooled headline (``headline``, with ``copy_last_frame``), one per metric
    (``headline_terms``), its sentence (``headline_text``), each run's means (``per_seed``, by
    ``run.seed``) and the run-level comparison (``across_seeds``); module docstring."""
    if len(run_dirs) < 2:  # noqa: PLR2004 (a pool is at least two runs)
        raise PoolError(f"pool needs at least 2 run directories, got {len(run_dirs)}")
    runs = [_VideoRun(Path(d)) for d in run_dirs]
    _check(runs)
    seeds = [r.seed for r in runs]
    higher = {"reward": True, runs[0].perceptual: False, **dict(TERMS)}

    def headline(key: str) -> tuple[Headline, dict[str, Any]]:
        copy = float(runs[0].copy[key].mean())
        head = build_headline(
            key,
            seeds,
            {
                "start": np.stack([r.start[key] for r in runs]),
                "control": np.stack([r.arms["control"][key] for r in runs]),
                "rlvr": np.stack([r.arms["rlvr"][key] for r in runs]),
            },
            higher_is_better=higher[key],
            baselines={"copy_last_frame": copy},
            control_budget=runs[0].budget,
        )
        return head, {**head.to_dict(), "copy_last_frame": copy}

    reward, head = headline("reward")
    head["metric"] = runs[0].metric
    head["rl_seeds"] = {str(r.seed): r.rl_seeds for r in runs}
    per_seed = {
        str(r.seed): {
            "start": float(r.start["reward"].mean()),
            "control": float(r.arms["control"]["reward"].mean()),
            "rlvr": float(r.arms["rlvr"]["reward"].mean()),
            "copy_last_frame": float(r.copy["reward"].mean()),
        }
        for r in runs
    }
    read = [r.reading for r in runs]
    reading = None
    if all(x is not None for x in read):
        models = {
            m: ([x[m][0] for x in read if x], [x[m][1] for x in read if x])
            for m in ("start", "control", "rlvr")
        }
        reading = action_reading(models, seeds=seeds, baselines={})
        head["action_reading"] = reading
    return {
        "task": "video",
        "runs": [str(d) for d in run_dirs],
        "action_reading": reading,
        "headline": head,
        "headline_terms": {k: headline(k)[1] for k in runs[0].keys[1:]},
        "headline_text": describe(reward, digits=4),
        "per_seed": per_seed,
        "across_seeds": across_runs(runs),
    }


def across_runs(runs: Sequence[_VideoRun]) -> dict[str, Any]:
    """The runs as the units (module docstring): the reward's differences per run, their mean
    and a Student-t interval over the runs."""
    diffs: dict[str, list[float]] = {
        "rlvr_minus_control": [],
        "rlvr_minus_start": [],
        "rlvr_minus_copy": [],
        "control_minus_copy": [],
    }
    for r in runs:
        rlvr, control = r.arms["rlvr"]["reward"].mean(), r.arms["control"]["reward"].mean()
        copy = r.copy["reward"].mean()
        diffs["rlvr_minus_control"].append(float(rlvr - control))
        diffs["rlvr_minus_start"].append(float(rlvr - r.start["reward"].mean()))
        diffs["rlvr_minus_copy"].append(float(rlvr - copy))
        diffs["control_minus_copy"].append(float(control - copy))
    return {
        "seeds": [r.seed for r in runs],
        "all": {"n_per_seed": [int(r.copy["reward"].shape[0]) for r in runs]}
        | {k: t_interval(v) for k, v in diffs.items()},
    }
