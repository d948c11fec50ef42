"""``apps.run.grpo.await_ready``: the readiness check of a trainer launched beside the feed, against
real processes standing in for the trainer (no model: only the start-up contract is tested)."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest

from rlvr_world.apps.run.grpo import await_ready
from rlvr_world.apps.supervisor import LogLine, ProcessFailed, ProcessSpec, Supervisor

pytestmark = pytest.mark.integration


def _spec(code: str) -> ProcessSpec:
    return ProcessSpec("trainer", [sys.executable, "-c", code], ready=LogLine(r"trainer at step"))


def test_a_trainer_that_logs_its_start_is_ready(tmp_path: Path) -> None:
    code = "import time; print('trainer at step 0', flush=True); time.sleep(60)"
    with Supervisor(tmp_path) as sup:
        sup.launch(_spec(code))
        asyncio.run(await_ready(sup, "trainer", 120.0))
        assert sup.alive("trainer") and sup.get("trainer").ready_at is not None


def test_a_trainer_that_exits_first_raises_with_its_log(tmp_path: Path) -> None:
    code = "print('config error: model.path missing', flush=True); raise SystemExit(2)"
    with Supervisor(tmp_path) as sup:
        sup.launch(_spec(code))
        with pytest.raises(ProcessFailed, match=r"exited with code 2(.|\n)*model.path missing"):
            asyncio.run(await_ready(sup, "trainer", 120.0))


def test_a_trainer_not_ready_in_time_is_stopped(tmp_path: Path) -> None:
    with Supervisor(tmp_path) as sup:
        sup.launch(_spec("import time; time.sleep(60)"))
        with pytest.raises(ProcessFailed, match="trainer not ready after 0s"):
            asyncio.run(await_ready(sup, "trainer", 0.3))
        assert not sup.alive("trainer")  # stopped, so a feed waiting on it ends
