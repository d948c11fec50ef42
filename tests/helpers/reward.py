"""Reward-service test helpers: the example requests shipped in ``examples/score_requests.jsonl``
and the bearer token the authenticated-service tests use."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "score_requests.jsonl"
TOKEN = "s3cret-token"


def example_rows(data_source: str) -> list[dict[str, Any]]:
    """The example requests of ``data_source`` (lines that are not JSON are skipped: the file
    also holds deliberately malformed lines)."""
    rows = []
    for line in EXAMPLES.read_text(encoding="utf-8").splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue
        if row.get("data_source") == data_source:
            rows.append(row)
    return rows
