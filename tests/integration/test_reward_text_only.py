"""The text and web reward worker (image ``rlvr-world/reward-text``: no torch, perceptual models
or scipy) as a real service process, here with those packages made unimportable in it and in
its scoring processes (a ``sitecustomize`` on ``PYTHONPATH`` refuses to import them).

It must start, score text and web as the full service does (``soft_item_f1`` included: items
paired without scipy), answer a video request with status ``error`` naming the full image, and
never import what it lacks.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from rlvr_world.apps.supervisor import pick_free_port
from rlvr_world.client import RewardClient
from rlvr_world.rewards.dispatch import score_mapping
from rlvr_world.rewards.types import Status
from tests.helpers.reward import example_rows

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
#: What deploy/docker/requirements.py's reward-text role leaves out, as import names.
MISSING = ("torch", "torchvision", "lpips", "stlpips_pytorch", "scipy", "PIL", "safetensors")
BLOCKER = f"""
import importlib.abc, sys

class _Missing(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {MISSING!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}} (not in this image)")
        return None

sys.meta_path.insert(0, _Missing())
"""


@pytest.fixture(scope="module")
def text_only(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    site = tmp_path_factory.mktemp("site")
    (site / "sitecustomize.py").write_text(BLOCKER)
    grpc_port = pick_free_port()
    port = ["--grpc-port", str(grpc_port)]
    env = {k: v for k, v in os.environ.items() if not k.startswith("RLVR_")}
    env.update(PYTHONPATH=os.pathsep.join([str(site), str(ROOT)]), OMP_NUM_THREADS="1")
    log = (tmp_path_factory.mktemp("log") / "reward.log").open("w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "services.reward", "--workers", "1", "--http-port", "0", *port],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    address = f"127.0.0.1:{grpc_port}"
    try:
        deadline = time.monotonic() + 120
        with RewardClient(address, timeout_s=5) as probe:
            while True:
                assert proc.poll() is None, Path(log.name).read_text()[-3000:]
                try:
                    probe.score_verl(example_rows("web_agent")[0])
                    break
                except ConnectionError:
                    assert time.monotonic() < deadline, "the service never answered"
                    time.sleep(0.2)
        yield address
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        log.close()


def test_text_and_web_score_as_the_full_service_does(text_only: str) -> None:
    """Every example row (good answers, format failures, bad input) gets exactly the result the
    core gives in this process, which has scipy and torch."""
    rows = example_rows("llm_simulator") + example_rows("web_agent")
    assert any(r["data_source"] == "web_agent" for r in rows)
    with RewardClient(text_only, timeout_s=60) as client:
        got = client.score_verl_batch(rows)
    want = [score_mapping(r) for r in rows]
    assert [r.to_dict() for r in got] == [w.to_dict() for w in want]
    assert any("soft_item_f1" in r.metrics for r in got)


def test_a_video_request_gets_an_error_naming_the_full_image(text_only: str) -> None:
    frames = np.zeros((2, 16, 16, 3), np.uint8)
    with RewardClient(text_only, timeout_s=60) as client:
        result = client.score_frames(frames, frames)
    assert result.status is Status.ERROR
    assert "needs torch" in result.message and "rlvr-world/reward" in result.message
