"""The reaper stops what a SIGKILLed process started, and nothing else.

Each test starts a real "owner" process that starts children (``sleep``) and registers them with
``rlvr_world.reaper``, then SIGKILLs the owner: registered children must be gone within the
reaper's grace, forgotten ones must be left alone, and a pid that now names another process
(its start time differs) is never signalled.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from rlvr_world.reaper import Child, reap, start_time

REPO = Path(__file__).resolve().parents[2]
OWNER = textwrap.dedent(
    """
    import subprocess, sys, time
    from rlvr_world import reaper
    group = subprocess.Popen(["sleep", "300"], start_new_session=True)
    grandchild = subprocess.Popen(
        ["sh", "-c", "sleep 300 & wait"], start_new_session=True
    )
    plain = subprocess.Popen(["sleep", "300"])
    kept = subprocess.Popen(["sleep", "300"], start_new_session=True)
    reaper.watch(group.pid, group=True)
    reaper.watch(grandchild.pid, group=True)
    reaper.watch(plain.pid)
    reaper.watch(kept.pid, group=True)
    reaper.forget(kept.pid)
    print(group.pid, grandchild.pid, plain.pid, kept.pid, flush=True)
    time.sleep(300)
    """
)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    return not (stat.exists() and stat.read_text().rsplit(")", 1)[-1].split()[0] == "Z")


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def test_a_sigkilled_owners_registered_children_are_stopped_and_forgotten_ones_kept() -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    owner = subprocess.Popen(
        [sys.executable, "-c", OWNER], stdout=subprocess.PIPE, text=True, env=env
    )
    assert owner.stdout is not None
    group, grandchild, plain, kept = map(int, owner.stdout.readline().split())
    try:
        time.sleep(0.5)  # the reaper has read the registrations
        assert all(_alive(p) for p in (group, grandchild, plain, kept))
        owner.kill()
        owner.wait()
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and (
            _alive(group) or _group_alive(grandchild) or _alive(plain)
        ):
            time.sleep(0.1)
        assert not _alive(group)
        assert not _group_alive(grandchild), "the child's own child (same group) is left"
        assert not _alive(plain)
        assert _alive(kept), "a forgotten child was reaped"
    finally:
        for pid in (group, grandchild, kept):
            if _group_alive(pid):
                os.killpg(pid, signal.SIGKILL)
        if _alive(plain):
            os.kill(plain, signal.SIGKILL)


def test_a_pid_that_names_another_process_now_is_not_signalled() -> None:
    other = subprocess.Popen(["sleep", "300"])
    try:
        started = start_time(other.pid)
        assert started is not None
        reap([Child(other.pid, group=False, started=str(int(started) + 1))], grace_s=0.5)
        assert other.poll() is None
        reap([Child(other.pid, group=False, started=started)], grace_s=5)
        assert other.wait(timeout=5) == -signal.SIGTERM
    finally:
        if other.poll() is None:
            other.kill()
            other.wait()


def test_start_time_of_a_missing_pid_is_none() -> None:
    assert start_time(2**22 + 12345) is None
    assert start_time(os.getpid()) is not None


@pytest.mark.parametrize("line", ["", "+ 1", "- x", "? 1 2 3", "+ 1 1"])
def test_malformed_registration_lines_are_ignored(line: str) -> None:
    from rlvr_world.reaper import _apply

    children: dict[int, Child] = {}
    try:
        _apply(line, children)
    except ValueError:
        pytest.fail(f"{line!r} raised")
    assert children == {}
