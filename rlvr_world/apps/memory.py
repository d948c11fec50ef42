"""Peak resident memory (RSS) of a job's processes, read from Linux's ``/proc``.

``PeakRss`` samples, every ``interval_s`` in a daemon thread, the kernel's high-water mark of
resident memory (``VmHWM`` in ``/proc/<pid>/status``) of every process of the job and keeps each
pid's largest reading: the processes named by ``sources()`` (``label -> pid``), each with the
members of the process group it leads, if any (the supervisor starts every service in a group of
its own, so the reward service's scoring pool counts with it), and this process. The job's peak
is the *sum of the per-process peaks*: what a machine must hold if every process peaked at once,
an upper bound of the peak at any one instant. ``VmHWM`` is kept by the kernel, so a sample
misses nothing of a live process; only growth in a process's last ``interval_s`` before it exits
goes unread.

Does not measure GPU memory, shared pages counted once (each process's RSS includes the shared
libraries it maps, as ``ps`` shows it) or processes outside the given groups. Off Linux (no
``/proc/<pid>/status``) every reading is empty and ``peaks()`` returns ``{}``.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

log = logging.getLogger(__name__)

PROC = Path("/proc")
#: The label of the process that runs the sampler.
SELF = "orchestrator"
MIB = 1024 * 1024


def _status_bytes(pid: int | str, key: str) -> int | None:
    try:
        text = (PROC / str(pid) / "status").read_text()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith(key):
            return int(line.split()[1]) * 1024  # "VmHWM:   123456 kB"
    return None  # a zombie or kernel thread has no memory lines


def vm_hwm(pid: int | str) -> int | None:
    """Peak RSS in bytes of ``pid`` so far (``VmHWM``); None when it is gone or unreadable."""
    return _status_bytes(pid, "VmHWM:")


def vm_rss(pid: int | str) -> int | None:
    """RSS in bytes of ``pid`` now (``VmRSS``); None when it is gone or unreadable."""
    return _status_bytes(pid, "VmRSS:")


def group_members(pgids: set[int]) -> Iterator[tuple[int, int]]:
    """``(pid, pgid)`` of every live process whose process group is in ``pgids``."""
    try:
        entries = list(PROC.iterdir())
    except OSError:
        return
    for entry in entries:
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue  # exited meanwhile
        fields = stat.rsplit(")", 1)[1].split()  # after "pid (comm)": state, ppid, pgrp, ...
        pgid = int(fields[2])
        if pgid in pgids:
            yield int(entry.name), pgid


def reset_own_peak() -> bool:
    """Reset this process's ``VmHWM`` to its current RSS (Linux ``clear_refs``: 5); True when
    done. For a benchmark that measures several runs one after another in one process."""
    try:
        (PROC / "self" / "clear_refs").write_text("5")
    except OSError:
        return False
    return True


class PeakRss:
    """Per-process peak RSS of a job (module docstring); a context manager around the sampler."""

    def __init__(self, sources: Callable[[], dict[str, int]], interval_s: float = 0.5) -> None:
        if interval_s <= 0:
            raise ValueError(f"interval_s must be > 0, got {interval_s}")
        self._sources = sources
        self._interval_s = interval_s
        self._peak: dict[int, tuple[str, int]] = {}  # pid -> (label, bytes)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="peak-rss", daemon=True)

    def __enter__(self) -> PeakRss:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.sample()

    def _loop(self) -> None:
        while not self._stop.wait(self._interval_s):
            try:
                self.sample()
            except Exception:  # a sampler must never take the job down
                log.exception("peak RSS sample failed")

    def sample(self) -> None:
        """Read every process of the job once (also called by the owner before it stops one)."""
        own = os.getpid()
        by_pid = {pid: label for label, pid in self._sources().items() if pid != own}
        readings = [(own, SELF, vm_hwm("self"))]
        readings += [(pid, label, vm_hwm(pid)) for pid, label in by_pid.items()]
        for pid, pgid in group_members(set(by_pid)):
            if pid != own and pid not in by_pid:
                readings.append((pid, by_pid[pgid], vm_hwm(pid)))
        with self._lock:
            for pid, label, value in readings:
                if value is not None and value > self._peak.get(pid, (label, -1))[1]:
                    self._peak[pid] = (label, value)

    def peaks(self) -> dict[str, int]:
        """Bytes by label: the sum of the peaks of that label's processes (all pids seen)."""
        out: dict[str, int] = {}
        with self._lock:
            for label, value in self._peak.values():
                out[label] = out.get(label, 0) + value
        return out

    def summary(self) -> dict[str, float]:
        """MiB by label and ``total`` (the job's sum of peaks), rounded to 0.1; ``{}`` off Linux."""
        peaks = self.peaks()
        if not peaks:
            return {}
        out = {label: round(value / MIB, 1) for label, value in sorted(peaks.items())}
        out["total"] = round(sum(peaks.values()) / MIB, 1)
        return out
