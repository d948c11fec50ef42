"""scripts/compile_bytecode.py: bytecode for every file that compiles, the others counted, bad
arguments refused with exit code 2."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "compile_bytecode.py"


def test_compiles_what_it_can_and_counts_the_rest(tmp_path: Path) -> None:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "good.py").write_text("X = 1\n")
    (tmp_path / "pkg" / "later.py").write_text("def f[T](x: T) -> T: return x\n")  # 3.12 syntax
    (tmp_path / "pkg" / "broken.py").write_text("def (:\n")
    out = subprocess.run(
        [sys.executable, str(SCRIPT), str(tmp_path)], capture_output=True, text=True, check=True
    )
    assert importlib.util.cache_from_source(str(tmp_path / "pkg" / "good.py"))
    assert Path(importlib.util.cache_from_source(str(tmp_path / "pkg" / "good.py"))).is_file()
    assert not Path(importlib.util.cache_from_source(str(tmp_path / "pkg" / "broken.py"))).exists()
    expected_failed = 2 if sys.version_info < (3, 12) else 1
    assert f"({expected_failed} files not Python" in out.stdout


def test_bad_arguments_exit_2_with_the_reason(tmp_path: Path) -> None:
    none = subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, text=True)
    assert none.returncode == 2 and "compile_bytecode.py [--site] [DIR ...]" in none.stderr
    missing = subprocess.run(
        [sys.executable, str(SCRIPT), str(tmp_path / "nope")], capture_output=True, text=True
    )
    assert missing.returncode == 2 and f"not a directory: {tmp_path / 'nope'}" in missing.stderr
