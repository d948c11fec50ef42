"""Rollout service command line: ``rlvr-world serve rollout``, ``python -m services.rollout``.

Thin: options override the ``RLVR_ROLLOUT_*`` environment (only those given on the command line),
then the server module is imported and run. ``--help`` imports neither grpc nor torch.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

from rlvr_world.cli_util import Option, add_options, given_options, module_main, serve_subparsers

#: command-line option -> settings field
_OPTIONS: tuple[Option, ...] = (
    ("--model", "model", str, "causal LM directory (required here or in RLVR_ROLLOUT_MODEL)"),
    ("--tokenizer", "tokenizer", str, "tokenizer directory (default: the model's)"),
    ("--gguf-file", "gguf_file", str, "GGUF file inside the model directory"),
    ("--engine", "engine", str, "transformers | vllm (default transformers)"),
    ("--device", "device", str, "torch device (default cpu)"),
    ("--dtype", "dtype", str, "float32 | bfloat16 | float16 (default float32)"),
    ("--max-model-len", "max_model_len", int, "vLLM: context length (default: the model's)"),
    ("--kv-cache-gib", "kv_cache_gib", float, "vLLM: KV-cache GiB (default 1 on CPU)"),
    ("--host", "host", str, "interface to bind (default 127.0.0.1)"),
    ("--grpc-port", "grpc_port", int, "gRPC port; 0 picks a free one (default 50061)"),
    ("--max-n", "max_n", int, "most samples per prompt (default 64)"),
    ("--max-tokens", "max_tokens", int, "most new tokens per sample (default 4096)"),
    ("--initial-version", "initial_version", int, "version of the start weights (default 0)"),
    ("--redis-url", "redis_url", str, "follow the trainer's weights in this Redis"),
    ("--weights-key", "weights_key", str, "key of the latest weights (rlvr:weights:latest)"),
    ("--weights-channel", "weights_channel", str, "channel of new weights (rlvr:weights)"),
    ("--grace-s", "grace_s", float, "SIGTERM grace period for in-flight calls (default 10)"),
    ("--torch-threads", "torch_threads", int, "torch intra-op threads (default 1)"),
)
_DESTS = tuple(dest for _, dest, _, _ in _OPTIONS)


def add_serve_rollout_parser(sub: Any) -> argparse.ArgumentParser:
    """Add ``serve rollout`` to the ``rlvr-world`` subcommands (handler: ``run_serve_rollout``)."""
    parser: argparse.ArgumentParser = serve_subparsers(sub).add_parser(
        "rollout",
        help="run the rollout service (gRPC generation with log-probs, weight reloads)",
        description="Settings come from RLVR_ROLLOUT_* environment variables; options override "
        "them. With --redis-url it follows the trainer's published weights.",
    )
    add_options(parser, _OPTIONS)
    parser.set_defaults(handler=run_serve_rollout)
    return parser


def settings_from_args(args: argparse.Namespace) -> Any:
    from services.rollout.settings import RolloutSettings

    return RolloutSettings(**given_options(args, _DESTS))


def run_serve_rollout(args: argparse.Namespace) -> int:
    """Serve until SIGTERM/SIGINT; 0 after a clean drain."""
    import asyncio

    from services.rollout.server import serve

    asyncio.run(serve(settings_from_args(args)))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    return module_main(
        argv,
        prog="python -m services.rollout",
        description="Run the RLVR-World rollout service.",
        options=_OPTIONS,
        run=run_serve_rollout,
    )
