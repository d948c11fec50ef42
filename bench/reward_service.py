"""Reward service overheads, each against a baseline measured in the same run.

1. gRPC ``ScoreBatch`` throughput on golden text-game requests, service (``python -m
   services.reward``, its own process) with 1 scoring process, vs the in-process
   ``score_mapping`` loop (target: within 20%, ratio >= 0.8).
2. The same with a pool of 2 processes (target: >= 1.7x the in-process loop; needs 2 free cores),
   and two in-process loops side by side in two processes: the ceiling on this machine.
3. ST-LPIPS (VGG) at 64x64: pairs/s through the service's micro-batcher (64 concurrent callers,
   one pair each) and one batched call, vs one call per pair (target >= 3x); once with 64
   distinct targets, once GRPO-shaped (G=16 predictions per target, whose backbone features a
   batch computes once), each against the same scorer called once per pair on the same pairs.
4. p50/p99 latency of single ``Score`` calls (one web request) over HTTP and gRPC.

Requests come from ``$RLVR_SHARED_DIR/golden`` (else ``examples/score_requests.jsonl``, said so).
Usage: ``python bench/reward_service.py [--seconds 2] [--rounds 8]``. Other processes on the
machine skew every number; the ratios are what to compare.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def text_game_rows() -> tuple[list[dict[str, Any]], str]:
    shared = os.environ.get("RLVR_SHARED_DIR")
    path = Path(shared or "") / "golden" / "golden_text_game.jsonl"
    rows = []
    if shared and path.exists():
        for line in path.read_text(encoding="utf-8").splitlines():
            case = json.loads(line)
            extra = case.get("extra_info")
            rows.append(
                {
                    "data_source": "llm_simulator",
                    "solution_str": case["response"],
                    "ground_truth": case["ground_truth"],
                    "extra_info": ast.literal_eval(extra) if isinstance(extra, str) else extra,
                }
            )
        return rows, str(path)
    for line in (ROOT / "examples" / "score_requests.jsonl").read_text().splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue
        if row.get("data_source") == "llm_simulator":
            rows.append(row)
    return rows, "examples/score_requests.jsonl (RLVR_SHARED_DIR not set)"


READY = re.compile(r"reward service ready: gRPC ([\d.]+):(\d+), HTTP (http://[\d.:]+)")


def start_server(
    workers: int, entry: list[str] | None = None
) -> tuple[subprocess.Popen[str], str, str]:
    """The service in its own process (the load generator must not share its GIL).

    ``entry``: the interpreter arguments before the service's own (default ``-m services.reward``).
    """
    cmd = [sys.executable, *(entry or ["-m", "services.reward"]), "--grpc-port", "0",
           "--http-port", "0", "--workers", str(workers)]  # fmt: skip
    proc = subprocess.Popen(cmd, cwd=ROOT, env=os.environ, stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    for line in proc.stderr:
        match = READY.search(line)
        if match:
            threading.Thread(target=proc.stderr.read, daemon=True).start()  # keep draining
            return proc, f"{match[1]}:{match[2]}", match[3]
    raise RuntimeError(f"service did not start (exit {proc.wait()})")


def rate(fn: Callable[[], int], seconds: float) -> float:
    """Items/s of ``fn`` (returns the items it did), repeated for ``seconds`` after one warm-up."""
    fn()
    items, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        items += fn()
    return items / (time.perf_counter() - start)


def inprocess_rate(rows: list[dict[str, Any]], seconds: float) -> float:
    from rlvr_world.rewards.dispatch import score_mapping

    def loop() -> int:
        for row in rows:
            score_mapping(row)
        return len(rows)

    return rate(loop, seconds)


class BatchLoad:
    """A running service (own process, ``workers`` scoring processes) and a gRPC channel to it;
    ``rate(seconds)`` is ScoreBatch req/s with two calls always in flight: each answer sends the
    next call, so the pool never waits on the wire (the trainer's pattern; not two calls, wait for
    both, repeat). Between ``rate`` calls the service is idle (its processes wait on sockets)."""

    def __init__(self, rows: list[dict[str, Any]], workers: int) -> None:
        import grpc

        from rlvr_world.client import verl_request
        from rlvr_world.v1 import reward_pb2, reward_pb2_grpc

        self.batch = reward_pb2.ScoreBatchRequest(requests=[verl_request(r) for r in rows])
        self.proc, address, _ = start_server(workers)
        self.channel = grpc.insecure_channel(address)
        self.stub = reward_pb2_grpc.RewardServiceStub(self.channel)  # type: ignore[no-untyped-call]

    def rate(self, seconds: float) -> float:
        inflight = deque(self.stub.ScoreBatch.future(self.batch, timeout=120) for _ in range(2))

        def next_answer() -> int:
            answered = len(inflight.popleft().result().responses)
            inflight.append(self.stub.ScoreBatch.future(self.batch, timeout=120))
            return answered

        try:
            return rate(next_answer, seconds)
        finally:
            for call in inflight:
                call.result()

    def close(self) -> None:
        self.channel.close()
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(timeout=30)


def interleaved_ratios(
    rows: list[dict[str, Any]], workers: int, pairs: int, seconds: float
) -> tuple[list[float], list[float], list[float]]:
    """(ratios, service req/s, in-process req/s): one service stays up while ``pairs`` service
    slices of ``seconds`` alternate with in-process slices (one more than service slices); each
    service slice is divided by the mean of the in-process slices right before and after it.
    CPU speed on a shared VM drifts by tens of percent within a minute, so a baseline measured
    seconds away from the service is not the service's baseline."""
    load = BatchLoad(rows, workers)
    try:
        load.rate(seconds)  # warm-up: lazy imports, caches in the pool processes
        base = [inprocess_rate(rows, seconds)]
        served = []
        for _ in range(pairs):
            served.append(load.rate(seconds))
            base.append(inprocess_rate(rows, seconds))
    finally:
        load.close()
    ratios = [v / ((a + b) / 2) for v, a, b in zip(served, base, base[1:], strict=False)]
    return ratios, served, base


