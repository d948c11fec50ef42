"""Decoder service command line: ``rlvr-world serve decoder``, ``python -m services.decoder``.

Thin: the options below plus the scaffold's common ones (``rlvr_world.scaffold.cli``) override the
``RLVR_DECODER_*`` environment (only those given on the command line), then the server module is
imported and run. ``--help`` imports neither grpc nor transformers.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rlvr_world.scaffold.cli import Option, ServiceCommand

if TYPE_CHECKING:
    from services.decoder.settings import DecoderSettings

#: command-line option -> settings field (the common ones come from the scaffold)
_OPTIONS: tuple[Option, ...] = (
    ("--tokenizer", "tokenizer", str, "tokenizer directory (required here or in the env)"),
    ("--gguf-file", "gguf_file", str, "GGUF file inside the tokenizer directory"),
    ("--video-tokenizer", "video_tokenizer", str, "video tokenizer directory (serves frames)"),
    ("--frame-batch", "frame_batch", int, "frames per decoder forward (default 64)"),
    ("--device", "device", str, "frame decoding: auto | cpu | cuda | cuda:N (default auto)"),
    ("--max-batch", "max_batch", int, "most requests per batch call (default 4096)"),
)


COMMAND: ServiceCommand[DecoderSettings] = ServiceCommand(
    name="decoder",
    help="run the decoder service (token ids to text over gRPC)",
    description="Settings come from RLVR_DECODER_* environment variables; options override them. "
    "Auth: RLVR_DECODER_API_TOKEN (or RLVR_API_TOKEN), TLS and mTLS with the --tls-* options.",
    options=_OPTIONS,
    settings="services.decoder.settings:DecoderSettings",
    serve="services.decoder.server:serve",
)
main = COMMAND.main
