"""CPU time the reward service's main process (the grpc.aio event loop) spends per text request.

Starts the real service (``python -m services.reward``, its own process, gRPC on loopback, a pool of
``--workers`` processes), sends ``ScoreBatch`` calls of the golden text-game requests with two calls
always in flight (as ``bench/reward_service.py`` does), and reads the main process's own user +
system CPU time from ``/proc/<pid>/stat`` (its pool processes are children and not counted) before
and after. CPU time, not wall throughput: it stays meaningful on a machine shared with other jobs.
It also reports the pool processes' CPU per request and the in-process ``score_mapping`` loop's,
and from them the throughput ratio ``bench/reward_service.py`` would see on that many free cores.

``--profile FILE`` runs the service under cProfile, timed by the main thread's CPU clock, and
prints the top functions (``--top``); the stats stay in FILE for ``python -m pstats``.

Usage: ``python bench/reward_main_cpu.py [--batches 200] [--workers 2] [--profile out.prof]``.
"""

from __future__ import annotations

import argparse
import os
import pstats
import signal
import subprocess
import sys
import time
from collections import deque
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.reward_service import start_server, text_game_rows  # noqa: E402

CLK_TCK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """utime + stime of one process (all its threads, not its children), in seconds."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def children_cpu_seconds(pid: int) -> float:
    """utime + stime of the live child processes of ``pid`` (the scoring pool), in seconds."""
    total = 0.0
    for task in Path(f"/proc/{pid}/task").iterdir():
        for child in (task / "children").read_text().split():
            total += cpu_seconds(int(child))
    return total


def inprocess_cpu_us(seconds: float) -> float:
    """CPU us per request of the in-process ``score_mapping`` loop (bench/reward_service.py's
    baseline), by this process's CPU clock."""
    from rlvr_world.rewards.dispatch import score_mapping

    rows, _ = text_game_rows()
    for row in rows:
        score_mapping(row)
    done, t0 = 0, time.process_time()
    while time.process_time() - t0 < seconds:
        for row in rows:
            score_mapping(row)
        done += len(rows)
    return (time.process_time() - t0) / done * 1e6


#: Runs the service under cProfile with the main thread's CPU time as its clock (wall time would
#: count the time other processes hold the cores), writing the stats when the service drains.
PROFILED = """
import cProfile, runpy, sys, time
prof = cProfile.Profile(time.thread_time)
sys.argv = ["services.reward", *sys.argv[2:]]
prof.enable()
try:
    runpy.run_module("services.reward", run_name="__main__", alter_sys=True)
except SystemExit:
    pass
finally:
    prof.disable()
    prof.dump_stats(OUT)
"""


def start(workers: int, profile: str | None) -> tuple[subprocess.Popen[str], str]:
    entry = ["-c", PROFILED.replace("OUT", repr(profile)), "--"] if profile else None
    proc, address, _ = start_server(workers, entry)
    return proc, address


def measure(workers: int, batches: int, profile: str | None) -> tuple[float, float, float, int]:
    """(main-process and pool CPU us per request, wall seconds, requests) over ``batches``
    calls."""
    import grpc

    from rlvr_world.client import verl_request
    from rlvr_world.v1 import reward_pb2, reward_pb2_grpc

    rows, _ = text_game_rows()
    batch = reward_pb2.ScoreBatchRequest(requests=[verl_request(r) for r in rows])
    proc, address = start(workers, profile)
    try:
        with grpc.insecure_channel(address) as ch:
            stub = reward_pb2_grpc.RewardServiceStub(ch)  # type: ignore[no-untyped-call]
            for _ in range(5):  # warm-up: first calls build caches, lazy imports
                stub.ScoreBatch(batch, timeout=120)
            pool0 = children_cpu_seconds(proc.pid)
            cpu0, t0 = cpu_seconds(proc.pid), time.perf_counter()
            inflight = deque(stub.ScoreBatch.future(batch, timeout=120) for _ in range(2))
            done = 0
            for i in range(batches):
                resp = inflight.popleft().result()
                done += len(resp.responses)
                if i + 2 < batches:
                    inflight.append(stub.ScoreBatch.future(batch, timeout=120))
            cpu1, t1 = cpu_seconds(proc.pid), time.perf_counter()
            pool1 = children_cpu_seconds(proc.pid)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
    return (cpu1 - cpu0) / done * 1e6, (pool1 - pool0) / done * 1e6, t1 - t0, done


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=200, help="ScoreBatch calls measured")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=1, help="fresh service per repeat")
    parser.add_argument("--profile", help="run the service under cProfile, write stats here")
    parser.add_argument("--top", type=int, default=30, help="profile lines printed")
    parser.add_argument("--baseline-s", type=float, default=3.0, help="in-process loop CPU time")
    args = parser.parse_args()
    out = sys.stdout.write
    base = inprocess_cpu_us(args.baseline_s)
    out(f"in-process score_mapping loop: {base:7.1f} us CPU/request\n")
    for _ in range(args.repeat):
        main_us, pool_us, wall, n = measure(args.workers, args.batches, args.profile)
        cores = min(args.workers, os.cpu_count() or 1)
        out(
            f"main-process CPU: {main_us:7.1f} us/request, pool processes {pool_us:7.1f} "
            f"(over {n} requests, {wall:.1f}s wall, {n / wall:.0f} req/s; "
            f"workers={args.workers}{', profiled' if args.profile else ''})\n"
            f"  CPU-bound ratio on {cores} free cores: {cores * base / (main_us + pool_us):.2f}x "
            f"the in-process loop (pool alone: {args.workers * base / pool_us:.2f}x)\n"
        )
    if args.profile:
        pstats.Stats(args.profile, stream=sys.stdout).sort_stats("tottime").print_stats(args.top)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
