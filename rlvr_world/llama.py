"""A Llama-shaped causal LM in plain torch, so that the rollout service and the trainer start
without importing transformers.

Importing any transformers model class costs this machine ~5 s before a weight is read
(``torch._dynamo`` through its masking utilities, its package checks, scipy through its losses:
``docs/benchmarks.md``, Start-up), longer than the 5 s from ``rlvr-world run``'s start to the
first rollout request that the pipeline aims at. Every model the runs here build is a
``LlamaForCausalLM`` (``rlvr_world.tiny_model``, ``rlvr_world.video.world_model``) and so is
SmolLM2; the forward pass is small: RMSNorm, rotary positions (the default kind), grouped-query
attention through ``scaled_dot_product_attention``, a SwiGLU MLP. It is written here op for op as
transformers 5 computes it (``modeling_llama``), with the same parameter names, so a trainer
checkpoint loads into either and the logits agree to float rounding
(``tests/unit/test_llama_engine.py``: random tiny models, and SmolLM2-135M's real weights).

``llama_shape`` reads ``config.json`` and says why a model is *not* served here (another
architecture, biases, a non-default rotary scaling, attention dropout, tensor-parallel
pretraining, quantization): the rollout engine and the trainer then load it with transformers.
``KVCache`` keeps each layer's keys and values in buffers with reserved room, written in place (as
``services.rollout.kv_cache.ReservedLayer`` does for transformers' cache); gradients flow through
it (the trainer's shared-prompt forward). ``LlamaLM.save_pretrained`` writes the layout
transformers reads (the source's ``config.json`` and ``generation_config.json``, the weights as
``model.safetensors`` without a tied head), so a checkpoint of either loads into the other.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F  # noqa: N812


@dataclass(frozen=True)
class LlamaShape:
    """What the forward pass needs from ``config.json``."""

    vocab_size: int
    hidden_size: int
    intermediate_size: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    rms_norm_eps: float
    rope_theta: float
    max_positions: int | None
    tie_embeddings: bool
    eos_token_id: tuple[int, ...]


def _rope_theta(config: dict[str, Any]) -> float | str:
    """The rotary base, or why the rotary kind is not served here."""
    params = config.get("rope_parameters")
    if params is None:  # transformers 4 writes rope_theta and rope_scaling
        if config.get("rope_scaling"):
            return f"rope_scaling {config['rope_scaling']!r}"
        return float(config.get("rope_theta", 10000.0))
    if not isinstance(params, dict) or params.get("rope_type", "default") != "default":
        return f"rope_parameters {params!r}"
    return float(params.get("rope_theta", 10000.0))


def _ids(value: Any) -> tuple[int, ...]:
    if isinstance(value, int):
        return (value,)
    if isinstance(value, list):
        return tuple(int(v) for v in value)
    return ()


def llama_shape(directory: Path) -> LlamaShape | str:
    """The model's shape if this module serves it, else the reason it does not."""
    try:
        config = json.loads((directory / "config.json").read_text())
    except (OSError, ValueError) as exc:
        return f"config.json: {exc}"
    if config.get("model_type") != "llama":
        return f"model_type {config.get('model_type')!r} (this module serves 'llama')"
    if config.get("architectures", ["LlamaForCausalLM"]) != ["LlamaForCausalLM"]:
        return f"architectures {config.get('architectures')!r}"
    for key, wanted in (
        ("hidden_act", "silu"),
        ("attention_bias", False),
        ("mlp_bias", False),
        ("pretraining_tp", 1),
        ("attention_dropout", 0.0),
        ("quantization_config", None),
    ):
        if config.get(key, wanted) != wanted:
            return f"{key} {config[key]!r}"
    if not any(directory.glob("*.safetensors")):
        return "no *.safetensors weights"
    theta = _rope_theta(config)
    if isinstance(theta, str):
        return theta
    try:
        return _shape(directory, config, theta)
    except (OSError, ValueError, KeyError, TypeError) as exc:  # transformers gives the reason
        return f"config.json: cannot read the shape ({type(exc).__name__}: {exc})"


