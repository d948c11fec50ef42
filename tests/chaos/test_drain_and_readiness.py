"""Issue 18 items 2 and 3: SIGTERM answers every call in flight and refuses new ones with a
retryable UNAVAILABLE; readiness and gRPC health report a degraded scoring pool.

Linux only (the scoring process is found in ``/proc`` and held with SIGSTOP)."""

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
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from rlvr_world.client import verl_request
from rlvr_world.v1 import reward_pb2, reward_pb2_grpc
from services.reward.settings import RewardSettings
from services.reward.testing import ServiceThread
from tests.chaos.support import REPO

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.chaos]
READY = re.compile(r"reward service ready: gRPC ([\d.]+):(\d+), HTTP (http://[\d.:]+)")
IN_FLIGHT = 8
TRUTH = "New items:\nNone\n\nDeleted items:\n[3] button 'Go'\n\nUpdated items:\nNone"
ROW = {"data_source": "web_agent", "solution_str": TRUTH, "ground_truth": TRUTH}


@pytest.fixture
def process() -> Iterator[tuple[subprocess.Popen[str], str, str]]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RLVR_")}
    env.update(PYTHONPATH=str(REPO), RLVR_REWARD_VIDEO_THREADS="1", RLVR_REWARD_GRACE_S="120")
    cmd = [sys.executable, "-m", "services.reward", "--grpc-port", "0", "--http-port", "0",
           "--workers", "1"]  # fmt: skip
    proc = subprocess.Popen(cmd, env=env, stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    lines: list[str] = []
    match = None
    deadline = time.monotonic() + 120
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
        proc.wait(timeout=30)


def _gauge(url: str, name: str) -> float:
    text = httpx.get(f"{url}/metrics", timeout=10).text
    found = re.search(rf"^{re.escape(name)} (\S+)$", text, re.MULTILINE)
    return float(found[1]) if found else 0.0


def _health(address: str) -> int:
    with grpc.insecure_channel(address) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        return int(stub.Check(health_pb2.HealthCheckRequest(), timeout=10).status)


def scoring_processes(pid: int) -> list[int]:
    """The scoring processes of the service ``pid`` (its ``multiprocessing`` spawn children; not
    its resource tracker), from ``/proc``."""
    children = [c for task in Path(f"/proc/{pid}/task").iterdir() for c in
                (task / "children").read_text().split()]  # fmt: skip
    return [int(c) for c in children if b"spawn_main" in Path(f"/proc/{c}/cmdline").read_bytes()]


def test_sigterm_answers_every_call_in_flight_and_refuses_new_ones(
    process: tuple[subprocess.Popen[str], str, str],
) -> None:
    """The order is made certain, not raced: the scoring process is stopped (SIGSTOP) before the
    calls are sent, so all ``IN_FLIGHT`` calls are held in the pool while SIGTERM arrives and the
    late call is refused; only then does the scoring process continue and answer them."""
    proc, address, url = process
    (scorer,) = scoring_processes(proc.pid)
    outcomes: list[str] = []
    os.kill(scorer, signal.SIGSTOP)
    try:
        with grpc.insecure_channel(address) as channel:
            stub = reward_pb2_grpc.RewardServiceStub(channel)  # type: ignore[no-untyped-call]

            def one(i: int) -> None:
                try:
                    result = stub.Score(verl_request(ROW, f"held-{i}"), timeout=300)
                    outcomes.append("OK" if result.reward == 1.0 else f"reward {result.reward}")
                except grpc.RpcError as exc:
                    outcomes.append(exc.code().name)

            calls = [threading.Thread(target=one, args=(i,)) for i in range(IN_FLIGHT)]
            for call in calls:
                call.start()
            gauge = 'rlvr_reward_in_flight_requests{transport="grpc"}'
            deadline = time.monotonic() + 120
            while _gauge(url, gauge) < IN_FLIGHT:  # every call received, held in the pool
                assert time.monotonic() < deadline, "the calls never reached the server"
                time.sleep(0.02)
            proc.send_signal(signal.SIGTERM)
            while _health(address) != health_pb2.HealthCheckResponse.NOT_SERVING:
                time.sleep(0.01)
            with pytest.raises(grpc.RpcError) as late:
                stub.Score(verl_request(ROW, "late"), timeout=60)
            assert outcomes == [], "a held call finished before the late one was refused"
            os.kill(scorer, signal.SIGCONT)
            for call in calls:
                call.join(timeout=300)
    finally:
        os.kill(scorer, signal.SIGCONT)  # never leave it stopped (a second SIGCONT is harmless)
    assert late.value.code() == grpc.StatusCode.UNAVAILABLE
    assert "draining" in str(late.value.details())
    assert outcomes == ["OK"] * IN_FLIGHT
    assert proc.wait(timeout=120) == 0


def test_readiness_and_health_follow_a_degraded_pool() -> None:
    settings = RewardSettings(grpc_port=0, http_port=0, workers=1)
    with ServiceThread(settings) as svc:
        pool = svc.service.engine._pool
        assert pool is not None
        assert httpx.get(f"{svc.http_url}/readyz", timeout=10).json() == {
            "status": "ready",
            "detail": "1 of 1 scoring processes up",
        }
        pool._procs[0].proc.kill()
        seen: set[tuple[int, int]] = set()
        deadline = time.monotonic() + 120
        while (200, health_pb2.HealthCheckResponse.SERVING) not in seen or len(seen) < 2:
            assert time.monotonic() < deadline, seen
            ready = httpx.get(f"{svc.http_url}/readyz", timeout=10)
            state = (ready.status_code, _health(svc.grpc_address))
            if ready.status_code == 503:
                assert ready.json() == {"detail": "degraded: 0 of 1 scoring processes up"}
            seen.add(state)
            time.sleep(0.01)
        assert (503, health_pb2.HealthCheckResponse.NOT_SERVING) in seen
        with grpc.insecure_channel(svc.grpc_address) as channel:
            stub = reward_pb2_grpc.RewardServiceStub(channel)  # type: ignore[no-untyped-call]
            batch = reward_pb2.ScoreBatchRequest(requests=[verl_request(ROW, "after")])
            assert stub.ScoreBatch(batch, timeout=60).responses[0].reward == 1.0
