"""``python -m services.reward`` as a real process: ports logged, SIGTERM drains in-flight calls.

The drain is proven by the clocks: the service logs ``draining`` (with its time) when SIGTERM
reaches it, and the batch's answer must come well after that line (``DRAINED_FOR``), so the batch
was still being scored when the drain began; a batch that finished before the signal fails."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
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
BATCH = 16
#: How long after the drain began the batch must be answered. The log's clock has millisecond
#: resolution: a batch answered just before SIGTERM reads at most 1 ms after the drain (checked
#: by sending the signal after the answer); one still scoring when it arrived, 200 ms and more.
DRAINED_FOR = timedelta(milliseconds=50)


@dataclass
class Service:
    """The started process, its addresses, and the stderr lines read after it was ready."""

    proc: subprocess.Popen[str]
    address: str
    url: str
    lines: list[str] = field(default_factory=list)
    reader: threading.Thread | None = None

    def read_rest(self) -> None:
        """Collect the rest of stderr until the process closes it (in a thread)."""
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.lines.append(line)


def logged_at(line: str) -> datetime:
    """The time of a log line (``%(asctime)s``: local time, milliseconds)."""
    return datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f")


@pytest.fixture
def process() -> Iterator[Service]:
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
    service = Service(proc, f"{match[1]}:{match[2]}", match[3])
    service.reader = threading.Thread(target=service.read_rest, daemon=True)
    service.reader.start()
    try:
        yield service
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=10)
        service.reader.join(timeout=10)


def wait_in_flight(url: str) -> None:
    """Until the server counts one gRPC call in flight (the request fully received)."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        text = httpx.get(f"{url}/metrics").text
        if 'rlvr_reward_in_flight_requests{transport="grpc"} 1.0' in text:
            return
        time.sleep(0.02)
    pytest.fail("the batch never reached the server")


def test_sigterm_lets_in_flight_calls_finish(process: Service) -> None:
    proc, address, url = process.proc, process.address, process.url
    assert httpx.get(f"{url}/readyz").status_code == 200
    # A slow call: SSIM on 16 x 8 frames of 128x128 (about a second on one loaded core), well
    # over the poll interval of wait_in_flight.
    rng = np.random.default_rng(0)
    pred = rng.integers(0, 256, (8, 128, 128, 3), dtype=np.uint8)
    req = frames_request(pred, pred[::-1].copy(), weights={"ssim": 1.0, "l1": 1.0})
    results: list[reward_pb2.ScoreResponse] = []
    answered: list[datetime] = []

    def score() -> None:
        results.extend(stub.ScoreBatch(batch, timeout=60).responses)
        answered.append(datetime.now())

    with grpc.insecure_channel(address) as channel:
        stub = reward_pb2_grpc.RewardServiceStub(channel)
        batch = reward_pb2.ScoreBatchRequest(requests=[req] * BATCH)
        call = threading.Thread(target=score)
        call.start()
        wait_in_flight(url)
        proc.send_signal(signal.SIGTERM)
        call.join(timeout=60)
    assert proc.wait(timeout=30) == 0
    assert process.reader is not None
    process.reader.join(timeout=10)
    assert len(results) == BATCH
    assert all(r.status == common_pb2.REWARD_STATUS_OK for r in results)
    draining = [line for line in process.lines if "draining" in line]
    assert draining, f"the service never logged its drain: {process.lines}"
    assert answered and answered[0] - logged_at(draining[0]) > DRAINED_FOR, (
        f"the batch was answered at {answered} and the drain began at {draining[0].strip()}: "
        "it finished before SIGTERM, so no drain was tested"
    )
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{url}/healthz", timeout=2)
