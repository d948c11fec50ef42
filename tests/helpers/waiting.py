"""Waiting on events instead of clocks: a condition polled until it holds, the lines a child
process writes to a pipe, the log records of this process.

Every wait has a deadline, generous by default (``EVENT_TIMEOUT_S``), and fails with what it waited
for and what it saw instead; it returns as soon as the event happens, so a quiet machine does not
wait the deadline. Nothing here measures or asserts how long something took.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import IO

#: Default deadline of a wait: a fresh interpreter importing torch and transformers took over a
#: minute on a 2-core machine shared with other jobs; this leaves room for that and a CPU hog.
EVENT_TIMEOUT_S = 240.0


def wait_until(
    predicate: Callable[[], object],
    what: str,
    timeout_s: float = EVENT_TIMEOUT_S,
    poll_s: float = 0.02,
) -> None:
    """Poll ``predicate`` until it is true; ``AssertionError`` naming ``what`` at the deadline."""
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s:.0f}s waiting for {what}")
        time.sleep(poll_s)


def _search(pattern: str | re.Pattern[str], lines: list[str]) -> re.Match[str] | None:
    for line in lines:
        if found := re.search(pattern, line):
            return found
    return None


class Lines:
    """Every line a child process writes to ``stream`` (one of its text pipes), read by a daemon
    thread as it comes, so the pipe never fills and a test can wait for a line with a deadline."""

    def __init__(self, stream: IO[str]) -> None:
        self._lines: list[str] = []
        self._closed = False
        self._cond = threading.Condition()
        self._thread = threading.Thread(target=self._read, args=(stream,), daemon=True)
        self._thread.start()

    def _read(self, stream: IO[str]) -> None:
        for line in stream:
            with self._cond:
                self._lines.append(line)
                self._cond.notify_all()
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    def wait_for(
        self, pattern: str | re.Pattern[str], timeout_s: float = EVENT_TIMEOUT_S
    ) -> re.Match[str]:
        """The first match of ``pattern`` in a line written so far or later; ``AssertionError``
        (with the output) when the pipe closes or the deadline passes without one."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while (found := _search(pattern, self._lines)) is None:
                left = deadline - time.monotonic()
                if self._closed or left <= 0:
                    why = "the pipe closed" if self._closed else f"{timeout_s:.0f}s passed"
                    raise AssertionError(
                        f"{why} before a line matching {pattern!r}; the output:\n" + self.text()
                    )
                self._cond.wait(left)
            return found

    def wait_closed(self, timeout_s: float = EVENT_TIMEOUT_S) -> str:
        """Everything written, once the writer closed the pipe (its process exited)."""
        self._thread.join(timeout_s)
        if self._thread.is_alive():
            raise AssertionError(f"the pipe stayed open for {timeout_s:.0f}s:\n" + self.text())
        return self.text()

    def text(self) -> str:
        with self._cond:
            return "".join(self._lines)


class LogRecords(logging.Handler):
    """The formatted messages of the log records of this process (every thread), for a test to
    wait on: ``with capture_logs() as logs: ...; logs.wait_for("weights version 3 .* not loaded")``.
    """

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self._messages: list[str] = []
        self._cond = threading.Condition()

    def emit(self, record: logging.LogRecord) -> None:
        message = f"{record.name}: {record.getMessage()}"
        with self._cond:
            self._messages.append(message)
            self._cond.notify_all()

    def wait_for(
        self, pattern: str | re.Pattern[str], timeout_s: float = EVENT_TIMEOUT_S
    ) -> re.Match[str]:
        """The first match of ``pattern`` in a message logged so far or later."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while (found := _search(pattern, self._messages)) is None:
                left = deadline - time.monotonic()
                if left <= 0:
                    seen = "\n".join(self._messages[-40:])
                    raise AssertionError(
                        f"no log message matching {pattern!r} in {timeout_s:.0f}s; the last:\n"
                        + seen
                    )
                self._cond.wait(left)
            return found


@contextmanager
def capture_logs(level: int = logging.INFO) -> Iterator[LogRecords]:
    """Records of ``level`` and above from every logger of this process, while the block runs."""
    handler = LogRecords()
    handler.setLevel(level)
    root = logging.getLogger()
    old_level = root.level
    root.addHandler(handler)
    if old_level > level:  # NOTSET (0) already passes everything
        root.setLevel(level)
    try:
        yield handler
    finally:
        root.removeHandler(handler)
        root.setLevel(old_level)
