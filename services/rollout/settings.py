"""Settings of the rollout service: one pydantic-settings class, env prefix ``RLVR_ROLLOUT_``.

Built once in the entrypoint (``services.rollout.cli``) and passed down; never imported as a
global. ``model`` is required (a missing one fails at boot). ``redis_url`` unset: no weight watcher,
weights move only through the ``LoadWeights`` call. Either way weights load only from inside
``weights_roots`` (``services.rollout.weights``); with none configured, no new weights load.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, field_validator
from pydantic_settings import NoDecode, SettingsConfigDict

from rlvr_world.devices import DeviceName, TorchThreads
from rlvr_world.queue.weights import WEIGHTS_CHANNEL, WEIGHTS_KEY
from rlvr_world.scaffold.settings import GrpcMetricsSettings


class RolloutSettings(GrpcMetricsSettings):
    """One rollout server: a generation engine behind gRPC, optionally following the trainer."""

    model_config = SettingsConfigDict(env_prefix="RLVR_ROLLOUT_", extra="ignore")

    model: str = Field(description="Hugging Face causal LM directory (save_pretrained layout)")
    tokenizer: str | None = Field(default=None, description="tokenizer directory (default: model)")
    gguf_file: str | None = Field(
        default=None, description="GGUF file name inside the model directory (dequantized on load)"
    )
    engine: Literal["transformers", "vllm"] = Field(
        default="transformers",
        description="generation engine: transformers, or vllm (run from the vLLM environment)",
    )
    device: DeviceName = Field(
        default="auto",
        description="auto (CUDA where torch sees a GPU, else the CPU), cpu, cuda or cuda:N; "
        "vllm: the device its build runs on must match (cuda:N: CUDA_VISIBLE_DEVICES=N)",
    )
    dtype: Literal["float32", "bfloat16", "float16"] = Field(
        default="float32", description="weights dtype (vLLM on GPU: bfloat16)"
    )
    max_model_len: int | None = Field(
        default=None, ge=1, description="vLLM: context length (unset: the model's)"
    )
    kv_cache_gib: float | None = Field(
        default=None, gt=0, description="vLLM: KV-cache memory in GiB (unset: 1 GiB on CPU)"
    )
    model_backend: Literal["auto", "transformers"] = Field(
        default="auto",
        description="transformers engine: 'auto' runs a Llama-shaped model on the torch-only "
        "forward pass (no transformers import: a faster start), others on transformers' classes; "
        "'transformers' always on transformers' classes",
    )
    torch_threads: TorchThreads = 1
    batch_rows: int = Field(
        default=64,
        ge=0,
        le=65_536,
        description="transformers: most sample rows of waiting requests generated together "
        "(0: one request at a time)",
    )
    grpc_port: int = Field(default=50061, ge=0, le=65535, description="0 picks a free port")
    max_n: int = Field(default=64, ge=1, le=4096, description="most samples per prompt")
    max_tokens: int = Field(default=4096, ge=1, le=1_000_000, description="most new tokens")
    max_prompt_tokens: int = Field(
        default=32_768, ge=1, le=10_000_000, description="longest prompt"
    )
    initial_version: int = Field(
        default=0, ge=0, description="policy version reported for the weights loaded at start"
    )
    weights_roots: Annotated[list[Path], NoDecode] = Field(
        default_factory=list,
        description="folders weights may load from (LoadWeights and the watcher); in the "
        "environment, separated by ':' (empty: no new weights load)",
    )
    redis_url: str | None = Field(
        default=None, description="follow the trainer's weights in this Redis (unset: no watcher)"
    )
    weights_key: str = Field(
        default=WEIGHTS_KEY, min_length=1, description="key of the latest weights message"
    )
    weights_channel: str = Field(
        default=WEIGHTS_CHANNEL, min_length=1, description="PUBLISH channel of weights"
    )
    watch_poll_s: float = Field(
        default=2.0, gt=0, le=3600, description="watcher also re-reads the key this often"
    )

    @field_validator("weights_roots", mode="before")
    @classmethod
    def _split_roots(cls, value: object) -> object:
        """A ``os.pathsep``-separated string (the environment's form) as a list of folders."""
        if isinstance(value, str):
            return [part for part in value.split(os.pathsep) if part.strip()]
        return value

    def tokenizer_path(self) -> str:
        """The tokenizer directory: ``tokenizer``, else the model's."""
        return self.tokenizer or self.model