def _loop_in_child(rows: list[dict[str, Any]], seconds: float, out: Any) -> None:
    out.put(inprocess_rate(rows, seconds))


def side_by_side_ratio(rows: list[dict[str, Any]], seconds: float) -> float:
    """Two in-process loops in two processes at once, req/s summed, over one loop alone (measured
    before and after): the most any 2-process service can reach on this machine, with nothing else
    running (no client, no main process)."""
    from multiprocessing import get_context

    ctx = get_context("spawn")
    queue = ctx.Queue()

    def run(n: int) -> float:
        procs = [ctx.Process(target=_loop_in_child, args=(rows, seconds, queue)) for _ in range(n)]
        for proc in procs:
            proc.start()
        total = sum(queue.get(timeout=seconds + 120) for _ in procs)
        for proc in procs:
            proc.join()
        return float(total)

    one_before, two, one_after = run(1), run(2), run(1)
    return two / ((one_before + one_after) / 2)


#: GRPO group size of the paper's video runs (configs/video/rt1_paper.yaml): predictions per target.
GROUP = 16


def perceptual_rates(seconds: float, group: int = 1) -> tuple[float, float, float]:
    """(per-pair, micro-batched with 64 callers, one batched call) pairs/s, ST-LPIPS VGG 64x64.

    ``group`` 1: 64 distinct targets. ``group`` G: 64 / G targets, each the target of G
    predictions (a GRPO group). The per-pair baseline is the same scorer on the same pairs, one
    call per pair.
    """
    import torch

    from rlvr_world.rewards.perceptual import make_perceptual
    from services.reward.batching import BatchedPerceptual

    torch.set_num_threads(1)
    scorer = make_perceptual("stlpips", "vgg", "cpu", batch_size=64)
    rng = np.random.default_rng(0)
    a = rng.random((64, 64, 64, 3), dtype=np.float32)
    b = np.repeat(rng.random((64 // group, 64, 64, 3), dtype=np.float32), group, axis=0)

    def per_pair() -> int:
        for i in range(64):
            scorer(a[i : i + 1], b[i : i + 1])
        return 64

    batcher = BatchedPerceptual(scorer, max_batch=64, max_wait_s=0.005)
    pool = ThreadPoolExecutor(64)

    def micro() -> int:
        list(pool.map(lambda i: batcher(a[i : i + 1], b[i : i + 1]), range(64)))
        return 64

    def batched() -> int:
        scorer(a, b)
        return 64

    out = rate(per_pair, seconds), rate(micro, seconds), rate(batched, seconds)
    batcher.close()
    pool.shutdown()
    return out


def latencies(n: int) -> dict[str, tuple[float, float]]:
    """p50/p99 ms of single Score calls, one web request, over HTTP and gRPC (1 worker)."""
    import grpc
    import httpx

    from rlvr_world.client import verl_request
    from rlvr_world.v1 import reward_pb2_grpc
    from services.reward.settings import RewardSettings
    from services.reward.testing import ServiceThread

    rows = [
        json.loads(x)
        for x in (ROOT / "examples" / "score_requests.jsonl").read_text().splitlines()
        if '"web_agent"' in x
    ]
    row = rows[0]
    req = verl_request(row)
    out = {}
    settings = RewardSettings(grpc_port=0, http_port=0, workers=1)
    with ServiceThread(settings) as svc:
        with grpc.insecure_channel(svc.grpc_address) as ch:
            stub = reward_pb2_grpc.RewardServiceStub(ch)
            out["grpc"] = _percentiles(lambda: stub.Score(req, timeout=10), n)
        with httpx.Client(base_url=svc.http_url) as http:
            out["http"] = _percentiles(
                lambda: http.post("/v1/score", json=row).raise_for_status(), n
            )
    return out


def _percentiles(call: Callable[[], object], n: int) -> tuple[float, float]:
    for _ in range(20):
        call()
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        call()
        times.append((time.perf_counter() - t0) * 1000)
    q = statistics.quantiles(times, n=100)
    return q[49], q[98]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=2.0, help="per measurement (slice)")
    parser.add_argument(
        "--rounds",
        type=int,
        default=8,
        help="text-game service slices, each between two "
        "in-process slices (median of their ratios)",
    )
    parser.add_argument("--latency-calls", type=int, default=400)
    args = parser.parse_args()
    rows, source = text_game_rows()
    out = sys.stdout.write
    out(f"requests: {len(rows)} text-game rows from {source}; cpu_count={os.cpu_count()}\n")
    for w, target in ((1, "0.80"), (2, "1.70")):
        ratios, served, base = interleaved_ratios(rows, w, args.rounds, args.seconds)
        label = f"gRPC ScoreBatch, {w} process{'es' if w > 1 else ''}"
        out(f"{label:<30}: ratio {statistics.median(ratios):.2f} (target >= {target}), median of")
        out(f" {len(ratios)} slices: {', '.join(f'{v:.2f}' for v in ratios)}\n")
        out(f"  service {min(served):.0f}-{max(served):.0f} req/s, in-process loop ")
        out(f"{min(base):.0f}-{max(base):.0f} req/s, interleaved\n")
    ceiling = side_by_side_ratio(rows, args.seconds)
    out(f"two in-process loops side by side: {ceiling:.2f}x one (a 2-process service's ceiling)\n")
    for group, what in [(1, "64 distinct targets"), (GROUP, f"GRPO, G={GROUP} per target")]:
        per, micro, batched = perceptual_rates(args.seconds, group)
        out(f"ST-LPIPS vgg 64x64, {what}\n")
        out(f"  one call per pair           : {per:8.1f} pairs/s (baseline)\n")
        out(f"  micro-batched, 64 callers   : {micro:8.1f} pairs/s  ratio {micro / per:.2f}")
        out(" (target >= 3)\n")
        out(f"  one call of 64 pairs        : {batched:8.1f} pairs/s  ratio {batched / per:.2f}\n")
    for transport, (p50, p99) in latencies(args.latency_calls).items():
        out(f"single Score over {transport:<5}: p50 {p50:6.2f} ms  p99 {p99:6.2f} ms\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
