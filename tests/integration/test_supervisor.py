"""Supervisor against real processes: a reward service, an early exit, a stubborn process."""

from __future__ import annotations

import sys
import time
import urllib.request
from pathlib import Path

import pytest

from rlvr_world.apps.supervisor import (
    GrpcHealth,
    HttpReady,
    LogLine,
    ProcessFailed,
    ProcessSpec,
    Supervisor,
    pick_free_port,
)

pytestmark = pytest.mark.integration


def _reward_spec(name: str = "reward") -> tuple[ProcessSpec, int, int]:
    grpc_port, http_port = pick_free_port(), pick_free_port()
    argv = [sys.executable, "-m", "services.reward", "--grpc-port", str(grpc_port)]
    argv += ["--http-port", str(http_port), "--workers", "1", "--grace-s", "2"]
    spec = ProcessSpec(
        name, argv, env={"OMP_NUM_THREADS": "1"}, ready=GrpcHealth(f"127.0.0.1:{grpc_port}")
    )
    return spec, grpc_port, http_port


def test_reward_service_starts_serves_and_drains_to_exit_code_0(tmp_path: Path) -> None:
    spec, _, http_port = _reward_spec()
    with Supervisor(tmp_path) as sup:
        managed = sup.start(spec, timeout_s=120)
        assert sup.alive("reward")
        assert HttpReady(f"http://127.0.0.1:{http_port}/readyz").ready(managed.log_path)
        with urllib.request.urlopen(f"http://127.0.0.1:{http_port}/metrics", timeout=5) as r:
            assert b"rlvr_reward_requests_total" in r.read()
        assert sup.stop("reward") == 0
        assert not sup.alive("reward")
    assert "reward service ready" in (tmp_path / "logs" / "reward.log").read_text()


def test_process_exiting_before_ready_raises_with_its_log_tail(tmp_path: Path) -> None:
    code = "import sys; print('bad config: field grpc_port'); sys.exit(3)"
    spec = ProcessSpec("broken", [sys.executable, "-c", code], ready=LogLine("never"))
    with Supervisor(tmp_path) as sup, pytest.raises(ProcessFailed) as info:
        sup.start(spec, timeout_s=30)
    message = str(info.value)
    assert "exited with code 3" in message
    assert "bad config: field grpc_port" in message


def test_not_ready_in_time_raises_and_stops_the_process(tmp_path: Path) -> None:
    spec = ProcessSpec("slow", [sys.executable, "-c", "import time; time.sleep(60)"])
    spec.ready = LogLine("^ready$")
    with Supervisor(tmp_path) as sup:
        with pytest.raises(ProcessFailed, match="not ready after"):
            sup.start(spec, timeout_s=0.5)
        assert not sup.alive("slow")


def test_start_many_starts_at_once_and_one_failure_stops_them_all(tmp_path: Path) -> None:
    """Each process prints ``ready`` only after seeing the other one's pid file: started one
    after the other, neither could be ready; together both are. When one of a start exits early,
    the error names it and every process of that start is stopped."""
    wait_for = (
        "import os, sys, time, pathlib; d = pathlib.Path(sys.argv[1]); "
        "(d / sys.argv[2]).write_text(str(os.getpid())); "
        "[time.sleep(0.05) for _ in range(400) if not (d / sys.argv[3]).exists()]; "
        "print('ready' if (d / sys.argv[3]).exists() else 'alone', flush=True); time.sleep(60)"
    )

    def spec(name: str, other: str) -> ProcessSpec:
        argv = [sys.executable, "-c", wait_for, str(tmp_path), name, other]
        return ProcessSpec(name, argv, ready=LogLine("^ready$"))

    with Supervisor(tmp_path) as sup:
        a, b = sup.start_many([spec("a", "b"), spec("b", "a")], timeout_s=60)
        assert a.alive() and b.alive() and sup.names() == ["a", "b"]
        with pytest.raises(ValueError, match="already running"):
            sup.start_many([spec("a", "b")])
        with pytest.raises(ValueError, match="duplicate process names"):
            sup.start_many([spec("c", "d"), spec("c", "d")])
        exits = ProcessSpec("exits", [sys.executable, "-c", "raise SystemExit(4)"])
        exits.ready = LogLine("never")
        waits = ProcessSpec("waits", [sys.executable, "-c", "import time; time.sleep(60)"])
        waits.ready = LogLine("never")
        with pytest.raises(ProcessFailed, match="exits exited with code 4"):
            sup.start_many([waits, exits], timeout_s=60)
        assert not sup.alive("waits") and not sup.alive("exits")
        assert sup.alive("a") and sup.alive("b")  # an earlier start is left alone


