"""The import-linter contract of pyproject.toml: the real tree keeps it, and each kind of layer
violation, planted in a copy of the tree, breaks it with the offending import named.

Layers (docs/architecture.md#layers): the core ``rlvr_world`` (outside ``rlvr_world.apps``)
imports neither ``services``, ``trainer`` nor ``rlvr_world.apps``; services and the trainer
import neither each other nor the apps; no service imports another. Inside the apps, the run
types (pipeline, video, mpc) share ``apps.run`` and import neither each other nor the commands;
no two sibling modules or packages import each other in a cycle (``acyclic_siblings``).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("rlvr_world", "services", "trainer")


def lint_imports_bin() -> str:
    beside = Path(sys.executable).parent / "lint-imports"
    found = str(beside) if beside.exists() else shutil.which("lint-imports")
    assert found, "lint-imports is not installed (the dev extra pins import-linter)"
    return found


def lint_imports(root: Path) -> subprocess.CompletedProcess[str]:
    """``lint-imports`` over the packages under ``root`` (it puts its cwd first on sys.path)."""
    env = {**os.environ, "PYTHONPATH": str(root), "COLUMNS": "200", "NO_COLOR": "1"}
    return subprocess.run(
        [lint_imports_bin(), "--no-logo", "--no-cache"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A copy of the three packages and pyproject.toml (the contract) to plant violations in."""
    for name in PACKAGES:
        shutil.copytree(ROOT / name, tmp_path / name, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    return tmp_path


def test_the_repository_keeps_every_contract() -> None:
    result = lint_imports(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


#: (file planted, its source, the import lint-imports must name). Imports inside a function count
#: as much as those at the top (the core's heavy imports are lazy).
VIOLATIONS = {
    "core imports the trainer": (
        "rlvr_world/leak.py",
        "def f() -> None:\n    from trainer.checkpoint import latest_checkpoint\n",
        "rlvr_world.leak -> trainer.checkpoint",
    ),
    "core imports a service": (
        "rlvr_world/rewards/leak.py",
        "import services.reward.settings\n",
        "rlvr_world.rewards.leak -> services.reward.settings",
    ),
    "core imports the application layer": (
        "rlvr_world/video/leak.py",
        "from rlvr_world.apps.supervisor import Supervisor\n",
        "rlvr_world.video.leak -> rlvr_world.apps.supervisor",
    ),
    "a service imports the trainer": (
        "services/rollout/leak.py",
        "from trainer import config\n",
        "services.rollout.leak -> trainer",
    ),
    "the trainer imports a service": (
        "trainer/leak.py",
        "import services.rollout.settings\n",
        "trainer.leak -> services.rollout.settings",
    ),
    "a service imports the application layer": (
        "services/decoder/leak.py",
        "import rlvr_world.apps.cli\n",
        "services.decoder.leak -> rlvr_world.apps.cli",
    ),
    "a service imports another service": (
        "services/reward/leak.py",
        "import services.decoder.text\n",
        "services.reward.leak -> services.decoder.text",
    ),
    "the shared run code imports a run type": (
        "rlvr_world/apps/run/leak.py",
        "from rlvr_world.apps.video import pool\n",
        "rlvr_world.apps.run.leak -> rlvr_world.apps.video",
    ),
    "one run type imports another": (
        "rlvr_world/apps/pipeline/leak.py",
        "import rlvr_world.apps.mpc.run\n",
        "rlvr_world.apps.pipeline.leak -> rlvr_world.apps.mpc.run",
    ),
    "a cycle between two core packages (the wire imports the rewards)": (
        "rlvr_world/rewards/leak.py",
        "import rlvr_world.wire.services\n",
        "No cycles are allowed in rlvr_world.",
    ),
}


@pytest.mark.parametrize("case", sorted(VIOLATIONS))
def test_a_layer_violation_breaks_the_contract_and_names_the_import(tree: Path, case: str) -> None:
    path, source, named = VIOLATIONS[case]
    (tree / path).write_text(source)
    result = lint_imports(tree)
    assert result.returncode != 0, f"{case}: contract kept\n{result.stdout}"
    assert "BROKEN" in result.stdout
    assert named in result.stdout, result.stdout


def test_the_copy_without_a_planted_import_keeps_the_contract(tree: Path) -> None:
    result = lint_imports(tree)
    assert result.returncode == 0, result.stdout + result.stderr
