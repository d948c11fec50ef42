"""What a learning guard measured, for the mutation harness (``scripts/mutants.py``).

``record(guard, **values)`` appends one JSON line (the guard, ``$RLVR_MUTANT`` and the values) to
the file named by ``RLVR_GUARD_REPORT``; without that variable it does nothing. A guard records
before it asserts, so a guard that fails still says what it reached.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

REPORT_ENV = "RLVR_GUARD_REPORT"


def record(guard: str, **values: Any) -> None:
    """One line ``{"guard", "mutant", **values}`` in ``$RLVR_GUARD_REPORT`` (if set)."""
    path = os.environ.get(REPORT_ENV)
    if not path:
        return
    line = {"guard": guard, "mutant": os.environ.get("RLVR_MUTANT") or None, **values}
    with Path(path).open("a", encoding="utf-8") as fh:
        fh.write(json.dumps(line) + "\n")
