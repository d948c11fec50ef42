"""The deployment test's client, run *inside* a container on the compose network.

``python /driver/driver.py COMMAND ...`` (image: the trainer image plus curl, see
``driver.Dockerfile``). Every command prints one JSON object as its last stdout line, which the
host side (``tests/deploy/stack.py``) reads back from the container log; it exits non-zero when a
check fails, with the reason on stderr.

Commands:
  model      build the tiny policy (tokenizer + random Llama) into a folder the stack mounts
  queries    the README's HTTP query (curl, with the bearer token) on every reward replica and
             its gRPC batch query (``rlvr-world reward score --server dns:///reward:50051``),
             counted per replica
  auth       calls without the token, or with a wrong one, refused by every replica (HTTP 401,
             gRPC UNAUTHENTICATED); metrics and health open (``auth_check.py``)
  load       Score calls through ``dns:///reward:50051`` for a fixed time; ok / failed / req/s
  targets    wait until Prometheus reports the expected targets up; list them
  dashboard  every Grafana panel query evaluated on the live Prometheus
  probe      write or verify marker entries in Redis (persistence across a container restart);
             ``refused``: a client without the password must be refused
  grpo       the orchestrator: prompts -> rollout -> decoder -> reward -> Redis, until the trainer
             container has published the wanted version; then account for every pushed group
  start      ``rlvr-world model start`` of a run config (the compose-only job's start model)
  account    the books of the job the orchestrator container ran: every pushed group trained
             once, dropped or queued; its summary.json

Traffic goes only to service names of the compose network. Every loop is bounded in time. The
stack's token comes from ``RLVR_API_TOKEN`` (``podman run --env``, never argv); every client here
(curl, the SDK, the CLI, the orchestrator) sends it. Redis's password comes from
``RLVR_REDIS_PASSWORD`` the same way.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

WEB_REQUEST = {
    "data_source": "web_agent",
    "solution_str": "New items:\nNone",
    "ground_truth": "New items:\nNone",
}
#: docs/guide.md: ``curl -s localhost:8000/v1/score -H 'content-type: application/json'
#: -H "authorization: Bearer $RLVR_API_TOKEN" -d '{...}'``.
CURL_JSON = ("-H", "content-type: application/json")
REWARD = "dns:///reward:50051"
PROMETHEUS = "http://prometheus:9090"
REDIS_URL = "redis://redis:6379/0"


def emit(result: dict[str, Any]) -> None:
    print(json.dumps(result, sort_keys=True), flush=True)


def fail(message: str) -> int:
    print(f"driver: {message}", file=sys.stderr, flush=True)
    return 1


def get_json(url: str, timeout_s: float = 10.0) -> Any:
    with urllib.request.urlopen(url, timeout=timeout_s) as reply:
        return json.loads(reply.read())


def replica_requests(host: str) -> float:
    """Sum of ``rlvr_reward_requests_total`` on one replica's /metrics (open: no token)."""
    from auth_check import metric_sum  # beside this file

    return metric_sum(host, "rlvr_reward_requests_total")


# ---------------------------------------------------------------------------------------- model
def cmd_model(args: argparse.Namespace) -> int:
    from grpo_job import kitchen_items  # beside this file

    from rlvr_world.tiny_model import TinyLMConfig, build_tiny_lm

    train, test = kitchen_items()
    corpus = [i.prompt for i in train + test] + [i.target for i in train + test]
    cfg = TinyLMConfig(vocab_size=512, hidden_size=32, num_layers=1, num_heads=2, max_positions=640)
    out = build_tiny_lm(Path(args.out), corpus, cfg)
    emit({"model": str(out), "files": sorted(p.name for p in out.iterdir())})
    return 0


