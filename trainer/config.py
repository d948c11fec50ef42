"""Trainer configuration: one pydantic model, loaded from YAML or TOML plus ``--set`` overrides.

Defaults follow docs/reference.md#grpo (AdamW betas 0.9/0.999, wd 0.01, grad clip 1.0, clip 0.2,
dual clip 3.0, low_var_kl with beta 0.001, token-mean). Environment variables are not read here
except ``RLVR_REDIS_URL`` (by ``rlvr_world.queue.server``) when ``queue.redis_url`` is unset.
"""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, model_validator

from rlvr_world.devices import DeviceName, PrecisionName, TorchThreads
from rlvr_world.grpo.loss import AGG_MODES, KL_TYPES
from rlvr_world.grpo.settings import DEFAULT_MAX_STALENESS, GrpoObjective, MaxStaleness
from rlvr_world.queue.weights import WEIGHTS_CHANNEL, WEIGHTS_KEY


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid")


class TinyModel(_Section):
    """A randomly initialised LlamaForCausalLM, for smoke runs without any download."""

    vocab_size: int = Field(default=128, ge=8, le=1_000_000, description="vocabulary size")
    hidden_size: int = Field(default=32, ge=8, le=8192, description="hidden width")
    num_layers: int = Field(default=2, ge=1, le=64, description="decoder layers")
    num_heads: int = Field(default=2, ge=1, le=64, description="attention heads")
    seed: int = Field(default=0, ge=0, description="initialisation seed")


class LoraConfig(_Section):
    """Optional LoRA adapters (peft); the frozen base model then doubles as the reference."""

    enabled: bool = Field(default=False, description="train LoRA adapters instead of all weights")
    r: int = Field(default=8, ge=1, le=1024, description="LoRA rank")
    alpha: int = Field(default=16, ge=1, le=4096, description="LoRA alpha")
    dropout: float = Field(default=0.0, ge=0.0, le=0.9, description="LoRA dropout")
    target_modules: list[str] = Field(
        default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj"],
        description="module names to adapt",
    )


class ModelConfig(_Section):
    """The policy: a Hugging Face causal LM path, or a tiny random model."""

    path: str | None = Field(default=None, description="local path or hub id of a causal LM")
    tiny: TinyModel | None = Field(
        default=None, description="build a tiny random model instead of path"
    )
    lora: LoraConfig = Field(default_factory=LoraConfig, description="LoRA settings")
    backend: Literal["auto", "transformers"] = Field(
        default="auto",
        description="auto: a Llama-shaped model.path without LoRA on the torch-only Llama "
        "(rlvr_world.llama; no transformers import), others on transformers' classes",
    )
    temperature: float = Field(
        default=1.0, gt=0.0, le=10.0, description="rollout temperature (logits /)"
    )

    @model_validator(mode="after")
    def _one_source(self) -> ModelConfig:
        if (self.path is None) == (self.tiny is None):
            raise ValueError("set exactly one of model.path and model.tiny")
        return self


class OptimConfig(_Section):
    """AdamW and gradient clipping."""

    lr: float = Field(default=1e-6, gt=0.0, le=1.0, description="learning rate (constant)")
    beta1: float = Field(default=0.9, ge=0.0, lt=1.0, description="AdamW beta1")
    beta2: float = Field(default=0.999, ge=0.0, lt=1.0, description="AdamW beta2")
    weight_decay: float = Field(default=0.01, ge=0.0, le=1.0, description="AdamW weight decay")
    grad_clip: float = Field(default=1.0, gt=0.0, le=1e6, description="max global grad norm")


class GrpoConfig(GrpoObjective, _Section):
    """The GRPO objective: the shared fields (``rlvr_world.grpo.settings.GrpoObjective``) and the
    loss's own."""

    clip_low: float = Field(default=0.2, ge=0.0, lt=1.0, description="PPO clip epsilon (lower)")
    clip_high: float = Field(default=0.2, ge=0.0, le=10.0, description="PPO clip epsilon (upper)")
    dual_clip: bool = Field(
        default=True, description="cap the loss of A<0 tokens at -A*clip_ratio_c"
    )
    clip_ratio_c: float = Field(default=3.0, gt=1.0, le=100.0, description="dual-clip constant c")
    kl_type: str = Field(default="low_var_kl", description=f"KL estimator, one of {KL_TYPES}")
    entropy_coef: float = Field(
        default=0.0, ge=0.0, le=10.0, description="entropy bonus coefficient"
    )
    loss_agg_mode: str = Field(default="token-mean", description=f"one of {AGG_MODES}")
    log_ref_kl: bool = Field(
        default=True,
        description="measure the KL to the reference at every step even when kl_coef is 0 "
        "(keeps a frozen reference and costs one no-grad forward per micro-batch)",
    )
    epsilon: float = Field(default=1e-6, gt=0.0, le=1.0, description="std epsilon")

    @model_validator(mode="after")
    def _names(self) -> GrpoConfig:
        if self.kl_type not in KL_TYPES:
            raise ValueError(f"grpo.kl_type must be one of {KL_TYPES}, got {self.kl_type!r}")
        if self.loss_agg_mode not in AGG_MODES:
            raise ValueError(f"grpo.loss_agg_mode must be one of {AGG_MODES}")
        return self


