"""Container health probes: ``python -m rlvr_world.apps.healthcheck grpc HOST:PORT | http URL``.

Exit status 0 when healthy, 1 otherwise (the contract of Docker's ``HEALTHCHECK`` and of an
``exec`` probe in Kubernetes), with one line on stderr saying why. ``grpc`` asks the standard
``grpc.health.v1.Health/Check`` and wants SERVING (draining services answer NOT_SERVING); ``http``
wants a 2xx answer (``/readyz`` of the reward gateway, ``/metrics`` of the trainer). The health
service needs no token; over TLS the probe trusts ``RLVR_TLS_ROOT_CERT`` (and presents
``RLVR_TLS_CLIENT_CERT`` where the service requires mTLS).

``add_healthcheck_parser(sub)`` adds the same as ``rlvr-world healthcheck``. Imports grpc only
for the ``grpc`` probe, so a probe costs one short-lived interpreter.
"""

from __future__ import annotations

import argparse
import sys
import urllib.error
import urllib.request
from collections.abc import Sequence
from typing import TYPE_CHECKING

from rlvr_world.apps.subcommand import add_command

if TYPE_CHECKING:
    from rlvr_world.scaffold.cli import Subparsers

#: The HTTP statuses that mean healthy: 2xx.
HTTP_SUCCESS = range(200, 300)


def check_grpc(address: str, service: str = "", timeout_s: float = 3.0) -> str | None:
    """None when ``address`` reports SERVING, else the reason."""
    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    from rlvr_world.scaffold.client_auth import ClientAuth

    with ClientAuth.from_env().channel(address) as channel:
        try:
            reply = health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(service=service), timeout=timeout_s
            )
        except grpc.RpcError as exc:
            return f"gRPC health check of {address} failed: {exc.code().name}"
    if reply.status != health_pb2.HealthCheckResponse.SERVING:
        name = health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status)
        return f"{address} reports {name}"
    return None


def check_http(url: str, timeout_s: float = 3.0) -> str | None:
    """None when GET ``url`` answers 2xx, else the reason."""
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as reply:
            status = int(reply.status)
    except urllib.error.HTTPError as exc:
        return f"GET {url}: HTTP {exc.code}"
    except (urllib.error.URLError, OSError) as exc:
        return f"GET {url} failed: {exc}"
    return None if status in HTTP_SUCCESS else f"GET {url}: HTTP {status}"


def configure_parser(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Add the probes (``grpc HOST:PORT``, ``http URL``) and their options to ``parser``;
    returns it."""
    probes = parser.add_subparsers(dest="probe", required=True)
    grpc_p = probes.add_parser("grpc", help="grpc.health.v1 Check must answer SERVING")
    grpc_p.add_argument("address", help="HOST:PORT")
    grpc_p.add_argument("--service", default="", help="service name to check (default: server)")
    http_p = probes.add_parser("http", help="GET must answer 2xx")
    http_p.add_argument("url")
    for p in (grpc_p, http_p):
        p.add_argument("--timeout-s", type=float, default=3.0, help="probe timeout (default 3)")
    return parser


def add_healthcheck_parser(sub: Subparsers) -> argparse.ArgumentParser:
    """Add ``healthcheck`` to the ``rlvr-world`` subcommands (handler: ``run_healthcheck``)."""
    parser = add_command(
        sub,
        "healthcheck",
        run_healthcheck,
        help="probe a service's health endpoint (exit 0: healthy)",
        description="Container health probe: gRPC health SERVING, or HTTP 2xx.",
    )
    return configure_parser(parser)


def run_healthcheck(args: argparse.Namespace) -> int:
    """Run the probe ``args`` name: 0 when healthy, else 1 with the reason on stderr."""
    if args.probe == "grpc":
        problem = check_grpc(args.address, args.service, args.timeout_s)
    else:
        problem = check_http(args.url, args.timeout_s)
    if problem is not None:
        print(problem, file=sys.stderr)
        return 1
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m rlvr_world.apps.healthcheck``: parse ``argv`` and probe; the exit status."""
    parser = configure_parser(argparse.ArgumentParser(prog="python -m rlvr_world.apps.healthcheck"))
    args = parser.parse_args(argv)
    return run_healthcheck(args)


if __name__ == "__main__":
    raise SystemExit(main())
