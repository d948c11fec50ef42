"""The folder with ``golden/`` and ``data/`` (``RLVR_SHARED_DIR``), and a JSON Lines reader.

Without ``RLVR_SHARED_DIR`` the tests that read it skip, with the reason. With it set, whatever
they need must be there: a missing folder or file fails the test with its name (``shared_dir``,
``shared_file``, ``shared_files``), so a renamed or deleted golden file cannot quietly turn parity
tests into skips.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

SHARED_ENV = "RLVR_SHARED_DIR"


def shared_dir() -> Path:
    """The folder with golden/ and data/ (CI sets RLVR_SHARED_DIR): skip with a reason when the
    variable is unset or empty; fail when it names something that is not a folder."""
    value = os.environ.get(SHARED_ENV)
    if not value:
        pytest.skip(f"{SHARED_ENV} is not set: golden files and real data samples are unavailable")
    path = Path(value)
    if not path.is_dir():
        pytest.fail(f"{SHARED_ENV}={value} is not a directory", pytrace=False)
    return path


def shared_file(*parts: str) -> Path:
    """``$RLVR_SHARED_DIR/<parts...>``: skip when the variable is unset (``shared_dir``), fail
    naming the file when it is set and the file is not there."""
    root = shared_dir()
    path = root.joinpath(*parts)
    if not path.is_file():
        pytest.fail(
            f"{SHARED_ENV} is set but {'/'.join(parts)} is missing from it ({path})", pytrace=False
        )
    return path


def shared_files(pattern: str, *parts: str, need: int = 1) -> list[Path]:
    """The first ``need`` files matching ``pattern`` in ``$RLVR_SHARED_DIR/<parts...>``, sorted:
    skip when the variable is unset, fail naming the folder and the pattern when it is set and
    fewer than ``need`` match."""
    folder = shared_dir().joinpath(*parts)
    found = sorted(folder.glob(pattern))[:need]
    if len(found) < need:
        where = "/".join((*parts, pattern))
        pytest.fail(
            f"{SHARED_ENV} is set but has {len(found)} file(s) {where}, this test needs {need} "
            f"({folder})",
            pytrace=False,
        )
    return found


def read_jsonl(path: Path) -> Iterator[dict[str, Any]]:
    """The JSON object of every non-blank line of ``path``."""
    with path.open(encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                yield json.loads(line)
