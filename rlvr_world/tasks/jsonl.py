"""Records of a JSON Lines data file, one object a line: the reader every task's loader uses.

Plain or gzip (by the ``.gz`` suffix); blank lines are skipped; a line that is not JSON, or not a
JSON object, is a ``ValueError`` naming the file and the line. No schema: each task checks its
own fields.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any


def iter_records(path: str | Path) -> Iterator[dict[str, Any]]:
    """Decoded records of a JSON Lines file, plain or gzip (by the ``.gz`` suffix)."""
    path = Path(path)
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ValueError(f"{path}:{lineno}: not JSON: {exc.msg}") from exc
            if not isinstance(record, dict):
                raise ValueError(f"{path}:{lineno}: a record must be a JSON object")
            yield record
