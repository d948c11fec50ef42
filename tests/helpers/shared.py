"""The folder with ``golden/`` and ``data/`` (``RLVR_SHARED_DIR``), and a JSON Lines reader."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

SHARED_ENV = "RLVR_SHARED_DIR"


def shared_dir() -> Path:
    """The folder with golden/ and data/ (CI sets RLVR_SHARED_DIR); skip with a reason if absent."""
    value = os.environ.get(SHARED_ENV)
    if not value:
        pytest.skip(f"{SHARED_ENV} is not set: golden files and real data samples are unavailable")
    path = Path(value)
    if not path.is_dir():
        pytest.skip(f"{SHARED_ENV}={value} is not a directory")
    return path


def read_jsonl(path: Path) -> Iterator[dict[str, Any]]:
    """The JSON object of every non-blank line of ``path``."""
    with path.open(encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                yield json.loads(line)
