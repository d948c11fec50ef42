"""``python -m services.reward`` as a real process: ports logged, SIGTERM drains in-flight calls."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import httpx
import numpy as np
import pytest

from rlvr_world.client import frames_request
from rlvr_world.v1 import common_pb2, reward_pb2, reward_pb2_grpc

pytestmark = pytest.mark.integration
READY = re.compile(r"reward service ready: gRPC ([\d.]+):(\d+), HTTP (http://[\d.:]+)")
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def process() -> Iterator[tuple[subprocess.Popen[str], str, str]]:
    env = {**os.environ, "RLVR_REWARD_WORKERS": "1", "RLVR_REWARD_GRACE_S": "20"}
    cmd = [sys.executable, "-m", "services.reward", "--grpc-port", "0", "--http-port", "0"]
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    deadline = time.monotonic() + 60
    match = None
    lines = []
    while match is None and time.monotonic() < deadline:
        line = proc.stderr.readline()
        if not line:
            break
        lines.append(line)
        match = READY.search(line)
    if match is None:
        proc.kill()
        pytest.fail("service did not start:\n" + "".join(lines))
    try:
        yield proc, f"{match[1]}:{match[2]}", match[3]
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=10)


def wait_in_flight(url: str) -> None:
    """Until the server counts one gRPC call in flight (the request fully received)."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        text = httpx.get(f"{url}/metrics").text
        if 'rlvr_reward_in_flight_requests{transport="grpc"} 1.0' in text:
            return
        time.sleep(0.02)
    pytest.fail("the batch never reached the server")


def test_sigterm_lets_in_flight_calls_finish(
    process: tuple[subprocess.Popen[str], str, str],
) -> None:
    proc, address, url = process
    assert httpx.get(f"{url}/readyz").status_code == 200
    # A slow call: SSIM on 4 x 8 frames of 128x128, well over the poll interval of work.
    rng = np.random.default_rng(0)
    pred = rng.integers(0, 256, (8, 128, 128, 3), dtype=np.uint8)
    req = frames_request(pred, pred[::-1].copy(), weights={"ssim": 1.0, "l1": 1.0})
    results: list[reward_pb2.ScoreResponse] = []
    with grpc.insecure_channel(address) as channel:
        stub = reward_pb2_grpc.RewardServiceStub(channel)
        batch = reward_pb2.ScoreBatchRequest(requests=[req] * 4)
        call = threading.Thread(
            target=lambda: results.extend(stub.ScoreBatch(batch, timeout=60).responses)
        )
        call.start()
        wait_in_flight(url)
        proc.send_signal(signal.SIGTERM)
        call.join(timeout=60)
    assert proc.wait(timeout=30) == 0
    assert len(results) == 4
    assert all(r.status == common_pb2.REWARD_STATUS_OK for r in results)
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{url}/healthz", timeout=2)
