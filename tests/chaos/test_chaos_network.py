"""A reward worker cut off the network and restored, under sustained load.

The test makes its own host: a network namespace joined to this one by a veth pair, with a reward
replica inside it bound to the namespace's address (beyond loopback, so it needs the token). A
second replica runs on loopback; one client holds both addresses. The namespace's end of the veth
pair is taken down: the host keeps its route, so packets to the worker vanish without an error
(a partition, not a refused connection) and calls to it time out and are retried on the other
replica. Then the link comes back up. Must hold: no call failed or lost; the worker serves again.
Needs root and iproute2 (``ip netns``); everything it makes is removed at the end.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest

from rlvr_world.apps.supervisor import GrpcHealth, ProcessSpec, Supervisor, pick_free_port
from rlvr_world.client import RetryPolicy, RewardClient, verl_request
from rlvr_world.scaffold.client_auth import ensure_local_token
from rlvr_world.v1 import reward_pb2_grpc
from tests.chaos.support import REPO, TRUTH, RewardLoad, report, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.chaos]
ROW = {"data_source": "web_agent", "solution_str": TRUTH, "ground_truth": TRUTH}


@dataclass(frozen=True)
class Netns:
    """A namespace ``name`` reachable at ``inner`` through the veth pair ``host_link`` /
    ``inner_link`` (the latter inside the namespace)."""

    name: str
    host_link: str
    inner_link: str
    outer: str
    inner: str

    def link(self, up: bool) -> None:
        state = "up" if up else "down"
        _ip("netns", "exec", self.name, "ip", "link", "set", self.inner_link, state)


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True)


@pytest.fixture
def netns() -> Iterator[Netns]:
    if os.geteuid() != 0 or shutil.which("ip") is None:
        pytest.skip("needs root and iproute2 to make a network namespace")
    tag = os.getpid() % 100_000
    subnet = f"10.213.{os.getpid() % 250}"
    ns = Netns(f"rlvr-chaos-{tag}", f"rvh{tag}", f"rvn{tag}", f"{subnet}.1", f"{subnet}.2")
    peer = ns.inner_link
    _ip("netns", "add", ns.name)
    try:
        _ip("link", "add", ns.host_link, "type", "veth", "peer", "name", peer)
        _ip("link", "set", peer, "netns", ns.name)
        _ip("addr", "add", f"{ns.outer}/30", "dev", ns.host_link)
        _ip("link", "set", ns.host_link, "up")
        for args in (("addr", "add", f"{ns.inner}/30", "dev", peer), ("link", "set", peer, "up"),
                     ("link", "set", "lo", "up")):  # fmt: skip
            _ip("netns", "exec", ns.name, "ip", *args)
        yield ns
    finally:
        subprocess.run(["ip", "link", "del", ns.host_link], capture_output=True)
        subprocess.run(["ip", "netns", "del", ns.name], capture_output=True)


def _spec(name: str, host: str, prefix: list[str]) -> ProcessSpec:
    port, http_port = pick_free_port("127.0.0.1"), pick_free_port("127.0.0.1")
    argv = [*prefix, sys.executable, "-m", "services.reward", "--host", host, "--grpc-port",
            str(port), "--http-port", str(http_port), "--workers", "1"]  # fmt: skip
    env = {"PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    return ProcessSpec(name, argv, env=env, ready=GrpcHealth(f"{host}:{port}"))


def _answers(address: str, token: str) -> bool:
    """One call straight to ``address`` (no retry, short deadline) succeeds."""
    with grpc.insecure_channel(address) as channel:
        stub = reward_pb2_grpc.RewardServiceStub(channel)  # type: ignore[no-untyped-call]
        try:
            stub.Score(verl_request(ROW), metadata=(("authorization", f"Bearer {token}"),),
                       timeout=1.0)  # fmt: skip
        except grpc.RpcError:
            return False
    return True


def test_a_worker_cut_off_and_restored_loses_no_call(
    netns: Netns, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("RLVR_API_TOKEN", raising=False)
    token = ensure_local_token()
    local = _spec("reward-local", "127.0.0.1", [])
    remote = _spec("reward-netns", netns.inner, ["ip", "netns", "exec", netns.name])
    addresses = [s.ready.address for s in (local, remote)]  # type: ignore[union-attr]
    with Supervisor(tmp_path) as sup:
        for spec in (local, remote):
            sup.start(spec, timeout_s=180)
        retry = RetryPolicy(attempts=10, initial_s=0.05, max_s=1.0)
        with RewardClient(addresses, retry=retry, timeout_s=3.0) as client:
            load = RewardLoad(client).start()
            try:
                load.wait_answers(20)
                cut = time.monotonic()
                netns.link(up=False)
                noticed = wait_until(lambda: not _answers(addresses[1], token), 60, "the cut")
                load.wait_answers(20, timeout_s=180)  # the load goes on without the worker
                restored = time.monotonic()
                netns.link(up=True)
                back = wait_until(lambda: _answers(addresses[1], token), 120, "the worker",
                                  poll_s=0.05)  # fmt: skip
                load.wait_answers(20)
            finally:
                netns.link(up=True)
                stats = load.stop()
        assert sup.alive("reward-netns") and sup.alive("reward-local")
    report(
        "reward worker cut off the network (netns) and restored",
        requests_sent=stats.sent,
        failed=stats.failed,
        retried=stats.retried,
        lost=stats.lost,
        cut_s=round(restored - cut, 2),
        cut_noticed_after_s=round(noticed - cut, 2),
        recovery_s=round(back - restored, 2),
    )
    assert stats.failed == 0, stats.errors[:5]
    assert stats.died == 0  # no scoring process was killed
    assert stats.lost == 0
