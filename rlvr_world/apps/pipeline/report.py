"""The run's report: a reward/accuracy curve (PNG, matplotlib) and ``report.md``.

Inputs are the trainer's JSON Lines log (``step`` events with ``reward_mean``) and the two held-out
evaluations. matplotlib is imported inside ``plot_curve`` (the ``pipeline`` extra); without it the
report says the plot was skipped.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from rlvr_world.runlog import read_jsonl

logger = logging.getLogger(__name__)


def train_steps(log_path: Path) -> list[dict[str, Any]]:
    """The ``step`` events of a trainer log (empty if there is none)."""
    return [e for e in read_jsonl(log_path) if e.get("event") == "step"]


def plot_curve(
    steps: list[dict[str, Any]], evals: dict[str, dict[str, Any]], out: Path
) -> Path | None:
    """Train reward per step, and held-out accuracy/mean reward before and after; None if no
    matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        logger.warning("matplotlib is not installed (pipeline extra): no curve plot")
        return None
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.plot(
        [s["step"] for s in steps],
        [s.get("reward_mean", 0.0) for s in steps],
        marker="o",
        label="train reward (mean of ok samples)",
    )
    last = max([s["step"] for s in steps], default=1)
    for name, marker in (("accuracy", "s"), ("mean_reward", "^")):
        xs = [0, last][: len(evals)]
        ys = [e[name] for e in evals.values()]
        ax.plot(xs, ys, marker=marker, linestyle="--", label=f"held-out {name}")
    ax.set_xlabel("GRPO step (policy version)")
    ax.set_ylim(-0.05, 1.05)
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out


def _split_line(name: str, report: dict[str, Any]) -> str:
    parts = [f"{name}: accuracy {report['accuracy']:.3f}, mean reward {report['mean_reward']:.3f}"]
    for split, s in report["by_split"].items():
        parts.append(f"{split} {s['accuracy']:.3f} (n={int(s['n'])})")
    return "; ".join(parts)


def write_report(
    run_dir: Path, summary: dict[str, Any], evals: dict[str, dict[str, Any]], plot: Path | None
) -> Path:
    """``report.md``: what ran, held-out metrics before/after, throughput, ledger."""
    lines = [
        "# RLVR-World pipeline run",
        "",
        f"- config: `{summary['config']}`",
        f"- wall time: {summary['wall_s']:.1f} s (SFT {summary.get('sft_s', 0.0):.1f} s, "
        f"GRPO {summary.get('grpo_s', 0.0):.1f} s)",
        f"- GRPO: {summary['trainer_steps']} steps, {summary['pushed']} groups pushed, "
        f"{summary['failed']} failed, {summary['samples']} samples, "
        f"{summary['samples_per_s']:.2f} samples/s end to end",
        f"- final weights version served by the rollout service: {summary['served_version']}",
        "",
        "## Held-out (greedy, exact match under the strict binary reward)",
        "",
    ]
    lines += [f"- {_split_line(name, r)}" for name, r in evals.items()]
    if plot is not None:
        lines += ["", f"![curve]({plot.name})"]
    lines += [
        "",
        "Files: `pipeline_log.jsonl`, `ledger.jsonl`, `trainer/train_log.jsonl`, `logs/`.",
    ]
    path = run_dir / "report.md"
    path.write_text("\n".join(lines) + "\n")
    return path
