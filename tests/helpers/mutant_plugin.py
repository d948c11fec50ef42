"""The mutation harness's pytest plugin: ``pytest -p tests.helpers.mutant_plugin`` with
``RLVR_MUTANT=<name>`` runs every test with that mutant (``tests.helpers.mutants``).

In the test process the mutant is installed with ``monkeypatch`` (undone after each test). A
trainer process that a test starts through ``rlvr_world.apps.run.stack.trainer_spec`` (the
system guard's ``PipelineRun``, the video run) gets it too: its command line
``python -m rlvr_world.apps.cli train ...`` becomes ``python -m tests.helpers.mutants
rlvr_world.apps.cli train ...``, which installs the mutant and then runs the same module, with this
checkout on its ``PYTHONPATH``. Without ``RLVR_MUTANT`` the plugin does nothing. Only the harness
loads it; ``make test`` does not.
"""

from __future__ import annotations

import dataclasses
import importlib
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers.mutants import active, apply

REPO = Path(__file__).resolve().parents[2]
#: Modules that start the trainer with ``trainer_spec`` (each holds its own reference to it).
TRAINER_LAUNCHERS = (
    "rlvr_world.apps.run.stack",
    "rlvr_world.apps.pipeline.runner",
    "rlvr_world.apps.video.rl",
)
LAUNCHER = "tests.helpers.mutants"


def _through_launcher(spec: object) -> object:
    argv = list(spec.argv)  # type: ignore[attr-defined]
    if argv[1:2] != ["-m"]:
        raise AssertionError(f"the trainer's command is not `python -m MODULE ...`: {argv}")
    rest = os.environ.get("PYTHONPATH")
    path = os.pathsep.join([str(REPO), rest] if rest else [str(REPO)])
    env = {**spec.env, "PYTHONPATH": path}  # type: ignore[attr-defined]
    return dataclasses.replace(spec, argv=[argv[0], "-m", LAUNCHER, *argv[2:]], env=env)  # type: ignore[type-var]


@pytest.fixture(autouse=True)
def _mutant(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    name = active()
    if name is None:
        yield
        return
    apply(name, monkeypatch.setattr)
    launchers = [importlib.import_module(module) for module in TRAINER_LAUNCHERS]
    real = launchers[0].trainer_spec

    def trainer_spec(config: Path) -> object:
        return _through_launcher(real(config))

    holders = [
        module
        for module in list(sys.modules.values())
        if getattr(module, "__name__", "").startswith("rlvr_world.")
        and getattr(module, "trainer_spec", None) is real
    ]
    assert set(launchers) <= set(holders), "the trainer launchers no longer share trainer_spec"
    for module in holders:
        monkeypatch.setattr(module, "trainer_spec", trainer_spec)
    yield