class BatchConfig(_Section):
    """How many groups make an optimizer step and how they are split for backward."""

    groups_per_step: int = Field(
        default=4, ge=1, le=100_000, description="groups per optimizer step"
    )
    micro_batch_size: int = Field(
        default=8, ge=1, le=100_000, description="samples per forward/backward"
    )


class QueueConfig(_Section):
    """Where the scored groups come from."""

    redis_url: str | None = Field(
        default=None, description="Redis URL; unset: $RLVR_REDIS_URL or embedded"
    )
    stream: str = Field(default="rlvr:scored_groups", min_length=1, description="stream key")
    group: str = Field(default="trainer", min_length=1, description="consumer group name")
    dead_letter: str = Field(
        default="rlvr:scored_groups:dead", min_length=1, description="dead letters"
    )
    consumer: str = Field(
        default="trainer-0", min_length=1, description="this trainer's consumer name"
    )
    block_ms: int = Field(default=500, ge=1, le=60_000, description="XREADGROUP block time")
    reclaim_min_idle_ms: int = Field(
        default=600_000, ge=1, description="reclaim entries pending this long on another consumer"
    )
    max_staleness: MaxStaleness = DEFAULT_MAX_STALENESS
    idle_timeout_s: float = Field(
        default=0.0,
        ge=0.0,
        le=86_400.0,
        description="stop after this long without data (0: wait forever)",
    )
    weights_key: str = Field(
        default=WEIGHTS_KEY, min_length=1, description="key holding the latest weights message"
    )
    weights_channel: str = Field(
        default=WEIGHTS_CHANNEL, min_length=1, description="PUBLISH channel for new weights"
    )


class RunConfig(_Section):
    """Run directory, length, checkpoints, metrics."""

    run_dir: Path = Field(
        default=Path("runs/trainer"), description="checkpoints, logs, embedded redis"
    )
    total_steps: int = Field(
        default=100, ge=1, le=10_000_000, description="optimizer steps to take"
    )
    checkpoint_every: int = Field(
        default=10, ge=1, le=1_000_000, description="steps between checkpoints"
    )
    keep_checkpoints: int = Field(default=2, ge=1, le=1000, description="checkpoints kept on disk")
    seed: int = Field(default=0, ge=0, description="torch seed")
    device: DeviceName = Field(
        default="auto",
        description="auto (CUDA where torch sees a GPU, else the CPU), cpu, cuda or cuda:N "
        "(rlvr_world.devices)",
    )
    precision: PrecisionName = Field(
        default="auto",
        description="auto: bf16 autocast on a CUDA device that supports it, fp32 elsewhere; "
        "fp32; bf16 (the CPU too: slower there)",
    )
    torch_threads: TorchThreads = 1
    prometheus_port: int | None = Field(
        default=None, ge=0, le=65535, description="serve /metrics here"
    )
    progress: bool = Field(default=True, description="show a tqdm progress bar")


class TrainerConfig(_Section):
    """Everything the GRPO trainer needs."""

    model: ModelConfig = Field(description="policy model")
    optim: OptimConfig = Field(default_factory=OptimConfig, description="optimizer")
    grpo: GrpoConfig = Field(default_factory=GrpoConfig, description="objective")
    batch: BatchConfig = Field(default_factory=BatchConfig, description="batching")
    queue: QueueConfig = Field(default_factory=QueueConfig, description="input queue")
    run: RunConfig = Field(default_factory=RunConfig, description="run")


def _parse_value(text: str) -> object:
    """``text`` as JSON, else as a YAML scalar (``a`` is the string ``"a"``)."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return yaml.safe_load(text)


def apply_overrides(data: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """Apply ``dotted.key=value`` overrides (values parsed as JSON, else YAML scalars)."""
    for item in overrides:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ValueError(f"override {item!r} must look like section.key=value")
        node = data
        *parents, leaf = key.split(".")
        for part in parents:
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise ValueError(f"override {item!r}: {part!r} is not a section")
            node = child
        node[leaf] = _parse_value(value)
    return data


def load_config(path: Path, overrides: list[str] | None = None) -> TrainerConfig:
    """Read a ``.yaml``/``.yml``/``.toml`` file, apply overrides, validate."""
    text = path.read_text()
    if path.suffix == ".toml":
        data: Any = tomllib.loads(text)
    elif path.suffix in (".yaml", ".yml"):
        data = yaml.safe_load(text) or {}
    else:
        raise ValueError(f"config {path} must end in .yaml, .yml or .toml")
    if not isinstance(data, dict):
        raise ValueError(f"config {path} must be a mapping at the top level")
    return TrainerConfig.model_validate(apply_overrides(data, overrides or []))