def test_stop_escalates_to_sigkill_and_kill_is_immediate(tmp_path: Path) -> None:
    ignore_term = (
        "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
        "print('ready', flush=True); time.sleep(60)"
    )
    with Supervisor(tmp_path) as sup:
        sup.start(
            ProcessSpec("stubborn", [sys.executable, "-c", ignore_term], ready=LogLine("^ready"))
        )
        t0 = time.monotonic()
        assert sup.stop("stubborn", timeout_s=0.5) == -9
        assert time.monotonic() - t0 < 50  # killed, not waited for: it would sleep 60 s
        sup.start(
            ProcessSpec("victim", [sys.executable, "-c", ignore_term], ready=LogLine("^ready"))
        )
        assert sup.kill("victim") == -9
        assert not sup.alive("victim")
        restarted = sup.restart("victim")
        assert restarted.alive()
    assert not restarted.alive()  # stop_all on exit


def test_pick_free_port_is_bindable_unique_and_outside_the_ephemeral_range() -> None:
    """Ports come from below the kernel's ephemeral range (where no outgoing connection or
    ``bind(0)`` elsewhere can take them before the service binds), are never handed out twice in
    one process (a CI run once gave two services of one stack the same port: "Address already in
    use"), and are free when returned."""
    import socket

    from rlvr_world.apps.supervisor import PICK_LOW, PICK_MIN_SPAN, ephemeral_range

    low = ephemeral_range()[0]
    ports = [pick_free_port() for _ in range(300)]
    assert len(set(ports)) == len(ports)
    if low - PICK_LOW >= PICK_MIN_SPAN:
        assert all(PICK_LOW <= p < low for p in ports)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", ports[-1]))


def test_ephemeral_range_reads_the_kernel_file_or_falls_back(tmp_path: Path) -> None:
    from rlvr_world.apps.supervisor import ephemeral_range

    f = tmp_path / "range"
    f.write_text("40000\t50000\n")
    assert ephemeral_range(str(f)) == (40000, 50000)
    f.write_text("garbage")
    assert ephemeral_range(str(f)) == (32768, 60999)
    assert ephemeral_range(str(tmp_path / "missing")) == (32768, 60999)


def test_launch_returns_at_once_and_probe_tracks_readiness(tmp_path: Path) -> None:
    """``launch`` does not wait: the process prints ``ready`` only once a file appears, which this
    test writes after ``launch`` returned. ``probe`` is False until then, True after (with the
    readiness time recorded); a process that prints its line and exits counts as ready, one that
    exits without it raises with its code and log."""
    gate = tmp_path / "go"
    waits = (
        "import sys, time, pathlib; g = pathlib.Path(sys.argv[1]); "
        "[time.sleep(0.05) for _ in range(2400) if not g.exists()]; "
        "print('ready', flush=True); time.sleep(60)"
    )
    with Supervisor(tmp_path) as sup:
        managed = sup.launch(
            ProcessSpec("gated", [sys.executable, "-c", waits, str(gate)], ready=LogLine("^ready"))
        )
        assert managed.alive() and not sup.probe("gated") and managed.ready_at is None
        gate.write_text("")
        deadline = time.monotonic() + 60
        while not sup.probe("gated"):
            assert time.monotonic() < deadline, "never ready"
            time.sleep(0.05)
        assert managed.ready_at is not None and managed.ready_at >= managed.started_at
        assert sup.pids() == {"gated": managed.pid}
        with pytest.raises(ValueError, match="already running"):
            sup.launch(managed.spec)

        quick = "print('ready', flush=True)"
        done = sup.launch(
            ProcessSpec("quick", [sys.executable, "-c", quick], ready=LogLine("^ready"))
        )
        done.popen.wait(timeout=60)
        assert sup.probe("quick")  # its line was written before it exited: it was ready
        assert "quick" not in sup.pids()  # reaped: its pid may belong to another process now

        sup.launch(
            ProcessSpec("dies", [sys.executable, "-c", "print('boom'); raise SystemExit(5)"])
        )
        sup.get("dies").spec.ready = LogLine("never")
        sup.get("dies").popen.wait(timeout=60)
        with pytest.raises(ProcessFailed, match=r"dies exited with code 5(.|\n)*boom"):
            sup.probe("dies")
        assert "not ready after 3s" in str(sup.not_ready("gated", 3.0))
