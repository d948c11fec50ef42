"""Command line of the reward service: ``rlvr-world serve reward``, ``python -m services.reward``.

Thin: options override the ``RLVR_REWARD_*`` environment (only those given on the command line),
then the server module is imported and run. ``--help`` imports neither grpc nor torch.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

from rlvr_world.cli_util import Option, add_options, given_options, module_main, serve_subparsers

#: command-line option -> settings field
_OPTIONS: tuple[Option, ...] = (
    ("--host", "host", str, "interface to bind (default 127.0.0.1)"),
    ("--grpc-port", "grpc_port", int, "gRPC port; 0 picks a free one (default 50051)"),
    ("--http-port", "http_port", int, "HTTP gateway port; 0 picks a free one (default 8000)"),
    ("--workers", "workers", int, "scoring processes (default: every core)"),
    ("--max-batch", "max_batch", int, "most requests per batch call (default 1024)"),
    ("--max-payload-bytes", "max_payload_bytes", int, "largest message/body (default 64 MiB)"),
    ("--deadline-s", "deadline_s", float, "per-call scoring deadline (default 30)"),
    ("--grace-s", "grace_s", float, "SIGTERM grace period for in-flight calls (default 10)"),
    (
        "--perceptual-device",
        "perceptual_device",
        str,
        "torch device for LPIPS (default: cuda if any)",
    ),
    ("--lpips-weights", "lpips_weights", str, "local LPIPS backbone weights file"),
    ("--tls-cert", "tls_cert", str, "PEM certificate: serve gRPC over TLS"),
    ("--tls-key", "tls_key", str, "PEM private key for --tls-cert"),
    ("--default-data-source", "default_data_source", str, "/get_reward plain-label data_source"),
)


def add_serve_reward_parser(sub: Any) -> argparse.ArgumentParser:
    """Add ``serve reward`` to the ``rlvr-world`` subcommands (handler: ``run_serve_reward``)."""
    parser: argparse.ArgumentParser = serve_subparsers(sub).add_parser(
        "reward",
        help="run the reward service (gRPC + HTTP gateway, one scoring pool)",
        description="Settings come from RLVR_REWARD_* environment variables; options override "
        "them. Auth: set RLVR_REWARD_API_TOKEN.",
    )
    add_options(parser, _OPTIONS)
    parser.set_defaults(handler=run_serve_reward)
    return parser


def settings_from_args(args: argparse.Namespace) -> Any:
    from services.reward.settings import RewardSettings

    return RewardSettings(**given_options(args, tuple(dest for _, dest, _, _ in _OPTIONS)))


def run_serve_reward(args: argparse.Namespace) -> int:
    """Serve until SIGTERM/SIGINT; 0 after a clean drain."""
    import asyncio

    from services.reward.server import serve

    settings = settings_from_args(args)
    asyncio.run(serve(settings))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    return module_main(
        argv,
        prog="python -m services.reward",
        description="Run the RLVR-World reward service.",
        options=_OPTIONS,
        run=run_serve_reward,
    )
