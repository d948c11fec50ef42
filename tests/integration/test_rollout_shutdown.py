"""``python -m services.rollout`` as a real process: port logged, SIGTERM drains in-flight calls.

The generation is held at a gate (``tests.helpers.gated_rollout``) until the signal has been sent
and the drain has begun, so the call is in flight when the signal comes however fast the machine
samples; then it is let through and must be answered in full.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from rlvr_world.v1 import rollout_pb2, rollout_pb2_grpc
from tests.helpers.gated_rollout import GATE_REACHED
from tests.helpers.tiny_lm import build_tiny_lm
from tests.helpers.waiting import Lines, wait_until

pytestmark = pytest.mark.integration
READY = r"rollout service ready: gRPC ([\d.]+):(\d+)"
ROOT = Path(__file__).resolve().parents[2]


def _not_serving(channel: grpc.Channel) -> bool:
    stub = health_pb2_grpc.HealthStub(channel)
    status = stub.Check(health_pb2.HealthCheckRequest(), timeout=30).status
    return bool(status == health_pb2.HealthCheckResponse.NOT_SERVING)


@pytest.mark.slow  # a fresh interpreter imports torch and transformers (~8 s here)
def test_sigterm_lets_the_in_flight_generation_finish(tmp_path: Path) -> None:
    model = build_tiny_lm(tmp_path / "model")
    env = {**os.environ, "RLVR_ROLLOUT_GRACE_S": "120", "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "tests.helpers.gated_rollout", "--model", str(model)]
    proc = subprocess.Popen(
        [*cmd, "--grpc-port", "0"],
        cwd=ROOT,
        env=env,
        stdin=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdin is not None and proc.stderr is not None
    log = Lines(proc.stderr)
    try:
        ready = log.wait_for(READY)
        with grpc.insecure_channel(f"{ready[1]}:{ready[2]}") as channel:
            stub = rollout_pb2_grpc.RolloutServiceStub(channel)  # type: ignore[no-untyped-call]
            params = rollout_pb2.SamplingParams(n=4, max_tokens=48, ignore_eos=True, seed=1)
            req = rollout_pb2.GenerateRequest(text="the door", sampling=params)
            done: list[rollout_pb2.GenerateResponse] = []
            call = threading.Thread(target=lambda: done.append(stub.Generate(req, timeout=240)))
            call.start()
            log.wait_for(GATE_REACHED)  # the call is in the engine, held there
            proc.send_signal(signal.SIGTERM)
            wait_until(lambda: _not_serving(channel), "health NOT_SERVING after SIGTERM")
            with pytest.raises(grpc.RpcError) as late:
                stub.Generate(req, timeout=60)
            assert not done  # still held: the drain waits for it
            proc.stdin.write("go\n")  # open the gate
            proc.stdin.flush()
            call.join(timeout=240)
        assert proc.wait(timeout=240) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)
        proc.stdin.close()
    assert late.value.code() == grpc.StatusCode.UNAVAILABLE
    assert "draining" in str(late.value.details())
    assert len(done) == 1
    assert [len(s.token_ids) for s in done[0].samples] == [48] * 4
    text = log.wait_closed()
    assert text.count(GATE_REACHED) == 1  # the late call never reached the engine
    assert "signal received; shutting down" in text and "stopped" in text