def _shape(directory: Path, config: dict[str, Any], theta: float) -> LlamaShape:
    heads = int(config["num_attention_heads"])
    generation = directory / "generation_config.json"
    eos = config.get("eos_token_id")
    if generation.is_file():  # transformers takes the generation config's over the model's
        eos = json.loads(generation.read_text()).get("eos_token_id", eos)
    return LlamaShape(
        vocab_size=int(config["vocab_size"]),
        hidden_size=int(config["hidden_size"]),
        intermediate_size=int(config["intermediate_size"]),
        layers=int(config["num_hidden_layers"]),
        heads=heads,
        kv_heads=int(config.get("num_key_value_heads") or heads),
        head_dim=int(config.get("head_dim") or int(config["hidden_size"]) // heads),
        rms_norm_eps=float(config.get("rms_norm_eps", 1e-6)),
        rope_theta=theta,
        max_positions=config.get("max_position_embeddings"),
        tie_embeddings=bool(config.get("tie_word_embeddings", False)),
        eos_token_id=_ids(eos),
    )


class KVLayer:
    """One layer's keys and values, (rows, kv heads, positions, head dim), in buffers with room
    for more positions; past the room the buffers double."""

    def __init__(self, keys: torch.Tensor, values: torch.Tensor, room: int = 0) -> None:
        self._length = keys.shape[-2]
        self._k, self._v = self._grown(keys, room), self._grown(values, room)

    def _grown(self, states: torch.Tensor, room: int) -> torch.Tensor:
        b, h, _, d = states.shape
        buf = states.new_empty(b, h, self._length + room, d)
        buf[:, :, : self._length] = states[:, :, : self._length]
        return buf

    @property
    def keys(self) -> torch.Tensor:
        """The filled keys (rows, kv heads, positions, head dim): a view of the buffer."""
        return self._k[:, :, : self._length]

    @property
    def values(self) -> torch.Tensor:
        """The filled values, shaped as ``keys``: a view of the buffer."""
        return self._v[:, :, : self._length]

    def reserve(self, room: int) -> None:
        """Room for ``room`` more positions past the filled ones."""
        if self._length + room > self._k.shape[-2]:
            self._k, self._v = self._grown(self._k, room), self._grown(self._v, room)

    def update(self, keys: torch.Tensor, values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Write the new positions in place after the filled ones; all keys and values so far."""
        new = keys.shape[-2]
        if self._length + new > self._k.shape[-2]:
            self.reserve(max(new, self._k.shape[-2]))  # doubles
        end = self._length + new
        self._k[:, :, self._length : end] = keys
        self._v[:, :, self._length : end] = values
        self._length = end
        return self.keys, self.values


class KVCache:
    """Every layer's ``KVLayer``; the calls the engine makes on transformers' ``DynamicCache``
    (``update``, ``layers``, ``batch_repeat_interleave``, ``get_seq_length``) plus ``reserve``."""

    def __init__(self) -> None:
        self.layers: list[KVLayer] = []

    def get_seq_length(self) -> int:
        """Positions cached so far (0 before the first forward)."""
        return self.layers[0].keys.shape[-2] if self.layers else 0

    def update(
        self, keys: torch.Tensor, values: torch.Tensor, layer: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Append ``layer``'s new keys and values (its first call creates the layer); all of that
        layer's keys and values so far. Layers must be filled in order."""
        if layer == len(self.layers):
            self.layers.append(KVLayer(keys, values))
            return keys, values
        return self.layers[layer].update(keys, values)

    def batch_repeat_interleave(self, n: int) -> None:
        """Repeat each row ``n`` times in place (a prompt's cache for ``n`` samples); the copies
        have no reserved room."""
        self.layers = [
            KVLayer(x.keys.repeat_interleave(n, dim=0), x.values.repeat_interleave(n, dim=0))
            for x in self.layers
        ]

    def reserve(self, room: int) -> None:
        """Room for ``room`` more positions in every layer."""
        for layer in self.layers:
            layer.reserve(room)


class Linear(nn.Module):
    """``nn.Linear`` without a bias and without initialisation: its weight is ``torch.empty``
    until the checkpoint is assigned (``nn.Linear`` initialises randomly, and under a ``meta``
    device that initialisation imports ``torch._dynamo``, 2.5 s of start-up)."""

    def __init__(self, inputs: int, outputs: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(outputs, inputs))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x @ weight.T`` over the last axis."""
        return F.linear(x, self.weight)


class Embedding(nn.Module):
    """``nn.Embedding`` without initialisation (as ``Linear``)."""

    def __init__(self, rows: int, size: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(rows, size))

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        """The rows of ``weight`` for ``ids`` (any shape; a row per id)."""
        return F.embedding(ids, self.weight)


class RMSNorm(nn.Module):
    """Llama's RMS norm over the last axis, computed in float32 and cast back."""

    def __init__(self, size: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x`` (..., size) normalised and scaled by ``weight``, in ``x``'s dtype."""
        dtype = x.dtype
        x = x.to(torch.float32)
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x.to(dtype)


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class Attention(nn.Module):
    """Grouped-query self-attention with rotary positions, layer ``index`` of the cache."""

    def __init__(self, s: LlamaShape, index: int) -> None:
        super().__init__()
        self.index, self.heads, self.kv_heads = index, s.heads, s.kv_heads
        self.head_dim = s.head_dim
        self.q_proj = Linear(s.hidden_size, s.heads * s.head_dim)
        self.k_proj = Linear(s.hidden_size, s.kv_heads * s.head_dim)
        self.v_proj = Linear(s.hidden_size, s.kv_heads * s.head_dim)
        self.o_proj = Linear(s.heads * s.head_dim, s.hidden_size)

    def forward(
        self,
        x: torch.Tensor,
        rope: tuple[torch.Tensor, torch.Tensor],
        mask: torch.Tensor | None,
        cache: KVCache,
    ) -> torch.Tensor:
        """``x`` (rows, new positions, hidden) attended over the cached and new positions;
        ``mask`` None: causal (the fast path), else boolean (rows, 1, new, all), True: attend."""
        b, m, _ = x.shape
        q = self.q_proj(x).view(b, m, -1, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(b, m, -1, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(b, m, -1, self.head_dim).transpose(1, 2)
        cos, sin = rope[0].unsqueeze(1), rope[1].unsqueeze(1)
        q = q * cos + _rotate_half(q) * sin
        k = k * cos + _rotate_half(k) * sin
        k, v = cache.update(k, v, self.index)
        if self.kv_heads != self.heads:
            k = k.repeat_interleave(self.heads // self.kv_heads, dim=1)
            v = v.repeat_interleave(self.heads // self.kv_heads, dim=1)
        causal = mask is None and m > 1
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal)
        merged: torch.Tensor = self.o_proj(out.transpose(1, 2).reshape(b, m, -1))
        return merged


class MLP(nn.Module):
    """Llama's SwiGLU feed-forward block."""

    def __init__(self, s: LlamaShape) -> None:
        super().__init__()
        self.gate_proj = Linear(s.hidden_size, s.intermediate_size)
        self.up_proj = Linear(s.hidden_size, s.intermediate_size)
        self.down_proj = Linear(s.intermediate_size, s.hidden_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``down(silu(gate(x)) * up(x))``, shape kept."""
        out: torch.Tensor = self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))
        return out


class DecoderLayer(nn.Module):
    """One pre-norm block: attention then the MLP, each added to the residual stream."""

    def __init__(self, s: LlamaShape, index: int) -> None:
        super().__init__()
        self.self_attn = Attention(s, index)
        self.mlp = MLP(s)
        self.input_layernorm = RMSNorm(s.hidden_size, s.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(s.hidden_size, s.rms_norm_eps)

    def forward(self, x: torch.Tensor, *args: Any) -> torch.Tensor:
        """``x`` (rows, positions, hidden) through the block; ``args``: ``Attention.forward``'s."""
        x = x + self.self_attn(self.input_layernorm(x), *args)
        out: torch.Tensor = x + self.mlp(self.post_attention_layernorm(x))
        return out


class _Body(nn.Module):
    def __init__(self, s: LlamaShape) -> None:
        super().__init__()
        self.embed_tokens = Embedding(s.vocab_size, s.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(s, i) for i in range(s.layers))
        self.norm = RMSNorm(s.hidden_size, s.rms_norm_eps)


@dataclass
class Output:
    """``logits`` (rows, kept positions, vocab) and the cache, as transformers' output names."""

    logits: torch.Tensor
    past_key_values: KVCache


@dataclass(frozen=True)
class _Config:
    max_position_embeddings: int | None


@dataclass(frozen=True)
class _GenerationConfig:
    eos_token_id: list[int]


def _inv_freq(s: LlamaShape) -> torch.Tensor:
    """Rotary inverse frequencies, as transformers computes them."""
    half = torch.arange(0, s.head_dim, 2, dtype=torch.int64).float() / s.head_dim
    return 1.0 / (s.rope_theta**half)


class LlamaLM(nn.Module):
    """``LlamaForCausalLM``'s forward pass for inference, its parameter names and the attributes
    the engine reads (``config.max_position_embeddings``, ``generation_config.eos_token_id``,
    ``get_input_embeddings``)."""

    def __init__(self, s: LlamaShape, source: Path | None = None) -> None:
        super().__init__()
        self.shape, self.source = s, source
        self.model = _Body(s)
        self.lm_head = Linear(s.hidden_size, s.vocab_size)
        self.config = _Config(s.max_positions)
        self.generation_config = _GenerationConfig(list(s.eos_token_id))
        self.inv_freq = _inv_freq(s)

    def get_input_embeddings(self) -> Embedding:
        """The token embedding (its weight's rows are the vocabulary)."""
        return self.model.embed_tokens

    def save_pretrained(self, folder: str | Path, safe_serialization: bool = True) -> None:
        """``folder`` as transformers' ``save_pretrained`` lays it out (module docstring)."""
        from safetensors.torch import save_file

        if not safe_serialization:
            raise ValueError("LlamaLM saves safetensors only")
        if self.source is None:
            raise ValueError("LlamaLM.save_pretrained needs the directory it was loaded from")
        out = Path(folder)
        out.mkdir(parents=True, exist_ok=True)
        for name in ("config.json", "generation_config.json"):
            if (self.source / name).is_file():
                shutil.copyfile(self.source / name, out / name)
        state = {
            name: tensor.detach().contiguous()
            for name, tensor in self.state_dict().items()
            if not (self.shape.tie_embeddings and name == "lm_head.weight")
        }
        save_file(state, str(out / "model.safetensors"), metadata={"format": "pt"})

    def _rope(self, positions: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, ...]:
        inv = self.inv_freq.to(positions.device)[None, :, None].expand(positions.shape[0], -1, 1)
        freqs = (inv @ positions[:, None, :].float()).transpose(1, 2)
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos().to(dtype), emb.sin().to(dtype)

    def forward(
        self,
        input_ids: torch.Tensor,
        *,
        past_key_values: KVCache | None = None,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        use_cache: bool = True,
        logits_to_keep: int = 0,
    ) -> Output:
        """Logits of the last ``logits_to_keep`` positions (0: all). ``attention_mask`` (rows,
        cached + new positions; 0 at padding) as transformers takes it; ``use_cache`` is
        accepted for the same call and the cache always filled."""
        cache = past_key_values if past_key_values is not None else KVCache()
        b, m = input_ids.shape
        past = cache.get_seq_length()
        if position_ids is None:
            position_ids = torch.arange(past, past + m, device=input_ids.device).expand(b, m)
        x = self.model.embed_tokens(input_ids)
        rope = self._rope(position_ids, x.dtype)
        mask = None
        if attention_mask is not None or (m > 1 and past > 0):
            keys = torch.arange(past + m, device=x.device)
            mask = keys[None, :] <= (past + torch.arange(m, device=x.device))[:, None]
            mask = mask[None, None].expand(b, 1, m, past + m)
            if attention_mask is not None:
                mask = mask & attention_mask.bool()[:, None, None, :]
        for layer in self.model.layers:
            x = layer(x, rope, mask, cache)
        x = self.model.norm(x[:, -logits_to_keep:] if logits_to_keep else x)
        return Output(logits=self.lm_head(x), past_key_values=cache)


def load_llama(
    directory: Path,
    shape: LlamaShape,
    dtype: torch.dtype,
    device: str | torch.device,
    *,
    trainable: bool = False,
) -> LlamaLM:
    """The model with the weights of ``directory``'s ``*.safetensors`` files, for inference (eval
    mode, no gradients) or with ``trainable`` for training; a missing or mis-shaped tensor raises
    ``ValueError`` naming it."""
    from safetensors.torch import load_file

    state: dict[str, torch.Tensor] = {}
    for file in sorted(directory.glob("*.safetensors")):
        state.update(load_file(str(file)))
    state = {k: v for k, v in state.items() if not k.endswith("rotary_emb.inv_freq")}
    if shape.tie_embeddings:
        state.pop("lm_head.weight", None)
    model = LlamaLM(shape, directory)  # uninitialised (torch.empty): the weights are assigned
    own = model.state_dict()
    for name, tensor in own.items():
        if name == "lm_head.weight" and shape.tie_embeddings:
            continue
        if name not in state:
            raise ValueError(f"{directory}: the weights lack {name!r}")
        if tuple(state[name].shape) != tuple(tensor.shape):
            raise ValueError(
                f"{directory}: {name!r} has shape {tuple(state[name].shape)}, "
                f"config.json gives {tuple(tensor.shape)}"
            )
    extra = sorted(set(state) - set(own))
    if extra:
        raise ValueError(f"{directory}: tensors that are no Llama weight: {extra[:5]}")
    state = {k: v.to(dtype=dtype, device=device) for k, v in state.items()}
    model.load_state_dict(state, strict=False, assign=True)
    if shape.tie_embeddings:
        model.lm_head.weight = model.model.embed_tokens.weight
    model.inv_freq = model.inv_freq.to(device)
    model.train(trainable)
    model.requires_grad_(trainable)
    return model
