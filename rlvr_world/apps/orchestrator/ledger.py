"""The orchestrator's ledger: a JSON Lines file where every prompt request ends pushed or failed.

One line per event, ``{"time", "key", "prompt_id", "event", ...}``, with events

* ``start``: the request was taken from the dataset (``key`` = group id, unique per request);
* ``retry``: a service call failed and will be retried (``stage``, ``reason``, ``attempt``);
* ``pushed``: the scored group is on the queue (``entry_id``, ``policy_version``, ``statuses``);
* ``failed``: given up, with the ``reason`` (never silently dropped).

``summarize`` reads a ledger back and says, per key, its final event, so a test (or an operator)
can check that nothing was lost: ``unfinished`` lists keys that started but never ended.
Appends are flushed line by line; a crash loses at most the line being written.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

__all__ = ["FINAL_EVENTS", "Ledger", "LedgerSummary", "read_ledger", "summarize"]

FINAL_EVENTS = ("pushed", "failed")


class Ledger:
    """Append-only writer (one per orchestrator)."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._fh: TextIO = path.open("a", encoding="utf-8")

    def write(self, event: str, key: str, prompt_id: str, **fields: Any) -> None:
        record = {"time": time.time(), "event": event, "key": key, "prompt_id": prompt_id}
        self._fh.write(json.dumps({**record, **fields}) + "\n")
        self._fh.flush()

    def close(self) -> None:
        self._fh.close()

    def __enter__(self) -> Ledger:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def read_ledger(path: Path) -> list[dict[str, Any]]:
    """Every complete line of a ledger (a torn last line is ignored)."""
    out: list[dict[str, Any]] = []
    if not path.exists():
        return out
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return out


@dataclass
class LedgerSummary:
    """Final state per request key."""

    pushed: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)  # key -> reason
    unfinished: list[str] = field(default_factory=list)
    retried: list[str] = field(default_factory=list)  # keys with at least one retry

    @property
    def complete(self) -> bool:
        """Every started request ended as pushed or failed."""
        return not self.unfinished


def summarize(events: Iterable[dict[str, Any]]) -> LedgerSummary:
    """Fold ledger events into the final state of each key (last final event wins)."""
    started: dict[str, None] = {}
    final: dict[str, dict[str, Any]] = {}
    retried: dict[str, None] = {}
    for event in events:
        key = str(event["key"])
        kind = event["event"]
        if kind == "start":
            started.setdefault(key, None)
        elif kind == "retry":
            retried.setdefault(key, None)
        elif kind in FINAL_EVENTS:
            final[key] = event
    summary = LedgerSummary(retried=list(retried))
    for key in {**started, **final}:
        end = final.get(key)
        if end is None:
            summary.unfinished.append(key)
        elif end["event"] == "pushed":
            summary.pushed.append(key)
        else:
            summary.failed[key] = str(end.get("reason", "unknown"))
    return summary
