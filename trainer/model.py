"""Policy/reference models and per-token log-probs of responses.

Loads any Hugging Face causal LM (``AutoModelForCausalLM``) or builds a tiny random Llama,
optionally wraps it with LoRA (peft). With LoRA the reference is the same model with adapters
disabled; otherwise it is a frozen copy loaded from the same weights. Does no optimisation.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM, PreTrainedModel

from rlvr_world.grpo.groups import TrainSample
from trainer.config import ModelConfig, TinyModel

logger = logging.getLogger(__name__)


def build_tiny(cfg: TinyModel) -> PreTrainedModel:
    """A randomly initialised LlamaForCausalLM (deterministic for a seed)."""
    torch.manual_seed(cfg.seed)
    config = LlamaConfig(
        vocab_size=cfg.vocab_size,
        hidden_size=cfg.hidden_size,
        intermediate_size=cfg.hidden_size * 2,
        num_hidden_layers=cfg.num_layers,
        num_attention_heads=cfg.num_heads,
        num_key_value_heads=cfg.num_heads,
        max_position_embeddings=512,
        tie_word_embeddings=False,
    )
    return LlamaForCausalLM(config)  # type: ignore[no-untyped-call]


def load_base(cfg: ModelConfig, weights: Path | None = None) -> PreTrainedModel:
    """The full model: from ``weights`` (a checkpoint dir) if given, else from the config."""
    source = str(weights) if weights is not None else cfg.path
    if source is None:
        assert cfg.tiny is not None
        return build_tiny(cfg.tiny)
    model: PreTrainedModel = AutoModelForCausalLM.from_pretrained(source, dtype=torch.float32)
    return model


def wrap_lora(model: PreTrainedModel, cfg: ModelConfig, adapter: Path | None) -> torch.nn.Module:
    """Add trainable LoRA adapters (or load them from ``adapter``)."""
    from peft import LoraConfig, PeftModel, get_peft_model

    if adapter is not None:
        return PeftModel.from_pretrained(model, str(adapter), is_trainable=True)
    lcfg = LoraConfig(
        r=cfg.lora.r,
        lora_alpha=cfg.lora.alpha,
        lora_dropout=cfg.lora.dropout,
        target_modules=cfg.lora.target_modules,
        task_type="CAUSAL_LM",
    )
    return get_peft_model(model, lcfg)


def frozen_copy(model: torch.nn.Module) -> torch.nn.Module:
    """A deep copy with gradients off, in eval mode."""
    ref = copy.deepcopy(model)
    ref.requires_grad_(False)
    ref.eval()
    return ref


@dataclass(frozen=True)
class PackedBatch:
    """Right-padded prompt+response ids and the response positions of each row."""

    input_ids: torch.Tensor  # (B, L)
    attention_mask: torch.Tensor  # (B, L)
    gather_index: torch.Tensor  # (B, R): position in the shifted (L-1) axis of response token t
    response_ids: torch.Tensor  # (B, R)
    response_mask: torch.Tensor  # (B, R): 1 on trained response tokens (the sample's loss_mask)
    old_logprobs: torch.Tensor  # (B, R) behaviour log-probs
    advantages: torch.Tensor  # (B, R)


def pack(samples: Sequence[TrainSample], device: torch.device) -> PackedBatch:
    """Collate samples into tensors (pad id 0, masked out). The response mask is the sample's
    ``loss_mask`` (all ones when None): masked tokens stay in the input, as context of the tokens
    after them, but get no policy-gradient, KL or entropy term."""
    lengths = [len(s.prompt_token_ids) + len(s.token_ids) for s in samples]
    b, length, r = len(samples), max(lengths), max(len(s.token_ids) for s in samples)
    ids = torch.zeros(b, length, dtype=torch.long)
    attn = torch.zeros(b, length, dtype=torch.long)
    index = torch.zeros(b, r, dtype=torch.long)
    resp = torch.zeros(b, r, dtype=torch.long)
    rmask = torch.zeros(b, r)
    old = torch.zeros(b, r)
    adv = torch.zeros(b, r)
    for i, s in enumerate(samples):
        p, n = len(s.prompt_token_ids), len(s.token_ids)
        ids[i, : p + n] = torch.tensor(s.prompt_token_ids + s.token_ids)
        attn[i, : p + n] = 1
        index[i] = torch.clamp(torch.arange(r) + p - 1, max=length - 2)
        resp[i, :n] = torch.tensor(s.token_ids)
        if s.loss_mask is None:
            rmask[i, :n] = 1.0
        elif len(s.loss_mask) != n:
            raise ValueError(
                f"loss_mask of sample {i} has {len(s.loss_mask)} entries for {n} response tokens"
            )
        else:
            rmask[i, :n] = torch.tensor(s.loss_mask, dtype=rmask.dtype)
        old[i, :n] = torch.tensor(s.behaviour_logprobs)
        adv[i, :n] = s.advantage
    tensors = (ids, attn, index, resp, rmask, old, adv)
    return PackedBatch(*(t.to(device) for t in tensors))


def response_logits(model: torch.nn.Module, batch: PackedBatch, temperature: float) -> torch.Tensor:
    """Logits (B, R, V) that predict each response token, divided by the temperature.

    The model gets no attention mask: rows are right-padded (``pack``), so under causal attention
    no real token attends to a pad, and the logits at real positions are those of a padding-mask
    forward (default position ids are the same too); the model's own causal mask takes a faster
    attention path than an explicit one. Pad positions are never trained (``response_mask``).
    Only the gathered positions are cast and divided by the temperature, not all L x V logits
    (elementwise, so the values are the same)."""
    logits = model(input_ids=batch.input_ids).logits[:, :-1, :]
    index = batch.gather_index.unsqueeze(-1).expand(-1, -1, logits.shape[-1])
    return torch.gather(logits, 1, index).float() / temperature


def token_logprobs(logits: torch.Tensor, token_ids: torch.Tensor) -> torch.Tensor:
    """log p(token) under logits (B, R, V) -> (B, R)."""
    logp = torch.log_softmax(logits, dim=-1)
    return torch.gather(logp, -1, token_ids.unsqueeze(-1)).squeeze(-1)
