"""Headlines, ``report.md`` and the trajectory picture of the MPC and policy-evaluation runs.

``mpc_headline``: per planner, the success rate and the final coverage over the episodes that
ran (faulted ones are counted apart, with their reasons), each with a 95% bootstrap interval
over episodes, and the planning time per step; ``rlvr_minus_base``: the paired difference
over the episodes both world models ran. ``write_trajectory``: a PNG of one episode, the real
frames after each executed action above the frames the plan predicted for them. Pure apart
from the writers; no planning.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from rlvr_world.stats import paired_bootstrap


def _ci(values: NDArray[np.float64], resamples: int, seed: int) -> list[float] | None:
    if not values.size:
        return None
    return paired_bootstrap(values, np.zeros_like(values), resamples=resamples, seed=seed).as_list()


def _metric(name: str, values: NDArray[np.float64], resamples: int, seed: int) -> dict[str, Any]:
    return {
        "metric": name,
        "n": int(values.size),
        "value": float(values.mean()) if values.size else None,
        "ci95": _ci(values, resamples, seed),
    }


def mpc_headline(
    records: Sequence[Mapping[str, Any]],
    planners: Sequence[str],
    *,
    execute: int,
    resamples: int,
    seed: int,
) -> dict[str, Any]:
    """The ``headline`` of ``summary.json`` from the episodes' records (module docstring)."""
    head: dict[str, Any] = {}
    by: dict[str, dict[int, Mapping[str, Any]]] = {p: {} for p in planners}
    for r in records:
        by[r["planner"]][int(r["task"])] = r
    for p in planners:
        ok = [r for r in by[p].values() if r["status"] == "ok"]
        faults = [r for r in by[p].values() if r["status"] != "ok"]
        steps = [s for r in ok for s in r["plan_seconds"]]
        head[p] = {
            "success_rate": _metric("success rate", _col(ok, "success"), resamples, seed),
            "final_coverage": _metric("final coverage", _col(ok, "coverage"), resamples, seed),
            # one planning call per MPC step, which executes ``execute`` actions
            "plan_seconds_per_call": float(np.mean(steps)) if steps else None,
            "plan_seconds_per_action": float(np.mean(steps)) / execute if steps else None,
            "episodes": len(by[p]),
            "faults": len(faults),
            "fault_reasons": dict(Counter(str(r["reason"]).split(":")[0] for r in faults)),
        }
    if "base" in by and "rlvr" in by:
        both = sorted(
            t
            for t in by["base"]
            if t in by["rlvr"] and by["base"][t]["status"] == by["rlvr"][t]["status"] == "ok"
        )
        diff: dict[str, Any] = {}
        for key, name in (("success", "success_rate"), ("coverage", "final_coverage")):
            a = np.array([float(by["rlvr"][t][key]) for t in both])
            b = np.array([float(by["base"][t][key]) for t in both])
            if not both:
                diff[name] = {"metric": f"{name} rlvr - base", "n": 0, "value": None, "ci95": None}
                continue
            iv = paired_bootstrap(a, b, resamples=resamples, seed=seed)
            diff[name] = {
                "metric": f"{name} rlvr - base",
                "n": iv.n,
                "value": iv.mean,
                "ci95": iv.as_list(),
                "ci95_excludes_zero": iv.excludes_zero,
            }
        head["rlvr_minus_base"] = diff
    return head


def _col(rows: Sequence[Mapping[str, Any]], key: str) -> NDArray[np.float64]:
    return np.array([float(r[key]) for r in rows], dtype=np.float64)


def _fmt(m: Mapping[str, Any]) -> str:
    if m.get("value") is None:
        return "n/a"
    ci = m.get("ci95")
    interval = f" [{ci[0]:+.3f}, {ci[1]:+.3f}]" if ci else ""
    return f"{m['value']:.3f}{interval}"


def _secs(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}"


