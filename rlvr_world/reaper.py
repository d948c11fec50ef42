"""Stop what a process started when it dies without cleaning up (SIGKILL, the OOM killer).

A run stops its services, trainer and embedded Redis when it exits, and on SIGTERM and SIGHUP too
(``apps.supervisor.exits_on_termination``). A SIGKILL leaves it no chance: before this module its
children kept running, holding ports, memory and a core. ``watch(pid)`` hands a child to a
**reaper**: one small process per watching process (``python -m rlvr_world.reaper``, stdlib
only, in a session of its own so a terminal's signals do not reach it), fed through a pipe. When
the watching process dies, however it dies, the pipe reaches end of file (and the reaper's parent
changes); the reaper then sends SIGTERM to every child still registered (to its whole process
group where the child leads one), waits ``GRACE_S`` for them to go, and SIGKILLs what is left.
``forget(pid)`` takes back a child that was stopped the normal way, so a clean exit reaps nothing.

Why not ``PR_SET_PDEATHSIG``: it fires when the *thread* that forked the child exits, and children
here are started from watchdog and worker threads too (the embedded Redis is restarted by one).

A pid is reaped only while it names the same process: the reaper compares the start time in
``/proc/PID/stat`` with the one recorded at ``watch``. A process group whose leader is gone is
still signalled (Linux does not reuse a pid that is still some group's id). Linux only (``/proc``).
Not done here: restarting anything, or reaping processes a child started in other sessions.
"""

from __future__ import annotations

import contextlib
import logging
import os
import select
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO

logger = logging.getLogger(__name__)

#: How long the reaper waits after SIGTERM before it sends SIGKILL.
GRACE_S = 10.0
#: How often the reaper checks that its parent is still the process that started it.
POLL_S = 0.5


def _stat(pid: int) -> list[str] | None:
    """The fields of ``/proc/PID/stat`` after the command name (state first), or None."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text(encoding="ascii", errors="replace")
    except OSError:
        return None
    # the command name (field 2) is in parentheses and may hold spaces or parentheses itself
    return text.rsplit(")", 1)[-1].split()


def start_time(pid: int) -> str | None:
    """Field 22 of ``/proc/PID/stat`` (clock ticks after boot), or None if there is no such pid."""
    fields = _stat(pid)
    return None if fields is None else fields[19]


@dataclass(frozen=True)
class Child:
    """A registered child: its pid, whether it leads a process group, its start time."""

    pid: int
    group: bool
    started: str

    def line(self) -> str:
        """The registration line the reaper reads: ``+ pid group started``."""
        return f"+ {self.pid} {int(self.group)} {self.started}\n"

    def same(self) -> bool:
        """True while ``pid`` names this child (or, for a group, no other process)."""
        now = start_time(self.pid)
        return now == self.started or (now is None and self.group)

    def signal(self, sig: signal.Signals) -> None:
        """Send ``sig`` to the child (its group if it leads one); a gone process is no error."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            if self.group:
                os.killpg(self.pid, sig)
            else:
                os.kill(self.pid, sig)

    def gone(self) -> bool:
        """True when nothing is left to signal (a zombie counts as gone)."""
        try:
            if self.group:
                os.killpg(self.pid, 0)
            else:
                os.kill(self.pid, 0)
        except (ProcessLookupError, PermissionError):
            return True
        return not self.group and _zombie(self.pid)


def _zombie(pid: int) -> bool:
    fields = _stat(pid)
    return fields is None or fields[0] == "Z"


class Reaper:
    """The watching side: starts the reaper process on the first ``watch`` and feeds it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._reset()

    def _reset(self) -> None:
        self._fd: int | None = None  # the write end of the pipe to the reaper process
        self._broken = False

    def _start(self) -> int | None:
        if self._fd is None and not self._broken:
            read_fd, write_fd = os.pipe()  # both ends non-inheritable
            try:
                subprocess.Popen(
                    [sys.executable, "-m", "rlvr_world.reaper", str(os.getpid())],
                    stdin=read_fd,
                    stdout=subprocess.DEVNULL,
                    start_new_session=True,
                )
            except OSError as exc:
                os.close(write_fd)
                logger.warning("no reaper process (%s): children will not be reaped", exc)
                self._broken = True
            else:
                self._fd = write_fd
            finally:
                os.close(read_fd)
        return self._fd

    def _send(self, line: str) -> None:
        with self._lock:
            fd = self._start()
            if fd is None:
                return
            try:
                os.write(fd, line.encode("ascii"))
            except OSError:
                logger.warning("the reaper process is gone: children will not be reaped")
                os.close(fd)
                self._fd, self._broken = None, True

    def watch(self, pid: int, *, group: bool) -> None:
        """Reap ``pid`` (its process group when ``group``) if this process dies first."""
        started = start_time(pid)
        if started is not None:
            self._send(Child(pid, group, started).line())

    def forget(self, pid: int) -> None:
        """``pid`` was stopped normally: do not reap it."""
        if self._fd is not None:
            self._send(f"- {pid}\n")

    def after_fork_in_child(self) -> None:
        """A forked child neither shares its parent's reaper nor holds its pipe open."""
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._fd)
        self._lock = threading.Lock()
        self._reset()


_REAPER = Reaper()
os.register_at_fork(after_in_child=_REAPER.after_fork_in_child)


def watch(pid: int, *, group: bool = False) -> None:
    """Reap ``pid`` (its whole process group when ``group``) if this process dies first."""
    _REAPER.watch(pid, group=group)


def forget(pid: int) -> None:
    """``pid`` was stopped normally by its owner: the reaper lets it be."""
    _REAPER.forget(pid)


# ------------------------------------------------------------------------ the reaper process


def _apply(line: str, children: dict[int, Child]) -> None:
    """One registration line: ``+ PID GROUP START`` or ``- PID``; anything else is ignored."""
    parts = line.split()
    try:
        if len(parts) == 4 and parts[0] == "+":  # noqa: PLR2004 (+ pid group started)
            children[int(parts[1])] = Child(int(parts[1]), parts[2] == "1", parts[3])
        elif len(parts) == 2 and parts[0] == "-":  # noqa: PLR2004 (- pid)
            children.pop(int(parts[1]), None)
    except ValueError:
        logger.warning("reaper: ignored a malformed line %r", line)


def reap(children: list[Child], grace_s: float = GRACE_S) -> None:
    """SIGTERM each child that is still itself, SIGKILL what is left after ``grace_s``."""
    live = [c for c in children if c.same()]
    for child in live:
        child.signal(signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while (live := [c for c in live if not c.gone()]) and time.monotonic() < deadline:
        time.sleep(0.1)
    for child in live:
        if child.same():
            child.signal(signal.SIGKILL)


def serve(parent: int, stream: IO[str]) -> None:
    """Read registrations until the parent dies (end of file, or a new parent), then reap."""
    children: dict[int, Child] = {}
    buffer = ""
    fd = stream.fileno()
    while True:
        ready, _, _ = select.select([fd], [], [], POLL_S)
        if ready:
            chunk = os.read(fd, 65536).decode("utf-8", errors="replace")
            if not chunk:
                break
            buffer += chunk
            *lines, buffer = buffer.split("\n")
            for line in lines:
                _apply(line, children)
        if os.getppid() != parent:
            break
    reap(list(children.values()))


def main() -> None:
    """``python -m rlvr_world.reaper PARENT_PID``: reap the children registered on stdin."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    serve(int(sys.argv[1]), sys.stdin)


if __name__ == "__main__":
    main()
