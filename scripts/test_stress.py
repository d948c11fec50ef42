"""Stress check of the test suite itself: the integration and slow tests N times while a CPU hog
keeps every core busy; names each test that failed in some runs (flaky) or in all (failing).

    python scripts/test_stress.py [--runs 3] [--hogs N] [--run-timeout 3600] [-- PYTEST ARGS]
    make test-stress [STRESS_RUNS=3]

The hog is ``--hogs`` busy-looping Python processes (default: one per core), started before the
first run and killed, by their process ids, after the last or on any exit of this script. Each
run is ``python -m pytest -m "integration or slow"`` in a process group of its own with a JUnit
report in ``--out`` (default ``runs/stress``); a run still going after ``--run-timeout`` seconds is
interrupted (SIGINT, so fixtures stop their services), then killed, and counts as failed. Exit
code 0 only when every run passed: no failed test, no error, no cut run.

It does not retry anything: a test that fails once here is reported, never hidden.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType

MARKERS = "integration or slow"
ROOT = Path(__file__).resolve().parents[1]


@dataclass
class Run:
    """One pytest run: its exit code, seconds, and each test's outcome and seconds by node id."""

    index: int
    code: int
    seconds: float
    cut: bool
    outcomes: dict[str, str] = field(default_factory=dict)
    times: dict[str, float] = field(default_factory=dict)


def node_id(case: ET.Element) -> str:
    """``tests/x/test_y.py::test_z[p]`` from a JUnit ``testcase`` (classname ``tests.x.test_y``)."""
    classname, name = case.get("classname", ""), case.get("name", "")
    parts = classname.split(".")
    if file := case.get("file"):  # xunit1 names the file
        klass = parts[-1] if parts[-1][:1].isupper() else ""
        return f"{file}::{klass}::{name}" if klass else f"{file}::{name}"
    # a test class adds its name after the module: keep module path and class apart
    if len(parts) > 1 and parts[-1][:1].isupper():
        return f"{'/'.join(parts[:-1])}.py::{parts[-1]}::{name}"
    return f"{'/'.join(parts)}.py::{name}"


def read_junit(path: Path) -> tuple[dict[str, str], dict[str, float]]:
    """Outcome (passed / failed / error / skipped) and seconds of every test in a JUnit file."""
    outcomes: dict[str, str] = {}
    times: dict[str, float] = {}
    if not path.exists():
        return outcomes, times
    for case in ET.parse(path).getroot().iter("testcase"):
        test = node_id(case)
        tags = {child.tag for child in case}
        outcome = "passed"
        for tag in ("failure", "error", "skipped"):
            if tag in tags:
                outcome = "failed" if tag == "failure" else tag
                break
        if outcomes.get(test) in ("failed", "error"):  # a teardown error after a failure
            continue
        outcomes[test] = outcome
        times[test] = times.get(test, 0.0) + float(case.get("time", "0") or 0)
    return outcomes, times


def start_hog(count: int) -> list[subprocess.Popen[bytes]]:
    """``count`` processes that each keep one core busy until killed."""
    code = "while True:\n    pass\n"
    return [subprocess.Popen([sys.executable, "-c", code]) for _ in range(count)]


def stop_hog(hog: list[subprocess.Popen[bytes]]) -> None:
    for proc in hog:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


def run_pytest(index: int, out: Path, extra: list[str], timeout_s: float) -> Run:
    """One pytest run of the marked tests in its own process group, bounded by ``timeout_s``."""
    report = out / f"run-{index}.xml"
    report.unlink(missing_ok=True)
    cmd = [sys.executable, "-m", "pytest", "-m", MARKERS, "-p", "no:cacheprovider", "-q"]
    cmd += ["-o", "junit_family=xunit1", f"--junitxml={report}", *extra]
    with (out / f"run-{index}.log").open("w") as log:
        t0 = time.monotonic()
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)  # fmt: skip
        cut = False
        try:
            code = proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            cut = True
            os.killpg(proc.pid, signal.SIGINT)  # fixtures stop the services they started
            try:
                code = proc.wait(120)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                code = proc.wait()
        except BaseException:
            os.killpg(proc.pid, signal.SIGINT)
            proc.wait()
            raise
    outcomes, times = read_junit(report)
    return Run(index, code, time.monotonic() - t0, cut, outcomes, times)


def summarize(runs: list[Run], timeout_s: float) -> tuple[list[str], bool]:
    """The report's lines, and whether every run passed."""
    lines = []
    for r in runs:
        counts = {k: sum(1 for v in r.outcomes.values() if v == k) for k in
                  ("passed", "failed", "error", "skipped")}  # fmt: skip
        state = f"CUT after {timeout_s:.0f}s" if r.cut else f"exit code {r.code}"
        lines.append(f"run {r.index}: {r.seconds:.0f}s, {state}, " +
                     ", ".join(f"{v} {k}" for k, v in counts.items()))  # fmt: skip
    tests = sorted({t for r in runs for t in r.outcomes})
    bad = {t: [r.index for r in runs if r.outcomes.get(t) in ("failed", "error")] for t in tests}
    bad = {t: idx for t, idx in bad.items() if idx}
    for test, idx in bad.items():
        kind = "FAILING (every run)" if len(idx) == len(runs) else "FLAKY"
        lines.append(f"{kind}: {test} failed in run(s) {', '.join(map(str, idx))} of {len(runs)}")
    slowest = sorted(tests, key=lambda t: -max(r.times.get(t, 0.0) for r in runs))[:10]
    lines.append("slowest under the hog (most seconds over the runs):")
    for test in slowest:
        lines.append(f"  {max(r.times.get(test, 0.0) for r in runs):7.1f}s  {test}")
    ok = not bad and all(r.code in (0, 5) and not r.cut for r in runs)
    lines.append(f"stress: {'PASSED' if ok else 'FAILED'} ({len(runs)} runs, {len(tests)} tests)")
    return lines, ok


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3, help="repetitions (default 3)")
    parser.add_argument("--hogs", type=int, default=os.cpu_count() or 2, help="busy processes")
    parser.add_argument("--run-timeout", type=float, default=3600.0, help="seconds per run")
    parser.add_argument("--out", type=Path, default=ROOT / "runs" / "stress", help="reports")
    parser.add_argument("pytest_args", nargs="*", help="passed to pytest (after --)")
    args = parser.parse_args(argv)
    if args.runs < 1 or args.hogs < 0 or args.run_timeout <= 0:
        parser.error("--runs must be >= 1, --hogs >= 0, --run-timeout > 0")
    args.out.mkdir(parents=True, exist_ok=True)

    def terminate(signum: int, frame: FrameType | None) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, terminate)
    hog = start_hog(args.hogs)
    runs: list[Run] = []
    try:
        for i in range(1, args.runs + 1):
            runs.append(run_pytest(i, args.out, args.pytest_args, args.run_timeout))
            print(f"run {i} of {args.runs}: exit code {runs[-1].code}, "
                  f"{runs[-1].seconds:.0f}s", flush=True)  # fmt: skip
    finally:
        stop_hog(hog)
    lines, ok = summarize(runs, args.run_timeout)
    text = "\n".join(lines)
    print(text)
    (args.out / "summary.txt").write_text(text + "\n")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
