"""The JSON Lines run log: one JSON object per line, written as events happen and read back whole.

``JsonlLog`` appends ``{"event", "time", **fields}`` lines and flushes each, so a log read during
or after a crash holds every event written before it (the trainer's ``train_log.jsonl``, a
pipeline's ``pipeline_log.jsonl``). ``read_jsonl`` reads such a file back as a list of objects.
Stdlib only; no rotation, no schema (each writer documents its own events).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, TextIO


class JsonlLog:
    """Append-only JSON Lines log of events (``step``, ``drop``, ``checkpoint``, ...)."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self._fh: TextIO = path.open("a", encoding="utf-8")

    def write(self, event: str, **fields: Any) -> None:
        """Append ``{"event", "time", **fields}`` as one line and flush it."""
        self._fh.write(json.dumps({"event": event, "time": time.time(), **fields}) + "\n")
        self._fh.flush()

    def close(self) -> None:
        """Close the file."""
        self._fh.close()


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """Every non-blank line of ``path`` as a JSON object; ``[]`` when the file does not exist.

    A line that is not JSON raises ``json.JSONDecodeError``."""
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
