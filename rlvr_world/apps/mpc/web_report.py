"""Headline and ``report.md`` of the web MPC run (``rlvr_world.apps.mpc.web``).

``web_mpc_headline``: per planner, the success rate over the episodes that ran (faulted ones are
counted apart, with their reasons) with a 95% bootstrap interval over episodes, the planning
time per step, and for the world models the F1 of their prediction for each executed action
and the share of steps where they predicted a change; the paired differences
``rlvr_minus_base``, ``base_minus_greedy`` and ``rlvr_minus_greedy`` over the episodes (task,
seed) both planners finished. Pure apart from nothing: no I/O.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from rlvr_world.stats import paired_bootstrap
from rlvr_world.web.items import predicts_no_change

__all__ = ["web_mpc_headline", "web_mpc_report"]

PAIRS = (("rlvr", "base"), ("base", "greedy"), ("rlvr", "greedy"))


def _interval(a: Sequence[float], b: Sequence[float], resamples: int, seed: int) -> dict[str, Any]:
    if not a:
        return {"n": 0, "value": None, "ci95": None}
    iv = paired_bootstrap(
        np.asarray(a, float), np.asarray(b, float), resamples=resamples, seed=seed
    )
    return {
        "n": iv.n,
        "value": iv.mean,
        "ci95": iv.as_list(),
        "ci95_excludes_zero": iv.excludes_zero,
    }


def web_mpc_headline(
    records: Sequence[Mapping[str, Any]], planners: Sequence[str], *, resamples: int, seed: int
) -> dict[str, Any]:
    """The ``headline`` of ``summary.json`` (module docstring)."""
    by: dict[str, dict[tuple[str, int], Mapping[str, Any]]] = {p: {} for p in planners}
    for r in records:
        by[r["planner"]][(r["task"], int(r["index"]))] = r
    head: dict[str, Any] = {}
    for p in planners:
        ok = [r for r in by[p].values() if r["status"] == "ok"]
        faults = [r for r in by[p].values() if r["status"] != "ok"]
        steps = [s for r in ok for s in r["steps"]]
        success = [float(r["success"]) for r in ok]
        raw = [float(r["raw_reward"]) for r in ok]
        entry: dict[str, Any] = {
            "metric": "success rate",
            **_interval(success, [0.0] * len(success), resamples, seed),
            "raw_reward": _interval(raw, [0.0] * len(raw), resamples, seed),
            "episodes": len(by[p]),
            "faults": len(faults),
            "fault_reasons": dict(Counter(str(r["reason"]).split(":")[0] for r in faults)),
            "plan_seconds_per_step": float(np.mean([s["plan_seconds"] for s in steps]))
            if steps
            else None,
            "steps_per_episode": len(steps) / len(ok) if ok else None,
        }
        predicted = [s for s in steps if "prediction" in s]
        if predicted:
            read = [s for s in predicted if s["prediction_f1"] is not None]  # not an error
            entry["executed_prediction_f1"] = (
                float(np.mean([s["prediction_f1"] for s in read])) if read else None
            )
            entry["predicted_change_share"] = (
                float(np.mean([not predicts_no_change(s["prediction"]) for s in read]))
                if read
                else None
            )
            entry["prediction_errors"] = len(predicted) - len(read)
            # the share of steps where the prediction made the planner act unlike greedy
            entry["choice_differs_from_greedy"] = float(
                np.mean([s["action"] != s["greedy_choice"] for s in predicted])
            )
        head[p] = entry
    for a, b in PAIRS:
        if a not in by or b not in by:
            continue
        both = sorted(
            k
            for k, r in by[a].items()
            if r["status"] == "ok" and k in by[b] and by[b][k]["status"] == "ok"
        )
        head[f"{a}_minus_{b}"] = {
            "metric": f"success rate {a} - {b}",
            **_interval(
                [float(by[a][k]["success"]) for k in both],
                [float(by[b][k]["success"]) for k in both],
                resamples,
                seed,
            ),
        }
    return head


def _fmt(m: Mapping[str, Any], signed: bool = False) -> str:
    if m.get("value") is None:
        return "n/a"
    ci = m["ci95"]
    v = f"{m['value']:+.3f}" if signed else f"{m['value']:.3f}"
    return f"{v} [{ci[0]:+.3f}, {ci[1]:+.3f}]" if signed else f"{v} [{ci[0]:.3f}, {ci[1]:.3f}]"


def _opt(value: float | None, spec: str) -> str:
    return "n/a" if value is None else format(value, spec)


def web_mpc_report(summary: Mapping[str, Any], records: Sequence[Mapping[str, Any]]) -> str:
    """``report.md``: the headline table, the paired differences, success per task."""
    head, planners = summary["headline"], summary["planners"]
    lines = [
        "# Web MPC on MiniWoB++ (real headless Chromium)",
        "",
        f"{len(summary['tasks'])} tasks x {summary['seeds_per_task']} seeds; value function: "
        f"{summary['value_function']}. Success: MiniWoB's raw reward of 1 (fully done). "
        "Intervals: 95% bootstrap over episodes (differences: paired over the episodes both "
        "finished).",
        "",
        "| planner | success rate [95% CI] | mean raw reward [95% CI] | n | faults | plan s/step |"
        " steps/episode | F1 of the executed action's prediction | predicted a change |"
        " acted unlike greedy |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for p in planners:
        h = head[p]
        faults = f"{h['faults']} {h['fault_reasons']}" if h["faults"] else "0"
        lines.append(
            f"| {p} | {_fmt(h)} | {_fmt(h['raw_reward'], signed=True)} | {h['n']} | {faults}"
            f" | {_opt(h['plan_seconds_per_step'], '.3f')} | {_opt(h['steps_per_episode'], '.2f')}"
            f" | {_opt(h.get('executed_prediction_f1'), '.3f')}"
            f" | {_opt(h.get('predicted_change_share'), '.2f')}"
            f" | {_opt(h.get('choice_differs_from_greedy'), '.2f')} |"
        )
    lines += ["", "| difference | success rate [95% CI] | n | excludes 0 |", "|---|---|---|---|"]
    for a, b in (("rlvr", "base"), ("base", "greedy"), ("rlvr", "greedy")):
        d = head.get(f"{a}_minus_{b}")
        if d is not None:
            lines.append(
                f"| {a} - {b} | {_fmt(d, signed=True)} | {d['n']} | "
                f"{'yes' if d.get('ci95_excludes_zero') else 'no'} |"
            )
    lines += ["", "Success per task (episodes that finished):", ""]
    lines.append("| task | " + " | ".join(planners) + " |")
    lines.append("|---|" + "---|" * len(planners))
    for task in summary["tasks"]:
        cells = []
        for p in planners:
            ok = [
                r
                for r in records
                if r["task"] == task and r["planner"] == p and r["status"] == "ok"
            ]
            cells.append(f"{sum(r['success'] for r in ok)}/{len(ok)}" if ok else "n/a")
        lines.append(f"| {task} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"
