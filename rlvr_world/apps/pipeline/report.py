"""The run's report: curves (PNG, matplotlib) and ``report.md``.

Inputs are the trainer's JSON Lines log (``step`` events with the reward and the diagnostics of
``rlvr_world.grpo.diagnostics``), the held-out curve points taken during GRPO and the final
evaluations (start, RLVR, control) with the headline. The held-out metric is the task's: exact
match (``EvalReport.accuracy``) for the text game, F1 (``mean_reward``) for the web; callers pass
its report key and label. matplotlib is imported inside ``plot_curve`` (the ``pipeline`` extra);
without it the report says the plot was skipped.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rlvr_world.apps.pipeline.results import step_reward
from rlvr_world.apps.run.grpo import train_steps

logger = logging.getLogger(__name__)

#: Diagnostics drawn in the second panel: (log key, label).
DIAGNOSTICS = (
    ("entropy", "entropy / token"),
    ("kl", "KL to reference"),
    ("zero_spread_share", "zero-spread group share"),
    ("clipfrac", "clip fraction"),
)


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def plot_curve(
    steps: list[dict[str, Any]],
    evals: dict[str, dict[str, Any]],
    curve: list[dict[str, Any]],
    out: Path,
    *,
    key: str = "accuracy",
    label: str = "exact match",
) -> Path | None:
    """Train reward and the held-out metric (``key`` of each evaluation) per step (left),
    diagnostics per step (right); None without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        logger.warning("matplotlib is not installed (pipeline extra): no curve plot")
        return None
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4))
    xs = [s["step"] for s in steps]
    left.plot(xs, [step_reward(s) for s in steps], ".-", label="train reward (samples read)")
    last = max(xs, default=1)
    held = [(0, evals["start"][key])] if "start" in evals else []
    held += [(p["step"], p[key]) for p in curve]
    if "rlvr" in evals:
        held.append((last, evals["rlvr"][key]))
    if held:
        left.plot(*zip(*held, strict=True), "s--", label=f"held-out {label}")
    if "control" in evals:
        left.axhline(evals["control"][key], color="grey", ls=":", label="control (MLE)")
    left.set_xlabel("GRPO step (policy version)")
    left.set_ylim(-0.05, 1.05)
    left.legend()
    left.grid(alpha=0.3)
    for diag, diag_label in DIAGNOSTICS:
        right.plot(xs, [s.get(diag, 0.0) for s in steps], ".-", label=diag_label)
    right.set_xlabel("GRPO step")
    right.legend()
    right.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out


def _split_line(name: str, report: dict[str, Any], label: str) -> str:
    if label == "exact match":
        parts = [
            f"{name}: exact match {report['accuracy']:.3f}, mean reward {report['mean_reward']:.3f}"
        ]
        key = "accuracy"
    else:
        parts = [f"{name}: {label} {report['mean_reward']:.3f}, exact {report['accuracy']:.3f}"]
        key = "mean_reward"
    for split, s in report["by_split"].items():
        parts.append(f"{split} {s[key]:.3f} (n={int(s['n'])})")
    if report.get("failed"):
        parts.append(f"{len(report['failed'])} failed")
    return "; ".join(parts)


def _headline_lines(summary: dict[str, Any]) -> list[str]:
    h = summary.get("headline")
    if h is None:
        return ["No headline: the start, RLVR and control evaluations did not all run."]
    lines = [
        summary.get("headline_text", ""),
        "",
        "| split | n | start | control | RLVR | RLVR - control (95% CI) | RLVR - start (95% CI) |",
        "|---|---|---|---|---|---|---|",
    ]
    rows = [("all", h | {"rlvr_minus_control": h["rlvr"] - h["control"]})]
    rows += list(h.get("splits", {}).items())
    for name, s in rows:
        lines.append(
            f"| {name} | {s['n']} | {s['start']:.3f} | {s['control']:.3f} | {s['rlvr']:.3f} | "
            f"{s['rlvr_minus_control']:+.3f} [{s['ci95'][0]:+.3f}, {s['ci95'][1]:+.3f}] | "
            f"{s['rlvr_minus_start']:+.3f} [{s['ci95_vs_start'][0]:+.3f}, "
            f"{s['ci95_vs_start'][1]:+.3f}] |"
        )
    return lines


def _no_change_line(summary: dict[str, Any], label: str) -> list[str]:
    rates = summary.get("no_change_answers")
    if not rates:
        return []
    models = ", ".join(
        f"{k} {v:.3f}" for k, v in rates.items() if k in ("start", "control", "rlvr")
    )
    line = (
        f"Answers that predict no change: {models}; the true unchanged share is "
        f"{rates['true_unchanged_share']:.3f}."
    )
    always = rates.get("always_no_change")
    if always is None:
        return ["", line]
    return [
        "",
        f"{line} Always answering no change scores {label} {always['all']:.3f} (unchanged "
        f"{always['unchanged']:.3f}, changed {always['changed']:.3f}): the score of a world "
        "model that is useless. A gain that only reaches it is a collapse, not a better model.",
    ]


