"""Mutation check of the learning guards: break the GRPO path one way at a time, run the guards,
and pass only if every guard that should catch the breakage fails.

    python scripts/mutants.py [--mutants a,b] [--guards text,web] [--hogs N] [-- PYTEST ARGS]
    make test-mutants

The breakages are ``tests/helpers/mutants.py``'s (zeroed advantages, the loss sign flipped where
``train_step`` calls ``grpo_loss``, log-probs read one position off, a response mask of ones, the
staleness gate off, weights never published), each a monkeypatch of the real function that the
pytest plugin ``tests/helpers/mutant_plugin.py`` installs in the test process and in the trainer
processes a test starts. First every guard runs unbroken and must pass; then, per mutant, one
``pytest`` run of the guards with ``RLVR_MUTANT`` set. ``EXPECTED`` says which guard must catch
which mutant, and why the others cannot see it.

A mutant counts as caught by a guard when the guard's test fails; it must also have run there
(the patched function records its first call per process in ``RLVR_MUTANT_HITS``), so a patch
whose target moved is reported, not counted as caught. The guards record what they reached
(``RLVR_GUARD_REPORT``); the table gives it per cell. Output: the table on stdout and in
``--out`` (default ``runs/mutants``) as ``table.md``, with ``results.json``, the JUnit reports and
the logs. Exit code 0 only when the unbroken guards pass and every expected catch happens.
``--hogs N`` runs N busy processes beside (as ``scripts/test_stress.py`` does).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from test_stress import read_junit, start_hog, stop_hog

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.helpers.guard_report import REPORT_ENV  # noqa: E402 (after the path)
from tests.helpers.mutants import HITS_ENV, MUTANT_ENV, MUTANTS  # noqa: E402

#: The guards: name -> pytest node id.
GUARDS = {
    "step": "tests/unit/test_grpo_step.py::"
    "test_one_step_raises_the_rewarded_answer_and_lowers_the_other",
    "text": "tests/integration/test_learning_guard.py::"
    "test_grpo_raises_the_reward_of_a_learnable_task",
    "system": "tests/integration/test_learning_guard_system.py::"
    "test_grpo_through_the_services_learns_a_learnable_task",
    "web": "tests/integration/test_guard_web.py::"
    "test_grpo_through_the_services_raises_the_f1_of_a_page_change_task",
    "video": "tests/integration/test_guard_video.py::"
    "test_grpo_through_the_services_teaches_where_the_dot_goes",
}
ALL = frozenset(GUARDS)
LEARNING = frozenset(("text", "system", "web", "video"))
#: Mutant -> the guards that must fail under it. Why the others are not expected to:
#: * step (one train_step on two answers): it sees the sign and the advantages only; shifted
#:   log-probs still moved its answers the right way, and it has no mask, queue or publishing.
#: * mask_ones: only the web guard trains on groups with forced tokens (its masked poison groups,
#:   loss_mask 0 on every token); elsewhere every token is sampled, so a mask of ones changes
#:   only the weight of padding (advantage 0) in the token mean.
#: * staleness_off: the text and web guards push stale poison groups the gate must drop, and the
#:   system guard's asynchronous run produces stale groups (29 dropped in a quiet run) and
#:   asserts that no trained group is more than one version old; the video guard waits for each
#:   reload, so none of its groups is ever stale.
EXPECTED: dict[str, frozenset[str]] = {
    "zero_advantages": ALL,
    "loss_sign": ALL,
    "logprob_shift": LEARNING,
    "mask_ones": frozenset(("web",)),
    "staleness_off": frozenset(("text", "system", "web")),
    "no_publish": LEARNING,
}
BASELINE = "none"
#: Characters of a failure message kept for the table.
MESSAGE_CHARS = 90


@dataclass
class Cell:
    """One guard under one mutant."""

    outcome: str  # passed / failed / error / skipped / missing
    expected: bool
    exercised: bool
    score: str = ""
    message: str = ""

    @property
    def caught(self) -> bool:
        return self.outcome in ("failed", "error")

    @property
    def ok(self) -> bool:
        """An expected catch happened and the mutant ran there; an unexpected one is fine."""
        return not self.expected or (self.caught and self.exercised)


@dataclass
class MutantRun:
    mutant: str
    code: int
    seconds: float
    cells: dict[str, Cell] = field(default_factory=dict)


def read_lines(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def score_of(records: list[dict[str, Any]], guard: str) -> str:
    """``start -> end`` of the guard's last record with both, else what it recorded."""
    mine = [r for r in records if r.get("guard") == guard]
    full = [r for r in mine if "start" in r and "end" in r]
    if full:
        return f"{full[-1]['start']:.3g} -> {full[-1]['end']:.3g}"
    return ", ".join(
        f"{k} {v:+.3g}" if isinstance(v, float) else f"{k} {v}"
        for r in mine
        for k, v in r.items()
        if k not in ("guard", "mutant", "curve", "dropped")
    )


def failure_message(report: Path, node: str) -> str:
    """The first line of a failed test's message in a JUnit report."""
    if not report.exists():
        return ""
    name = node.rsplit("::", maxsplit=1)[-1]
    for case in ET.parse(report).getroot().iter("testcase"):
        if case.get("name") != name:
            continue
        for child in case:
            if child.tag in ("failure", "error"):
                lines = (child.get("message") or "").splitlines()
                return lines[0][:MESSAGE_CHARS] if lines else ""
    return ""


