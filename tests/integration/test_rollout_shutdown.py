"""``python -m services.rollout`` as a real process: port logged, SIGTERM drains in-flight calls."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import grpc
import pytest

from rlvr_world.v1 import rollout_pb2, rollout_pb2_grpc
from tests.helpers.tiny_lm import build_tiny_lm

pytestmark = pytest.mark.integration
READY = re.compile(r"rollout service ready: gRPC ([\d.]+):(\d+)")
ROOT = Path(__file__).resolve().parents[2]


def start(model: Path) -> tuple[subprocess.Popen[str], str]:
    env = {**os.environ, "RLVR_ROLLOUT_GRACE_S": "30", "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "services.rollout", "--model", str(model), "--grpc-port", "0"]
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    deadline, lines = time.monotonic() + 120, []
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        if not line:
            break
        lines.append(line)
        if match := READY.search(line):
            return proc, f"{match[1]}:{match[2]}"
    proc.kill()
    proc.wait(timeout=10)
    pytest.fail("service did not start:\n" + "".join(lines))


@pytest.mark.slow  # a fresh interpreter imports torch and transformers (~8 s here)
def test_sigterm_lets_the_in_flight_generation_finish(tmp_path: Path) -> None:
    proc, address = start(build_tiny_lm(tmp_path / "model"))
    try:
        with grpc.insecure_channel(address) as channel:
            stub = rollout_pb2_grpc.RolloutServiceStub(channel)  # type: ignore[no-untyped-call]
            params = rollout_pb2.SamplingParams(n=16, max_tokens=400, ignore_eos=True, seed=1)
            req = rollout_pb2.GenerateRequest(text="the door", sampling=params)
            done: list[rollout_pb2.GenerateResponse] = []
            finished_at: list[float] = []

            def call_once() -> None:
                done.append(stub.Generate(req, timeout=120))
                finished_at.append(time.monotonic())

            call = threading.Thread(target=call_once)
            call.start()
            time.sleep(0.5)
            signalled_at = time.monotonic()
            proc.send_signal(signal.SIGTERM)
            call.join(timeout=120)
        assert proc.wait(timeout=60) == 0
        assert finished_at[0] > signalled_at  # the call was in flight when the signal came
        assert len(done) == 1
        assert [len(s.token_ids) for s in done[0].samples] == [400] * 16
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
    assert proc.stderr is not None
    log = proc.stderr.read()
    assert "signal received; shutting down" in log and "stopped" in log