def _diagnostic_lines(steps: list[dict[str, Any]]) -> list[str]:
    if not steps:
        return ["No trainer steps were logged."]
    head, tail = steps[:10], steps[-10:]
    keys = (
        ("reward_read_mean", "train reward (samples read)"),
        ("reward_mean", "train reward (groups trained)"),
        ("entropy", "entropy / token"),
        ("kl", "KL to reference"),
        ("zero_spread_share", "zero-spread groups"),
        ("response_len_mean", "response tokens"),
        ("truncated", "truncated samples / step"),
        ("status_unparseable", "unparseable samples / step"),
        ("sample_age_mean", "sample age (versions)"),
        ("clipfrac", "clip fraction"),
    )
    lines = ["| diagnostic | first 10 steps | last 10 steps |", "|---|---|---|"]
    for key, label in keys:
        a = _mean([float(s.get(key, 0.0)) for s in head])
        b = _mean([float(s.get(key, 0.0)) for s in tail])
        lines.append(f"| {label} | {a:.4g} | {b:.4g} |")
    return lines


def _resource_lines(summary: dict[str, Any]) -> list[str]:
    """The start-up (``summary["startup"]``) and peak RSS (``summary["peak_rss_mib"]``) lines,
    each only when the summary has it."""
    lines = []
    up = summary.get("startup")
    if up and up.get("first_request_s") is not None:
        ready = {n: p["ready_s"] for n, p in up["processes"].items() if p["ready_s"] is not None}
        slowest = max(ready, key=lambda n: ready[n]) if ready else "-"
        lines.append(
            f"- start-up (after SFT): services ready {up['services_s']:.1f} s (slowest: "
            f"{slowest}), first GRPO rollout request "
            f"{up['first_request_s'] - up['grpo_start_s']:.2f} s after the GRPO phase began"
        )
    rss = summary.get("peak_rss_mib")
    if rss:
        parts = ", ".join(f"{k} {v:.0f}" for k, v in rss.items() if k != "total")
        lines.append(
            f"- peak RSS: {rss['total']:.0f} MiB, the sum of each process's peak ({parts})"
        )
    return lines


def _sft_lines(summary: dict[str, Any]) -> list[str]:
    """The warm-up's train and held-out loss per epoch (``summary["sft_epochs"]``), as a table;
    nothing without SFT."""
    epochs = summary.get("sft_epochs") or []
    if not epochs:
        return []
    lines = ["", "## SFT warm-up (loss per epoch)", "", "| epoch | train | held-out |"]
    lines.append("|---|---|---|")
    for e in epochs:
        held = e.get("heldout_loss")
        lines.append(
            f"| {e['epoch']} | {e['train_loss']:.4f} | {'-' if held is None else f'{held:.4f}'} |"
        )
    return lines


def _devices_line(summary: dict[str, Any]) -> list[str]:
    """Where each phase and process ran (``summary["devices"]``), when the summary has it."""
    devices = summary.get("devices")
    if not devices:
        return []
    run = devices.get("run", {})
    parts = ", ".join(
        f"{name} {d['device']}/{d['precision']}"
        for name, d in devices.items()
        if name != "run" and isinstance(d, dict)
    )
    return [
        f"- device: {run.get('setting', '-')} -> {run.get('device', '-')}, precision "
        f"{run.get('precision', '-')} ({parts})"
    ]


def write_report(
    run_dir: Path,
    summary: dict[str, Any],
    evals: dict[str, dict[str, Any]],
    plot: Path | None,
    *,
    label: str = "exact match",
) -> Path:
    """``report.md``: the headline, the held-out evaluations, diagnostics, throughput."""
    steps = train_steps(run_dir / "trainer" / "train_log.jsonl")
    budget = summary.get("control_budget", {})
    lines = [
        "# RLVR-World pipeline run",
        "",
        f"- config: `{summary['config']}`, seed {summary.get('seed', 0)}",
        f"- wall time: {summary['wall_s']:.1f} s (SFT {summary.get('sft_s', 0.0):.1f} s, "
        f"GRPO {summary.get('grpo_s', 0.0):.1f} s, control {summary.get('control_s', 0.0):.1f} s)",
        f"- GRPO: {summary.get('trainer_steps', 0)} steps, {summary.get('pushed', 0)} groups "
        f"pushed, {summary.get('failed', 0)} failed, {summary.get('samples', 0)} samples, "
        f"{summary.get('samples_per_s', 0.0):.2f} samples/s end to end",
        f"- control: SFT continued from the start, budget {budget.get('kind', '-')} "
        f"({summary.get('control_steps', 0)} steps for {budget.get('trained_sequences', 0)} "
        f"sequences in {budget.get('grpo_steps', summary.get('trainer_steps', 0))} steps GRPO "
        "trained)",
        *_resource_lines(summary),
        *_devices_line(summary),
        *_sft_lines(summary),
        "",
        f"## Headline (greedy, {label}, same held-out items)",
        "",
        *_headline_lines(summary),
        *_no_change_line(summary, label),
        "",
        "## Held-out evaluations",
        "",
        *[f"- {_split_line(name, r, label)}" for name, r in evals.items()],
        "",
        "## GRPO diagnostics (trainer log)",
        "",
        *_diagnostic_lines(steps),
    ]
    if plot is not None:
        lines += ["", f"![curve]({plot.name})"]
    lines += [
        "",
        "Files: `pipeline_log.jsonl`, `ledger.jsonl`, `trainer/train_log.jsonl`, `logs/`, "
        "`eval_<model>.jsonl`.",
    ]
    path = run_dir / "report.md"
    path.write_text("\n".join(lines) + "\n")
    return path