# -------------------------------------------------------------------------------------- queries
def cmd_queries(args: argparse.Namespace) -> int:
    from auth_check import score_file, stack_token  # beside this file

    hosts: list[str] = args.hosts
    before = {h: replica_requests(h) for h in hosts}
    http: dict[str, Any] = {}
    body = json.dumps(WEB_REQUEST)
    bearer = ("-H", f"authorization: Bearer {stack_token()}")
    for host in [*hosts, "reward"]:  # the guide's curl, on each replica and on the service name
        done = subprocess.run(
            [
                "curl",
                "-s",
                "--max-time",
                "30",
                f"{host}:8000/v1/score",
                *CURL_JSON,
                *bearer,
                "-d",
                body,
            ],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        answer = json.loads(done.stdout) if done.returncode == 0 and done.stdout else {}
        http[host] = answer
        if answer.get("status") != "ok" or answer.get("reward") != 1.0:
            return fail(f"curl {host}:8000/v1/score: rc {done.returncode}, {done.stdout!r}")
    # The README's gRPC query: a JSON Lines file through the scaled service; one malformed line.
    lines = [dict(WEB_REQUEST, solution_str=f"New items:\nitem {i}") for i in range(args.n)]
    lines.append({"data_source": "web_agent", "solution_str": 3})
    src, dst = Path("/tmp/requests.jsonl"), Path("/tmp/scores.jsonl")
    src.write_text("".join(json.dumps(x) + "\n" for x in lines))
    done = score_file(src, dst, timeout_s=300)
    scores = [json.loads(x) for x in dst.read_text().splitlines()] if dst.exists() else []
    statuses = [s["status"] for s in scores]
    grpc = {
        "rc": done.returncode,
        "lines": len(scores),
        "ok": statuses.count("ok"),
        "last": scores[-1] if scores else None,
        "summary": done.stderr.strip()[-300:],
    }
    if len(scores) != len(lines) or statuses[:-1] != ["ok"] * args.n:
        return fail(f"reward score --server {REWARD}: {grpc}")
    if statuses[-1] != "invalid_input":
        return fail(f"the malformed line got {scores[-1]}, not invalid_input")
    after = {h: replica_requests(h) for h in hosts}
    served = {h: after[h] - before[h] for h in hosts}
    emit({"http": http, "grpc": grpc, "requests_per_replica": served})
    if args.all_replicas and min(served.values()) < 1:
        return fail(f"a replica served no request: {served}")
    return 0


# ----------------------------------------------------------------------------------------- auth
def cmd_auth(args: argparse.Namespace) -> int:
    from auth_check import run_auth  # beside this file

    return run_auth(args.hosts, emit, fail)


# ----------------------------------------------------------------------------------------- load
async def _load(seconds: float, concurrency: int) -> dict[str, Any]:
    from rlvr_world.client import AsyncRewardClient, verl_request

    request = verl_request(WEB_REQUEST)
    ok = failed = 0
    errors: dict[str, int] = {}
    latencies: list[float] = []
    per_second: dict[int, int] = {}
    t0 = time.monotonic()
    deadline = t0 + seconds

    async def worker(client: AsyncRewardClient) -> None:
        nonlocal ok, failed
        while time.monotonic() < deadline:
            start = time.monotonic()
            try:
                result = await client.score(request)
            except Exception as exc:  # every failure is counted and named, none is hidden
                failed += 1
                name = f"{type(exc).__name__}: {str(exc)[:160]}"
                errors[name] = errors.get(name, 0) + 1
                continue
            if result.status.value != "ok":
                failed += 1
                errors[f"status {result.status.value}"] = errors.get(result.status.value, 0) + 1
                continue
            ok += 1
            latencies.append(time.monotonic() - start)
            second = int(time.monotonic() - t0)
            per_second[second] = per_second.get(second, 0) + 1

    async with AsyncRewardClient(REWARD, timeout_s=30.0) as client:
        await asyncio.gather(*(worker(client) for _ in range(concurrency)))
    wall = time.monotonic() - t0
    latencies.sort()

    def p(q: float) -> float:
        return round(latencies[min(len(latencies) - 1, int(q * len(latencies)))] * 1e3, 1)

    return {
        "seconds": round(wall, 1),
        "concurrency": concurrency,
        "ok": ok,
        "failed": failed,
        "errors": errors,
        "req_per_s": round(ok / wall, 1),
        "p50_ms": p(0.5) if latencies else None,
        "p99_ms": p(0.99) if latencies else None,
        "min_per_second": min(per_second.values()) if per_second else 0,
        "gaps_s": [s for s in range(int(wall)) if s not in per_second],
    }


def cmd_load(args: argparse.Namespace) -> int:
    before = {h: replica_requests(h) for h in args.hosts}
    result = asyncio.run(_load(args.seconds, args.concurrency))
    result["requests_per_replica"] = {
        h: replica_requests(h) - before[h] for h in args.hosts if _alive(h)
    }
    emit(result)
    return 0 if result["failed"] == 0 and result["ok"] > 0 else 1


def _alive(host: str) -> bool:
    try:
        replica_requests(host)
    except OSError:
        return False
    return True


# -------------------------------------------------------------------------------------- targets
def cmd_targets(args: argparse.Namespace) -> int:
    want: dict[str, int] = {k: int(v) for k, _, v in (x.partition("=") for x in args.expect)}
    deadline = time.monotonic() + args.timeout_s
    while True:
        data = get_json(f"{PROMETHEUS}/api/v1/targets?state=active")
        targets = [
            {
                "job": t["labels"]["job"],
                "instance": t["labels"]["instance"],
                "health": t["health"],
                "error": t.get("lastError", ""),
            }
            for t in data["data"]["activeTargets"]
        ]
        up = {
            job: sum(1 for t in targets if t["job"] == job and t["health"] == "up") for job in want
        }
        if up == want or time.monotonic() > deadline:
            break
        time.sleep(2)
    emit({"targets": targets, "up": up, "want": want})
    return 0 if up == want else fail(f"targets up {up}, wanted {want}")


# ------------------------------------------------------------------------------------ dashboard
def declared_families(url: str, attempts: int = 3) -> set[str]:
    """The metric names a /metrics page declares (``# TYPE`` lines, with the ``_total`` and
    ``_bucket`` sample names); empty when nothing answers at ``url`` after ``attempts`` tries
    (20 s each, 2 s apart)."""
    for attempt in range(attempts):
        try:
            with urllib.request.urlopen(url, timeout=20) as reply:
                text = reply.read().decode()
        except OSError:
            if attempt + 1 < attempts:
                time.sleep(2)
            continue
        families = [ln.split()[2] for ln in text.splitlines() if ln.startswith("# TYPE ")]
        return {n for f in families for n in (f, f"{f}_total", f"{f}_bucket")}
    return set()


def cmd_dashboard(args: argparse.Namespace) -> int:
    dashboard = json.loads(Path(args.dashboard).read_text())
    panels: list[dict[str, Any]] = []
    bad = 0
    for panel in dashboard["panels"]:
        for target in panel.get("targets", []):
            expr = target["expr"]
            for var, value in (
                ("$__rate_interval", "1m"),
                ("$__interval", "30s"),
                ("$__range", "5m"),
            ):
                expr = expr.replace(var, value)
            query = urllib.parse.urlencode({"query": expr})
            try:
                answer = get_json(f"{PROMETHEUS}/api/v1/query?{query}")
            except OSError as exc:  # urllib's HTTPError (400: bad PromQL) is an OSError
                answer = {"status": "error", "error": str(exc)}
            series = len(answer.get("data", {}).get("result", []))
            panels.append(
                {
                    "panel": panel.get("title"),
                    "expr": expr,
                    "status": answer["status"],
                    "series": series,
                }
            )
            bad += answer["status"] != "success"
    # Every metric a panel names must be exported by a container: scraped already, or declared
    # (``# TYPE``) on a target's /metrics (a labelled counter has no sample before its first
    # event, e.g. staleness drops). Each target is read here, whatever Prometheus's last scrape
    # of it said: right after a GRPO job the busy rollout and trainer can miss a scrape (found
    # 2026-12-05: both "down" for a moment, their families unknown). A target that no container
    # serves (the orchestrator, which this stack does not run) is left out.
    used = set(re.findall(r"\brlvr_[a-z_]+", " ".join(p["expr"] for p in panels)))
    known = set(get_json(f"{PROMETHEUS}/api/v1/label/__name__/values")["data"])
    for target in get_json(f"{PROMETHEUS}/api/v1/targets?state=active")["data"]["activeTargets"]:
        if target["labels"]["job"] != "prometheus":
            known |= declared_families(target["scrapeUrl"])
    unknown = sorted(used - known)
    emit(
        {
            "panels": panels,
            "queries": len(panels),
            "errors": bad,
            "with_data": sum(1 for p in panels if p["series"]),
            "metrics_used": len(used),
            "metrics_never_scraped": unknown,
        }
    )
    if unknown:
        return fail(f"dashboard names metrics no container exports: {unknown}")
    return 0 if bad == 0 else fail(f"{bad} dashboard queries failed")


# ---------------------------------------------------------------------------------------- probe
def cmd_probe(args: argparse.Namespace) -> int:
    import redis

    from rlvr_world.queue.server import redis_credentials

    if args.action == "refused":  # no password: the server must refuse, not serve
        try:
            redis.Redis.from_url(REDIS_URL).ping()
        except redis.AuthenticationError as exc:
            emit({"refused": True, "reason": str(exc)[:200]})
            return 0
        return fail("redis answered a client that sent no password")
    client = redis.Redis.from_url(REDIS_URL, **redis_credentials(REDIS_URL))
    stream = "rlvr:deploy-test:probe"
    if args.action == "write":
        ids = [client.xadd(stream, {"n": str(i)}).decode() for i in range(args.n)]
        emit({"written": len(ids), "length": client.xlen(stream)})
        return 0
    deadline = time.monotonic() + args.timeout_s
    while True:
        try:
            length = int(client.xlen(stream))
            break
        except redis.ConnectionError:
            if time.monotonic() > deadline:
                return fail("redis did not answer after the restart")
            time.sleep(0.5)
    emit({"length": length, "want": args.n})
    return 0 if length == args.n else fail(f"probe stream has {length} entries, wanted {args.n}")


# --------------------------------------------------------------------------- the compose-only job
def cmd_start(args: argparse.Namespace) -> int:
    """``rlvr-world model start CONFIG OUT``: the start model of a run config."""
    done = subprocess.run(
        [sys.executable, "-m", "rlvr_world.apps.cli", "model", "start", args.config, args.out],
        capture_output=True,
        text=True,
        timeout=args.timeout_s,
        check=False,
    )
    if done.returncode != 0:
        return fail(f"model start: exit {done.returncode}\n{done.stderr[-3000:]}")
    emit({"model": args.out, "files": sorted(p.name for p in Path(args.out).iterdir())})
    return 0


def cmd_account(args: argparse.Namespace) -> int:
    """The books of a job the compose file ran by itself: every group the orchestrator's ledger
    (results volume, appended across its restarts) says it pushed is trained once, dropped, or
    still in the stream; and its summary.json."""
    import redis
    from grpo_job import REDIS_URL, stream_group_ids, trained_twice, trainer_account

    from rlvr_world.apps.orchestrator.ledger import read_ledger, summarize
    from rlvr_world.queue.server import redis_credentials

    results, train_log = Path(args.results), Path(args.runs) / "trainer" / "train_log.jsonl"
    summary = json.loads((results / "summary.json").read_text())
    ledger = summarize(read_ledger(results / "ledger.jsonl"))
    trained, dropped, starts = trainer_account(train_log)
    client = redis.Redis.from_url(REDIS_URL, **redis_credentials(REDIS_URL))
    in_stream = stream_group_ids(client)
    pushed = set(ledger.pushed)
    lost = sorted(pushed - trained - dropped - in_stream)
    twice = trained_twice(train_log)
    emit(
        {
            "pushed": len(pushed),
            "trained": len(trained & pushed),
            "dropped": len(dropped & pushed),
            "still_queued": len(in_stream & pushed),
            "lost": lost,
            "trained_twice": twice,
            "failed_prompts": ledger.failed,
            "retried_prompts": len(ledger.retried),
            "unfinished_prompts": ledger.unfinished,
            "trainer_starts": starts,
            "summary": {k: summary.get(k) for k in ("trainer_steps", "served_version", "headline")},
            "results": sorted(p.name for p in results.iterdir()),
        }
    )
    if lost or twice:
        return fail(f"lost {lost[:5]}, trained twice {twice[:5]}")
    return 0


# ----------------------------------------------------------------------------------------- grpo
def cmd_grpo(args: argparse.Namespace) -> int:
    from grpo_job import run_grpo  # beside this file: the orchestrator side of the job

    return run_grpo(args.steps, Path(args.runs), args.timeout_s, emit, fail)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="driver.py", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("model")
    p.add_argument("--out", required=True)
    p.set_defaults(handler=cmd_model)
    p = sub.add_parser("queries")
    p.add_argument("--hosts", nargs="+", required=True, help="reward container names")
    p.add_argument("--n", type=int, default=30, help="good lines in the gRPC batch file")
    p.add_argument("--all-replicas", action="store_true", help="every replica must serve some")
    p.set_defaults(handler=cmd_queries)
    p = sub.add_parser("auth")
    p.add_argument("--hosts", nargs="+", required=True, help="reward container names")
    p.set_defaults(handler=cmd_auth)
    p = sub.add_parser("load")
    p.add_argument("--seconds", type=float, required=True)
    p.add_argument("--concurrency", type=int, default=8)
    p.add_argument("--hosts", nargs="*", default=[], help="replicas whose counters to report")
    p.set_defaults(handler=cmd_load)
    p = sub.add_parser("targets")
    p.add_argument("--expect", nargs="+", required=True, metavar="JOB=N")
    p.add_argument("--timeout-s", type=float, default=90.0)
    p.set_defaults(handler=cmd_targets)
    p = sub.add_parser("dashboard")
    p.add_argument("--dashboard", default="/dashboards/rlvr-world.json")
    p.set_defaults(handler=cmd_dashboard)
    p = sub.add_parser("probe")
    p.add_argument("action", choices=("write", "check", "refused"))
    p.add_argument("--n", type=int, default=100)
    p.add_argument("--timeout-s", type=float, default=60.0)
    p.set_defaults(handler=cmd_probe)
    p = sub.add_parser("start")
    p.add_argument("--config", required=True, help="a run config (as the containers see it)")
    p.add_argument("--out", required=True, help="the model folder to write")
    p.add_argument("--timeout-s", type=float, default=900.0)
    p.set_defaults(handler=cmd_start)
    p = sub.add_parser("account")
    p.add_argument("--results", default="/results", help="the orchestrator's results volume")
    p.add_argument("--runs", default="/runs", help="the checkpoints volume")
    p.set_defaults(handler=cmd_account)
    p = sub.add_parser("grpo")
    p.add_argument("--steps", type=int, required=True, help="trainer version to wait for")
    p.add_argument("--runs", default="/runs", help="the checkpoints volume (read-only)")
    p.add_argument("--timeout-s", type=float, default=900.0)
    p.set_defaults(handler=cmd_grpo)
    args = parser.parse_args(argv)
    handler = args.handler
    return int(handler(args))


if __name__ == "__main__":
    raise SystemExit(main())
