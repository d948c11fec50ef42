"""``rlvr-world run`` stopped by a signal stops what it started, SIGKILL included.

A signal's default action ends the process at once: without ``exits_on_termination`` the
supervised services, the trainer and the embedded Redis of a SIGTERMed run kept running (found on
2026-12-04: four orphans holding ports and a core after ``kill`` of a run). Here a real smoke run
is SIGTERMed (SIGHUPed) once its trainer has started; it must exit with 128 + the signal and leave
no process it started. A SIGKILL cannot be caught: the reaper (``rlvr_world.reaper``) must stop
every service, the trainer and Redis within its grace after the run is killed.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rlvr_world.queue.server import REDIS_URL_ENV
from rlvr_world.reaper import GRACE_S

pytestmark = [pytest.mark.integration, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
STARTED = re.compile(r"started (\w+) \(pid (\d+)\)")
REDIS = re.compile(r"embedded redis started .* \(pid (\d+)\)")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie (exited, not reaped by a parent) holds no port or CPU: count it as gone
    stat = Path(f"/proc/{pid}/stat")
    return not (stat.exists() and stat.read_text().split(") ")[-1].startswith("Z"))


def _pids(log: Path) -> dict[str, int]:
    text = log.read_text(errors="replace")
    pids = {name: int(pid) for name, pid in STARTED.findall(text)}
    for pid in REDIS.findall(text):
        pids["redis"] = int(pid)
    return pids


@pytest.mark.parametrize(
    "sig", [signal.SIGTERM, signal.SIGHUP, signal.SIGKILL], ids=lambda s: s.name
)
def test_signalled_run_exits_and_stops_every_process_it_started(
    tmp_path: Path, sig: signal.Signals
) -> None:
    env = {k: v for k, v in os.environ.items() if k != REDIS_URL_ENV}
    env.update(PYTHONPATH=str(REPO), OMP_NUM_THREADS="1")
    argv = [sys.executable, "-m", "rlvr_world.apps.cli", "run"]
    argv += [str(REPO / "configs" / "pipeline" / "smoke.yaml")]
    argv += ["--set", f"run.run_dir={tmp_path / 'run'}", "--set", "rl.steps=400"]
    log = tmp_path / "run.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=REPO)
    started: dict[str, int] = {}
    try:
        deadline = time.monotonic() + 300
        while "trainer" not in _pids(log):
            assert proc.poll() is None, log.read_text()[-3000:]
            assert time.monotonic() < deadline, "the trainer never started"
            time.sleep(0.2)
        started = _pids(log)
        assert {"reward", "decoder", "rollout", "trainer", "redis"} <= started.keys(), started
        proc.send_signal(sig)
        code = proc.wait(timeout=120)
        assert code == (-sig if sig == signal.SIGKILL else 128 + sig), log.read_text()[-3000:]
        gone_by = time.monotonic() + 10 + (GRACE_S if sig == signal.SIGKILL else 0)
        while (left := [n for n, p in started.items() if _alive(p)]) and time.monotonic() < gone_by:
            time.sleep(0.2)
        assert not left, f"still running after the run exited: {left}"
        if sig != signal.SIGKILL:
            assert f"{sig.name} received: stopping" in log.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
        for pid in started.values():  # what a failed run left: the pids it logged, no others
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