def run_mutant(mutant: str, guards: list[str], out: Path, extra: list[str]) -> MutantRun:
    """One pytest run of ``guards`` under ``mutant`` (``BASELINE``: none)."""
    tag = out / mutant
    report, hits, scores = (
        tag.with_suffix(".xml"),
        tag.with_suffix(".hits.jsonl"),
        tag.with_suffix(".scores.jsonl"),
    )
    for path in (report, hits, scores):
        path.unlink(missing_ok=True)
    env = {**os.environ, HITS_ENV: str(hits), REPORT_ENV: str(scores)}
    env.pop(MUTANT_ENV, None)
    if mutant != BASELINE:
        env[MUTANT_ENV] = mutant
    cmd = [sys.executable, "-m", "pytest", "-p", "tests.helpers.mutant_plugin", "-m", "", "-q"]
    cmd += ["-p", "no:cacheprovider", "-o", "junit_family=xunit1", f"--junitxml={report}"]
    cmd += [*extra, *(GUARDS[g] for g in guards)]
    t0 = time.monotonic()
    with tag.with_suffix(".log").open("w") as log:
        code = subprocess.call(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    outcomes, _ = read_junit(report)
    hit_tests = {h["test"] for h in read_lines(hits)}
    records = read_lines(scores)
    run = MutantRun(mutant, code, time.monotonic() - t0)
    for g in guards:
        node = GUARDS[g]
        run.cells[g] = Cell(
            outcome=outcomes.get(node, "missing"),
            expected=g in EXPECTED.get(mutant, frozenset()),
            exercised=mutant == BASELINE or node in hit_tests,
            score=score_of(records, g),
            message=failure_message(report, node),
        )
    return run


def verdict(cell: Cell, baseline: bool) -> str:
    if baseline:
        return f"{cell.outcome} ({cell.score})" if cell.score else cell.outcome
    if cell.caught:
        word = "caught" if cell.exercised else "failed, mutant never ran"
    elif cell.expected:
        word = "MISSED" if cell.exercised else "MISSED, mutant never ran"
    else:
        word = "not caught (not expected)" if cell.exercised else "not seen (not expected)"
    detail = cell.score or (cell.message.replace("|", "/") if cell.caught else "")
    return f"{word}: {detail}" if detail else word


def table(runs: list[MutantRun], guards: list[str]) -> str:
    lines = ["| mutant | " + " | ".join(guards) + " |", "|---" * (len(guards) + 1) + "|"]
    for run in runs:
        row = [verdict(run.cells[g], run.mutant == BASELINE) for g in guards]
        lines.append(f"| {run.mutant} | " + " | ".join(row) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mutants", default=",".join(MUTANTS), help="comma-separated (all)")
    parser.add_argument("--guards", default=",".join(GUARDS), help="comma-separated (all)")
    parser.add_argument("--hogs", type=int, default=0, help="busy processes beside the runs")
    parser.add_argument("--out", type=Path, default=ROOT / "runs" / "mutants", help="reports")
    parser.add_argument("pytest_args", nargs="*", help="passed to pytest (after --)")
    args = parser.parse_args(argv)
    mutants = [m for m in args.mutants.split(",") if m]
    guards = [g for g in args.guards.split(",") if g]
    unknown = [m for m in mutants if m not in MUTANTS] + [g for g in guards if g not in GUARDS]
    if unknown or not guards or args.hogs < 0:
        parser.error(
            f"unknown {unknown}; mutants: {', '.join(MUTANTS)}; guards: {', '.join(GUARDS)}"
            if unknown
            else "--guards must name at least one guard and --hogs be >= 0"
        )
    args.out.mkdir(parents=True, exist_ok=True)
    hog = start_hog(args.hogs)
    runs: list[MutantRun] = []
    try:
        for mutant in [BASELINE, *mutants]:
            runs.append(run_mutant(mutant, guards, args.out, args.pytest_args))
            print(
                f"{mutant}: pytest exit code {runs[-1].code}, {runs[-1].seconds:.0f}s", flush=True
            )
    finally:
        stop_hog(hog)
    baseline_ok = all(c.outcome == "passed" for c in runs[0].cells.values())
    missed = [(r.mutant, g) for r in runs[1:] for g, c in r.cells.items() if not c.ok]
    text = table(runs, guards)
    text += "\n\n" + (
        "unbroken guards: all passed" if baseline_ok else "unbroken guards: SOME FAILED"
    )
    text += "\n" + (
        "every expected catch happened"
        if not missed
        else "MISSED: " + ", ".join(f"{m} by {g}" for m, g in missed)
    )
    print(text)
    (args.out / "table.md").write_text(text + "\n")
    (args.out / "results.json").write_text(
        json.dumps(
            [{**asdict(r), "cells": {g: asdict(c) for g, c in r.cells.items()}} for r in runs],
            indent=2,
        )
    )
    return 0 if baseline_ok and not missed else 1


if __name__ == "__main__":
    sys.exit(main())
