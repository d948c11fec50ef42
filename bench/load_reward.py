"""Bounded load test: N concurrent clients for a fixed time against one reward worker on loopback.

Starts ``python -m services.reward`` in its own process with one scoring process (``--workers``),
then runs ``--clients`` asyncio clients in this process, each sending single ``Score`` calls back
to back (a mix of golden text-game and web requests, or the examples without ``RLVR_SHARED_DIR``)
over gRPC or HTTP for ``--seconds``. Reports requests/s, p50/p99 latency and errors (target: 0
errors). Usage:
``python bench/load_reward.py --clients 32 --seconds 10 --transport grpc``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from reward_service import start_server, text_game_rows  # noqa: E402


def request_rows() -> list[dict[str, Any]]:
    rows, _ = text_game_rows()
    for line in (ROOT / "examples" / "score_requests.jsonl").read_text().splitlines():
        if '"web_agent"' in line:
            rows.append(json.loads(line))
    return rows


async def client_loop(
    send: Any, rows: list[dict[str, Any]], offset: int, stop_at: float, lat: list[float]
) -> int:
    errors = 0
    i = offset
    while time.perf_counter() < stop_at:
        t0 = time.perf_counter()
        try:
            await send(rows[i % len(rows)])
            lat.append(time.perf_counter() - t0)
        except Exception as exc:  # counted and reported, the load goes on
            errors += 1
            if errors == 1:
                sys.stderr.write(f"first error: {type(exc).__name__}: {exc}\n")
        i += 1
    return errors


async def run(address: str, url: str, args: argparse.Namespace) -> dict[str, float]:
    import httpx

    from rlvr_world.client import AsyncRewardClient, verl_request

    rows = request_rows()
    lat: list[float] = []
    async with AsyncRewardClient(address, timeout_s=30) as grpc_client:
        limits = httpx.Limits(max_connections=args.clients)
        async with httpx.AsyncClient(base_url=url, timeout=30, limits=limits) as http:

            async def send_grpc(row: dict[str, Any]) -> None:
                await grpc_client.score(verl_request(row))

            async def send_http(row: dict[str, Any]) -> None:
                (await http.post("/v1/score", json=row)).raise_for_status()

            send = send_grpc if args.transport == "grpc" else send_http
            await send(rows[0])
            start = time.perf_counter()
            stop_at = start + args.seconds
            errors = await asyncio.gather(
                *(client_loop(send, rows, k, stop_at, lat) for k in range(args.clients))
            )
            elapsed = time.perf_counter() - start
    q = statistics.quantiles(lat, n=100) if len(lat) > 1 else [0.0] * 99
    return {
        "requests": len(lat),
        "rps": len(lat) / elapsed,
        "p50_ms": q[49] * 1000,
        "p99_ms": q[98] * 1000,
        "errors": sum(errors),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--transport", choices=("grpc", "http"), default="grpc")
    args = parser.parse_args()
    proc, address, url = start_server(args.workers)
    try:
        out = asyncio.run(run(address, url, args))
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
    sys.stdout.write(
        f"{args.transport}: {args.clients} clients x {args.seconds:g}s, {args.workers} worker(s): "
        f"{out['requests']:.0f} requests, {out['rps']:.1f} req/s, p50 {out['p50_ms']:.1f} ms, "
        f"p99 {out['p99_ms']:.1f} ms, errors {out['errors']:.0f}\n"
    )
    return 0 if out["errors"] == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