def mpc_report(summary: Mapping[str, Any]) -> str:
    """``report.md`` of an MPC run."""
    head = summary["headline"]
    partial = (
        "**Partial run**: stopped before every task ran; only the tasks all planners finished "
        "count.\n\n"
        if summary.get("partial")
        else ""
    )
    lines = [
        f"# PushT MPC: {summary['name']}",
        "",
        partial
        + f"{summary['n_tasks']} start/goal pairs {summary['goal_steps']} steps apart; planner "
        f"{summary['planner']}; cost: pixel L1 of the last predicted frame to the goal frame "
        f"({summary['frame_side']}x{summary['frame_side']}). Success: final block pose within "
        f"{summary['success']['position']} px and {summary['success']['angle']} rad of the goal "
        "pose. Intervals: 95% bootstrap over episodes.",
        "",
        "| planner | success rate [95% CI] | final coverage [95% CI] | n | faults | "
        "plan s/call | plan s/action |",
        "|---|---|---|---|---|---|---|",
    ]
    for p in summary["planners"]:
        h = head[p]
        call, action = h["plan_seconds_per_call"], h["plan_seconds_per_action"]
        faults = f"{h['faults']} {h['fault_reasons']}" if h["faults"] else "0"
        lines.append(
            f"| {p} | {_fmt(h['success_rate'])} | {_fmt(h['final_coverage'])} | "
            f"{h['success_rate']['n']} | {faults} | {_secs(call)} | {_secs(action)} |"
        )
    if "rlvr_minus_base" in head:
        d = head["rlvr_minus_base"]
        lines += [
            "",
            f"RLVR - base (paired over {d['success_rate']['n']} episodes): success rate "
            f"{_fmt(d['success_rate'])}, final coverage {_fmt(d['final_coverage'])}.",
        ]
    if summary.get("trajectory_png"):
        lines += ["", f"![planned trajectory]({summary['trajectory_png']})", ""]
        lines.append(summary.get("trajectory_caption", ""))
    lines += ["", f"Wall time {summary['wall_s']:.0f} s.", ""]
    return "\n".join(lines)


def policy_report(summary: Mapping[str, Any]) -> str:
    """``report.md`` of a policy-evaluation run."""
    names = [p["name"] for p in summary["policies"]]
    comp = summary["comparison"]
    lines = [
        f"# PushT policy evaluation in the world models: {summary['name']}",
        "",
        f"{summary['episodes']} episodes per policy, {summary['steps']} steps; success: the "
        f"block centroid within {summary['goal_radius']} px of the goal point. In the world "
        "models the policy acts on positions segmented from the predicted frames.",
        "",
        "| policy | simulator | " + " | ".join(comp) + " |",
        "|---|---|" + "---|" * len(comp),
    ]
    for i, name in enumerate(names):
        row = [f"{summary['sim_rates'][i]:.3f}"] + [f"{comp[m]['rates'][i]:.3f}" for m in comp]
        lines.append(f"| {name} | " + " | ".join(row) + " |")
    lines += ["", "| model | MAE [95% CI] | Spearman [95% CI] | lost steps |", "|---|---|---|---|"]
    for m, c in comp.items():
        mae = {"value": c["mae"], "ci95": c["mae_ci95"]}
        rho = {"value": c["spearman"], "ci95": c["spearman_ci95"]}
        lines.append(f"| {m} | {_fmt(mae)} | {_fmt(rho)} | {c['lost_steps']} |")
    diff = summary["headline"].get("rlvr_minus_base")
    if diff:
        lines += ["", f"RLVR - base, MAE (paired bootstrap over episodes): {_fmt(diff)}."]
    lines += ["", f"Wall time {summary['wall_s']:.0f} s.", ""]
    return "\n".join(lines)


def write_trajectory(
    path: Path,
    real: Sequence[NDArray[Any]],
    predicted: Sequence[NDArray[Any]],
    start: NDArray[Any],
    goal: NDArray[Any],
    *,
    scale: int = 2,
    gap: int = 4,
) -> Path:
    """PNG: row 1 start | real frames | goal; row 2 the frames the plans predicted for them."""
    from rlvr_world.video.evaluate import write_frame_grid

    if not real or len(real) != len(predicted):
        raise ValueError(f"trajectory: {len(real)} real and {len(predicted)} predicted frames")
    labels = ["start", *[f"t+{i + 1}" for i in range(len(real))], "goal"]
    rows: list[list[NDArray[Any] | None]] = [[start, *real, goal], [None, *predicted, None]]
    h, w = np.asarray(start).shape[:2]
    return write_frame_grid(
        path, rows, labels, hw=(h, w), row_labels=("real", "predicted"), scale=scale, gap=gap
    )
