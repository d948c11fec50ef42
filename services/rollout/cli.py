"""Rollout service command line: ``rlvr-world serve rollout``, ``python -m services.rollout``.

Thin: the options below plus the scaffold's common ones (``rlvr_world.scaffold.cli``) override the
``RLVR_ROLLOUT_*`` environment (only those given on the command line), then the server module is
imported and run. ``--help`` imports neither grpc nor torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rlvr_world.queue.weights import WEIGHTS_CHANNEL, WEIGHTS_KEY
from rlvr_world.scaffold.cli import Option, ServiceCommand

if TYPE_CHECKING:
    from services.rollout.settings import RolloutSettings

#: command-line option -> settings field (the common ones come from the scaffold)
_OPTIONS: tuple[Option, ...] = (
    ("--model", "model", str, "causal LM directory (required here or in RLVR_ROLLOUT_MODEL)"),
    ("--tokenizer", "tokenizer", str, "tokenizer directory (default: the model's)"),
    ("--gguf-file", "gguf_file", str, "GGUF file inside the model directory"),
    ("--engine", "engine", str, "transformers | vllm (default transformers)"),
    ("--device", "device", str, "auto | cpu | cuda | cuda:N (default auto: CUDA if any)"),
    ("--dtype", "dtype", str, "float32 | bfloat16 | float16 (default float32)"),
    ("--max-model-len", "max_model_len", int, "vLLM: context length (default: the model's)"),
    ("--kv-cache-gib", "kv_cache_gib", float, "vLLM: KV-cache GiB (default 1 on CPU)"),
    ("--batch-rows", "batch_rows", int, "transformers: rows of waiting requests joined (64)"),
    ("--model-backend", "model_backend", str, "transformers: auto | transformers (default auto)"),
    ("--max-n", "max_n", int, "most samples per prompt (default 64)"),
    ("--max-tokens", "max_tokens", int, "most new tokens per sample (default 4096)"),
    ("--initial-version", "initial_version", int, "version of the start weights (default 0)"),
    ("--weights-root", "weights_roots", list, "the only folder weights load from (repeatable)"),
    ("--redis-url", "redis_url", str, "follow the trainer's weights in this Redis"),
    ("--weights-key", "weights_key", str, f"key of the latest weights ({WEIGHTS_KEY})"),
    ("--weights-channel", "weights_channel", str, f"channel of new weights ({WEIGHTS_CHANNEL})"),
    ("--torch-threads", "torch_threads", int, "torch intra-op threads (default 1)"),
)


COMMAND: ServiceCommand[RolloutSettings] = ServiceCommand(
    name="rollout",
    help="run the rollout service (gRPC generation with log-probs, weight reloads)",
    description="Settings come from RLVR_ROLLOUT_* environment variables; options override them. "
    "With --redis-url it follows the trainer's published weights; weights load only from "
    "--weights-root folders. Auth: RLVR_ROLLOUT_API_TOKEN (or RLVR_API_TOKEN), TLS and mTLS "
    "with the --tls-* options.",
    options=_OPTIONS,
    settings="services.rollout.settings:RolloutSettings",
    serve="services.rollout.server:serve",
)
main = COMMAND.main
