"""Work functions for the scoring-pool tests, in a module of their own so that each spawned
scoring process imports only this (the test module imports the whole reward service: seconds
per process).

``square_or_die`` squares each row; a negative row makes the process exit with that code; a row
of 1000 or more sleeps that many microseconds (a chunk that keeps the process busy).
``failing_init`` is a process initialiser that exits with code 7.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence

#: Rows from this value up sleep that many microseconds.
SLEEP_FROM = 1000


def square_or_die(rows: Sequence[int]) -> list[int]:
    out = []
    for row in rows:
        if row < 0:
            os._exit(-row)
        if row >= SLEEP_FROM:
            time.sleep(row / 1e6)
        out.append(row * row)
    return out


def failing_init() -> None:
    raise SystemExit(7)
