"""The fuzz targets (``tests.fuzz.targets``) under atheris for a few seconds each, from the seed
corpus in the repository: no crash, no hang. ``make fuzz`` runs them longer."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.chaos.support import REPO, report

pytestmark = pytest.mark.slow
SECONDS = 5


@pytest.mark.parametrize("target", ["rawbatch", "text_game", "web"])
def test_fuzz_target_finds_no_crash(target: str, tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "tests.fuzz.run", target, "--seconds", str(SECONDS), "--out",
           str(tmp_path)]  # fmt: skip
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    crashes = sorted(p.name for p in (tmp_path / "artifacts").iterdir())
    executed = re.search(r"stat::number_of_executed_units: (\d+)", done.stderr)
    report(f"fuzz {target}", seconds=SECONDS, executions=int(executed[1]) if executed else 0,
           crashes=len(crashes))  # fmt: skip
    assert done.returncode == 0 and not crashes, (crashes, done.stderr[-3000:])
    assert executed is not None and int(executed[1]) > 0, done.stderr[-3000:]
