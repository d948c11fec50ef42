"""Decoder service command line: ``rlvr-world serve decoder``, ``python -m services.decoder``.

Thin: options override the ``RLVR_DECODER_*`` environment (only those given on the command line),
then the server module is imported and run. ``--help`` imports neither grpc nor transformers.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

from rlvr_world.cli_util import Option, add_options, given_options, module_main, serve_subparsers

#: command-line option -> settings field
_OPTIONS: tuple[Option, ...] = (
    ("--tokenizer", "tokenizer", str, "tokenizer directory (required here or in the env)"),
    ("--gguf-file", "gguf_file", str, "GGUF file inside the tokenizer directory"),
    ("--video-tokenizer", "video_tokenizer", str, "video tokenizer directory (serves frames)"),
    ("--frame-batch", "frame_batch", int, "frames per decoder forward (default 64)"),
    ("--host", "host", str, "interface to bind (default 127.0.0.1)"),
    ("--grpc-port", "grpc_port", int, "gRPC port; 0 picks a free one (default 50062)"),
    ("--max-batch", "max_batch", int, "most requests per batch call (default 4096)"),
    ("--grace-s", "grace_s", float, "SIGTERM grace period for in-flight calls (default 10)"),
)
_DESTS = tuple(dest for _, dest, _, _ in _OPTIONS)


def add_serve_decoder_parser(sub: Any) -> argparse.ArgumentParser:
    """Add ``serve decoder`` to the ``rlvr-world`` subcommands (handler: ``run_serve_decoder``)."""
    parser: argparse.ArgumentParser = serve_subparsers(sub).add_parser(
        "decoder",
        help="run the decoder service (token ids to text over gRPC)",
        description="Settings come from RLVR_DECODER_* environment variables; options override "
        "them.",
    )
    add_options(parser, _OPTIONS)
    parser.set_defaults(handler=run_serve_decoder)
    return parser


def settings_from_args(args: argparse.Namespace) -> Any:
    from services.decoder.settings import DecoderSettings

    return DecoderSettings(**given_options(args, _DESTS))


def run_serve_decoder(args: argparse.Namespace) -> int:
    """Serve until SIGTERM/SIGINT; 0 after a clean drain."""
    import asyncio

    from services.decoder.server import serve

    asyncio.run(serve(settings_from_args(args)))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    return module_main(
        argv,
        prog="python -m services.decoder",
        description="Run the RLVR-World decoder service.",
        options=_OPTIONS,
        run=run_serve_decoder,
    )
