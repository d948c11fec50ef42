"""Who may call the deployed reward workers (``driver.py auth``, run in the driver container).

On every replica, over HTTP (the README's ``curl``) and gRPC: no token and a wrong token are
refused (401 / ``UNAUTHENTICATED``) and counted by that replica
(``rlvr_reward_rejected_total{reason="unauthenticated"}``), the stack's token with the scheme in
lower case is accepted, and ``/metrics``, ``/readyz`` and gRPC health answer without a token (what
Prometheus and the healthchecks use). Through the service name: the SDK without a token gets
``UNAUTHENTICATED`` (not retried), and ``rlvr-world reward score --server`` without one stops with
exit 2 and names the variable to set. The token comes from ``RLVR_API_TOKEN``, never argv.
"""

from __future__ import annotations

import json
import os
import subprocess
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

TOKEN_ENV = "RLVR_API_TOKEN"
REWARD = "dns:///reward:50051"
#: Exit status of ``rlvr-world reward score`` when the service refuses the call
#: (``rlvr_world.apps.batch.score_file``).
BATCH_ABORTED_EXIT = 2
WEB_REQUEST = {
    "data_source": "web_agent",
    "solution_str": "New items:\nNone",
    "ground_truth": "New items:\nNone",
}


def stack_token() -> str:
    token = os.environ.get(TOKEN_ENV, "")
    if not token:
        raise SystemExit(f"driver: {TOKEN_ENV} is not set in the driver container")
    return token


def metric_sum(host: str, family: str, **labels: str) -> float:
    """Sum of the samples of ``family`` on ``host:8000/metrics`` whose labels include ``labels``
    (no token: the endpoint is open)."""
    with urllib.request.urlopen(f"http://{host}:8000/metrics", timeout=10) as reply:
        text = reply.read().decode()
    want = [f'{k}="{v}"' for k, v in labels.items()]
    total = 0.0
    for line in text.splitlines():
        if line.startswith(family + "{") and all(w in line for w in want):
            total += float(line.rsplit(" ", 1)[1])
    return total


def http_status(url: str, *curl_args: str) -> int:
    """HTTP status code of a curl call (000 when nothing answered)."""
    done = subprocess.run(
        [
            "curl",
            "-s",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
            "--max-time",
            "30",
            url,
            *curl_args,
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return int(done.stdout or 0)


def grpc_code(host: str, metadata: tuple[tuple[str, str], ...]) -> str:
    """Status code name of one raw ``Score`` on ``host:50051`` with exactly ``metadata``."""
    import grpc

    from rlvr_world.client import verl_request
    from rlvr_world.v1 import reward_pb2_grpc

    with grpc.insecure_channel(f"{host}:50051") as channel:
        stub = reward_pb2_grpc.RewardServiceStub(channel)
        try:
            stub.Score(verl_request(WEB_REQUEST), timeout=30, metadata=metadata)
        except grpc.RpcError as exc:
            return str(exc.code().name)
    return "OK"


def health(host: str) -> str:
    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    with grpc.insecure_channel(f"{host}:50051") as channel:
        reply = health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(), timeout=10
        )
    return str(health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status))


def replica_checks(host: str, token: str) -> dict[str, Any]:
    url = f"{host}:8000/v1/score"
    post = ("-H", "content-type: application/json", "-d", json.dumps(WEB_REQUEST))
    before = metric_sum(host, "rlvr_reward_rejected_total", reason="unauthenticated")
    got = {
        "http_no_token": http_status(url, *post),
        "http_wrong_token": http_status(url, *post, "-H", "authorization: Bearer wrong"),
        "http_lowercase_bearer": http_status(url, *post, "-H", f"authorization: bearer {token}"),
        "http_metrics_no_token": http_status(f"{host}:8000/metrics"),
        "http_readyz_no_token": http_status(f"{host}:8000/readyz"),
        "grpc_no_token": grpc_code(host, ()),
        "grpc_wrong_token": grpc_code(host, (("authorization", "Bearer wrong"),)),
        "grpc_token": grpc_code(host, (("authorization", f"Bearer {token}"),)),
        "grpc_health_no_token": health(host),
    }
    got["refusals_counted"] = (
        metric_sum(host, "rlvr_reward_rejected_total", reason="unauthenticated") - before
    )
    return got


WANT = {
    "http_no_token": 401,
    "http_wrong_token": 401,
    "http_lowercase_bearer": 200,
    "http_metrics_no_token": 200,
    "http_readyz_no_token": 200,
    "grpc_no_token": "UNAUTHENTICATED",
    "grpc_wrong_token": "UNAUTHENTICATED",
    "grpc_token": "OK",
    "grpc_health_no_token": "SERVING",
    "refusals_counted": 4.0,
}


def sdk_without_token() -> str:
    """The SDK through the service name with no token: the code it raises (no retry)."""
    import grpc

    from rlvr_world.client import RewardClient

    with RewardClient(REWARD, token="", timeout_s=30) as client:
        try:
            client.score_verl(WEB_REQUEST)
        except grpc.RpcError as exc:
            return f"{exc.code().name} after {client.retries} retries"
    return "OK"


def score_file(
    src: Path, dst: Path, *, timeout_s: float, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """The README's gRPC query: ``rlvr-world reward score --input SRC --output DST --server
    dns:///reward:50051`` (``env``: the CLI's environment; None: this process's)."""
    argv = ["rlvr-world", "reward", "score", "--input", str(src), "--output", str(dst)]
    return subprocess.run(
        [*argv, "--server", REWARD],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
        env=env,
    )


def cli_without_token() -> dict[str, Any]:
    src, dst = Path("/tmp/auth-requests.jsonl"), Path("/tmp/auth-scores.jsonl")
    src.write_text(json.dumps(WEB_REQUEST) + "\n")
    env = {k: v for k, v in os.environ.items() if k not in (TOKEN_ENV, "RLVR_REWARD_API_TOKEN")}
    done = score_file(src, dst, timeout_s=120, env=env)
    error = [ln for ln in done.stderr.splitlines() if ln.startswith("error:")]
    return {
        "rc": done.returncode,
        "error": error[-1][:300] if error else done.stderr[-300:],
        "lines_written": len(dst.read_text().splitlines()) if dst.exists() else 0,
    }


def run_auth(
    hosts: list[str], emit: Callable[[dict[str, Any]], None], fail: Callable[[str], int]
) -> int:
    token = stack_token()
    replicas = {host: replica_checks(host, token) for host in hosts}
    sdk = sdk_without_token()
    cli = cli_without_token()
    emit({"replicas": replicas, "sdk_no_token": sdk, "cli_no_token": cli, "want": WANT})
    for host, got in replicas.items():
        wrong = {k: (got[k], v) for k, v in WANT.items() if got[k] != v}
        if wrong:
            return fail(f"{host}: (got, wanted) {wrong}")
    if sdk != "UNAUTHENTICATED after 0 retries":
        return fail(f"the SDK without a token got {sdk}")
    if (
        cli["rc"] != BATCH_ABORTED_EXIT
        or "UNAUTHENTICATED" not in cli["error"]
        or cli["lines_written"]
    ):
        return fail(f"reward score --server without a token: {cli}")
    return 0
