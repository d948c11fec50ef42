"""``apps.memory.PeakRss`` against real processes: a supervised process group whose child
allocates a known amount, this process, and a pid that is gone. Synchronised on log lines, so
machine speed does not matter."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from rlvr_world.apps.memory import MIB, SELF, PeakRss, reset_own_peak, vm_hwm
from rlvr_world.apps.supervisor import LogLine, ProcessSpec, Supervisor

pytestmark = pytest.mark.integration

#: The leader starts a child in its group; the child holds 200 MiB, frees it, then both wait.
HOLDS = """
import subprocess, sys, time
child = (
    "import time; b = bytearray(200 * 1024 * 1024); b[::4096] = b'x' * len(b[::4096]); "
    "del b; print('freed', flush=True); time.sleep(60)"
)
subprocess.Popen([sys.executable, "-c", child])
time.sleep(60)
"""


def test_the_peak_of_a_group_member_is_kept_after_it_freed_its_memory(tmp_path: Path) -> None:
    with Supervisor(tmp_path) as sup, PeakRss(sup.pids, interval_s=0.1) as rss:
        sup.start(
            ProcessSpec("holder", [sys.executable, "-c", HOLDS], ready=LogLine("^freed")),
            timeout_s=120,
        )
        rss.sample()  # the child freed its memory already: only the high-water mark has it
        peaks = rss.peaks()
        assert peaks["holder"] >= 200 * MIB  # leader + child, the child's 200 MiB at its peak
        assert peaks[SELF] > 0
        summary = rss.summary()
        assert summary["total"] == pytest.approx(sum(peaks.values()) / MIB, abs=0.2)


def test_gone_pids_read_nothing_and_bad_intervals_are_refused() -> None:
    assert vm_hwm(2**22 + 12345) is None  # above pid_max's usual 4194304: never a live pid
    assert vm_hwm("self") is not None and vm_hwm("self") > 0
    with pytest.raises(ValueError, match="interval_s must be > 0"):
        PeakRss(dict, interval_s=0)
    with PeakRss(lambda: {"gone": 2**22 + 12345}) as rss:
        time.sleep(0.01)
    assert "gone" not in rss.peaks() and SELF in rss.peaks()


def test_reset_own_peak_drops_the_high_water_mark_to_the_current_rss() -> None:
    block = bytearray(150 * MIB)
    block[::4096] = b"x" * len(block[::4096])
    del block
    before = vm_hwm("self")
    assert before is not None
    assert reset_own_peak()
    after = vm_hwm("self")
    assert after is not None and after < before - 100 * MIB
