"""One continued-MLE control for every arm of a video sweep (``task: video_sweep`` with
``control: true``; ``rlvr_world.apps.video.sweep``).

* ``with_shared_control``: the arms' configs with the control switched on for the first arm
  only; ``ValueError`` when the control's budget would depend on the arm (a ``wall_time``
  budget, or arms that differ in ``rl.steps``, ``rl.groups_per_step`` or ``rl.group_size``).
* ``arm_headlines``: per arm, from the evaluations the arms wrote (``eval.json`` of the start,
  of the first arm's control and of the arm's RLVR, per RL seed, with and without shuffled
  actions): its ``headline`` (``evaluation.headlines``: RLVR - control with the paired bootstrap
  over clips, the RL seeds averaged per clip, copying the last frame as a baseline) and its
  ``action_reading`` (``reading.action_reading``).
* ``control_lines``: the report's table of those.

What it does not do: no training and no evaluation of its own.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rlvr_world.apps.video.config import VideoPipelineConfig
from rlvr_world.apps.video.evaluation import headlines
from rlvr_world.apps.video.reading import action_reading

#: The RL settings that fix a samples or steps budget.
BUDGET_FIELDS = ("steps", "groups_per_step", "group_size")


def with_shared_control(
    arms: Mapping[str, VideoPipelineConfig],
) -> dict[str, VideoPipelineConfig]:
    """``arms`` with ``baseline.enabled`` on the first arm alone (module docstring)."""
    first, *_ = arms
    budgets = {name: arm.baseline.budget for name, arm in arms.items()}
    if any(kind == "wall_time" for kind in budgets.values()):
        raise ValueError(
            f"control: a control shared by the arms needs a budget that does not depend on the "
            f"arm's RL wall time; set common baseline.budget to samples or steps (got {budgets})"
        )
    sizes = {name: tuple(getattr(arm.rl, f) for f in BUDGET_FIELDS) for name, arm in arms.items()}
    if len(set(sizes.values())) > 1:
        raise ValueError(
            f"control: the arms differ in rl.{', rl.'.join(BUDGET_FIELDS)} ({sizes}), so one "
            "control's budget cannot match them all"
        )
    out = dict(arms)
    baseline = arms[first].baseline.model_copy(update={"enabled": True})
    out[first] = arms[first].model_copy(update={"baseline": baseline})
    return out


def _reports(folders: list[Path], name: str) -> list[dict[str, Any]] | None:
    """The ``eval/<name>/eval.json`` of each folder, or None when one is missing."""
    paths = [f / "eval" / name / "eval.json" for f in folders]
    if not all(p.is_file() for p in paths):
        return None
    return [json.loads(p.read_text()) for p in paths]


def _seed_dirs(arm: VideoPipelineConfig) -> list[Path]:
    return [arm.run.run_dir / f"seed{arm.run.seed + i}" for i in range(arm.run.seeds)]


def _pair(
    folders: list[Path], name: str
) -> tuple[list[dict[str, Any]], list[dict[str, Any]] | None]:
    true = _reports(folders, name)
    if true is None:
        raise FileNotFoundError(f"{folders[0]}/eval/{name}/eval.json: the evaluation is missing")
    return true, _reports(folders, f"{name}_shuffled_actions")


def arm_headlines(
    arms: Mapping[str, VideoPipelineConfig], perceptual: str, *, seed: int
) -> dict[str, dict[str, Any]]:
    """Per arm: ``headline`` against the first arm's control and ``action_reading`` (module
    docstring)."""
    first = next(iter(arms.values()))
    seeds = [first.run.seed + i for i in range(first.run.seeds)]
    start = _pair([first.run.run_dir], "mle")
    control = _pair(_seed_dirs(first), "mle_continued")
    out: dict[str, dict[str, Any]] = {}
    for name, arm in arms.items():
        rlvr = _pair(_seed_dirs(arm), "rlvr")
        head, terms = headlines(
            start[0][0],
            control[0],
            rlvr[0],
            seeds=seeds,
            perceptual=perceptual,
            budget=first.baseline.budget,
        )
        reading = action_reading(
            {"start": start, "control": control, "rlvr": rlvr},
            seeds=seeds,
            baselines={},
            seed=seed,
        )
        out[name] = {"headline": head | {"action_reading": reading}, "headline_terms": terms}
    return out


def _ci(entry: Mapping[str, Any] | None, digits: int, signed: bool = False) -> str:
    if entry is None:
        return ""
    sign = "+" if signed else ""
    low, high = entry["ci95"]
    star = " *" if entry.get("ci95_excludes_zero") else ""
    return (
        f"{entry['mean']:{sign}.{digits}f} [{low:{sign}.{digits}f}, {high:{sign}.{digits}f}]{star}"
    )


def control_lines(summary: Mapping[str, Any]) -> list[str]:
    """Markdown: per arm, the reward against the shared control and how the arm reads its
    actions (its shuffle gaps and agent error, and each against the control's); the start's
    and the control's own rows first."""
    arms = {k: v for k, v in summary["arms"].items() if "headline" in v}
    if not arms:
        return []
    any_arm = next(iter(arms.values()))["headline"]
    models = any_arm["action_reading"]["models"]
    lines = [
        "",
        f"## Each arm against one continued-MLE control ({any_arm['n']} clips, seeds "
        f"{any_arm['seeds']}; 95% CIs; * excludes 0)",
        "",
        "| model | reward | RLVR - control | reward shuffle gap | gap - control's | agent error "
        "(px) | agent error - control's | agent shuffle gap (px) | IDM within tolerance |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for key, label in (("start", "start (MLE)"), ("control", "control (continued MLE)")):
        m = models[key]
        lines.append(
            f"| {label} | {any_arm[key]:.4f} | | {_ci(m.get('reward_shuffle_gap'), 4, True)} | | "
            f"{_ci(m.get('agent_error_px'), 1)} | | "
            f"{_ci(m.get('agent_error_px_shuffle_gap'), 1, True)} | {_ci(m.get('idm_acc'), 3)} |"
        )
    for name, arm in arms.items():
        head = arm["headline"]
        read = head["action_reading"]
        mine, diff = read["models"]["rlvr"], read.get("rlvr_minus_control", {})
        vs = {"mean": head["rlvr"] - head["control"], "ci95": head["ci95"]}
        vs["ci95_excludes_zero"] = head["ci95_excludes_zero"]
        lines.append(
            f"| {name} | {head['rlvr']:.4f} | {_ci(vs, 4, True)} | "
            f"{_ci(mine.get('reward_shuffle_gap'), 4, True)} | "
            f"{_ci(diff.get('reward_shuffle_gap'), 4, True)} | "
            f"{_ci(mine.get('agent_error_px'), 1)} | {_ci(diff.get('agent_error_px'), 1, True)} | "
            f"{_ci(mine.get('agent_error_px_shuffle_gap'), 1, True)} | "
            f"{_ci(mine.get('idm_acc'), 3)} |"
        )
    copy = any_arm.get("copy_last_frame")
    if copy is not None:
        lines += ["", f"Copying the last frame (its tokens): reward {copy:.4f}."]
    return lines
