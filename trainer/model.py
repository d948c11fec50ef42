"""Policy/reference models and per-token log-probs of responses.

Loads any Hugging Face causal LM (``AutoModelForCausalLM``) or builds a tiny random Llama,
optionally wraps it with LoRA (peft). With LoRA the reference is the same model with adapters
disabled; otherwise it is a frozen copy loaded from the same weights. Does no optimisation.

A Llama-shaped model directory trained without LoRA loads into ``rlvr_world.llama.LlamaLM`` (the
same logits and gradients as transformers' ``LlamaForCausalLM``, its parameter names and
checkpoint layout), so the trainer process starts without importing transformers (4-5 s of CPU
on a 2-core machine, while the rollout service starts beside it); ``model.backend:
transformers`` always uses transformers' classes.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, TypeAlias

import torch

from rlvr_world.grpo.groups import TrainSample
from rlvr_world.llama import LlamaLM, LlamaShape, llama_shape, load_llama
from trainer.config import ModelConfig, TinyModel

if TYPE_CHECKING:
    from peft import PeftModel
    from transformers import PreTrainedModel

#: The policy as the trainer holds it: transformers' model, the same model with LoRA adapters
#: (peft), or ``LlamaLM`` (module docstring); each has ``save_pretrained``.
Policy: TypeAlias = "PreTrainedModel | PeftModel | LlamaLM"

logger = logging.getLogger(__name__)


def build_tiny(cfg: TinyModel) -> PreTrainedModel:
    """A randomly initialised LlamaForCausalLM (deterministic for a seed)."""
    from transformers import LlamaConfig, LlamaForCausalLM

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
    return LlamaForCausalLM(config)  # type: ignore[no-untyped-call]  # transformers: unannotated


def load_base(
    cfg: ModelConfig, weights: Path | None = None, device: str | torch.device = "cpu"
) -> PreTrainedModel | LlamaLM:
    """The full model on ``device`` (float32): from ``weights`` (a checkpoint dir) if given, else
    from the config; on ``LlamaLM`` where it serves the model (module docstring)."""
    source = str(weights) if weights is not None else cfg.path
    if source is None:
        assert cfg.tiny is not None
        tiny = build_tiny(cfg.tiny)
        tiny.to(device)  # type: ignore[arg-type]  # transformers' @wraps(Module.to) drops self
        return tiny
    shape: LlamaShape | str = "model.backend transformers"
    if cfg.backend == "auto":
        shape = "LoRA (peft)" if cfg.lora.enabled else llama_shape(Path(source))
    if isinstance(shape, LlamaShape):
        return load_llama(Path(source), shape, torch.float32, device, trainable=True)
    logger.info("policy %s on transformers' classes: %s", source, shape)
    from transformers import AutoModelForCausalLM

    model: PreTrainedModel = AutoModelForCausalLM.from_pretrained(source, dtype=torch.float32)
    model.to(device)  # type: ignore[arg-type]  # transformers' @wraps(Module.to) drops self
    return model


def wrap_lora(
    model: PreTrainedModel | LlamaLM, cfg: ModelConfig, adapter: Path | None
) -> PeftModel:
    """Add trainable LoRA adapters (or load them from ``adapter``). ``model`` must be
    transformers' (``load_base`` never returns ``LlamaLM`` with LoRA on); ``TypeError`` if not."""
    from peft import LoraConfig, PeftModel, get_peft_model

    if isinstance(model, LlamaLM):
        raise TypeError("LoRA needs transformers' model class, not rlvr_world.llama.LlamaLM")
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
    #: Rows that share one prompt (a GRPO group), each computed once by ``response_logits``;
    #: empty when sharing would not save work (``pack``'s ``share_prompts``).
    shared: tuple[SharedPrompt, ...] = ()


@dataclass(frozen=True)
class SharedPrompt:
    """Rows of a packed batch whose prompts are the same ``prompt_len`` tokens."""

    rows: tuple[int, ...]
    prompt_len: int
    response_len: int  # the longest response among the rows


def pack(
    samples: Sequence[TrainSample], device: torch.device, *, share_prompts: bool = True
) -> PackedBatch:
    """Collate samples into tensors (pad id 0, masked out). The response mask is the sample's
    ``loss_mask`` (all ones when None): masked tokens stay in the input, as context of the tokens
    after them, but get no policy-gradient, KL or entropy term.

    ``share_prompts``: rows with the same prompt are recorded in ``shared`` when the batch has at
    most half as many distinct prompts as rows (GRPO's groups), so ``response_logits`` runs each
    prompt once; otherwise (or False) ``shared`` is empty and every row is one full forward."""
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
        if s.token_advantages is None:
            adv[i, :n] = s.advantage
        elif len(s.token_advantages) != n:
            raise ValueError(
                f"token_advantages of sample {i} has {len(s.token_advantages)} entries for {n} "
                "response tokens"
            )
        else:
            adv[i, :n] = torch.tensor(s.token_advantages, dtype=adv.dtype)
    ids, attn, index, resp, rmask, old, adv = (
        t.to(device) for t in (ids, attn, index, resp, rmask, old, adv)
    )
    shared = _shared_prompts(samples) if share_prompts else ()
    return PackedBatch(ids, attn, index, resp, rmask, old, adv, shared=shared)


def _shared_prompts(samples: Sequence[TrainSample]) -> tuple[SharedPrompt, ...]:
    rows: dict[tuple[int, ...], list[int]] = {}
    for i, s in enumerate(samples):
        rows.setdefault(tuple(s.prompt_token_ids), []).append(i)
    if not samples or 2 * len(rows) > len(samples) or any(not p for p in rows):
        return ()
    return tuple(
        SharedPrompt(tuple(r), len(p), max(len(samples[i].token_ids) for i in r))
        for p, r in rows.items()
    )


def response_logits(model: torch.nn.Module, batch: PackedBatch, temperature: float) -> torch.Tensor:
    """Logits (B, R, V) that predict each response token, divided by the temperature.

    The model gets no attention mask: rows are right-padded (``pack``), so under causal attention
    no real token attends to a pad, and the logits at real positions are those of a padding-mask
    forward (default position ids are the same too); the model's own causal mask takes a faster
    attention path than an explicit one. Pad positions are never trained (``response_mask``).
    Only the gathered positions are cast and divided by the temperature, not all L x V logits
    (elementwise, so the values are the same).

    With ``batch.shared`` (and no dropout active in ``model``), each shared prompt runs once: its
    forward yields the first response token's logits and a KV cache, which is repeated for the
    group's rows and continued with their responses (positions after the prompt). The logits
    are those of the full forward up to float rounding (``tests/unit/test_response_logits.py``),
    and gradients reach the prompt's computation through the cache. Positions past a row's
    response are zeros (never trained). A model that returns no cache (gradient checkpointing)
    gets the full forward."""
    if batch.shared and not _dropout_active(model):
        shared = _shared_response_logits(model, batch)
        if shared is not None:
            return shared.float() / temperature
    logits = model(input_ids=batch.input_ids).logits[:, :-1, :]
    index = batch.gather_index.unsqueeze(-1).expand(-1, -1, logits.shape[-1])
    return torch.gather(logits, 1, index).float() / temperature


def _dropout_active(model: torch.nn.Module) -> bool:
    """Whether a dropout with p > 0 is in training mode (sharing a prompt's forward would share
    its dropout mask across the group's rows, a different estimator)."""
    return model.training and any(
        isinstance(m, torch.nn.Dropout) and m.p > 0 and m.training for m in model.modules()
    )


def _shared_response_logits(model: torch.nn.Module, batch: PackedBatch) -> torch.Tensor | None:
    """None when the model returns no KV cache (e.g. gradient checkpointing turns it off)."""
    width = batch.response_ids.shape[1]
    parts: list[torch.Tensor] = []
    order: list[int] = []
    for group in batch.shared:
        rows = torch.tensor(group.rows, device=batch.input_ids.device)
        p, n, k = group.prompt_len, group.response_len, len(group.rows)
        head = model(input_ids=batch.input_ids[rows[:1], :p], use_cache=True)
        first = head.logits[:, -1:, :].expand(k, -1, -1)
        cache = head.past_key_values
        if cache is None:
            return None
        if n > 1:
            cache.batch_repeat_interleave(k)
            tail = batch.input_ids[rows, p : p + n - 1]
            positions = torch.arange(p, p + n - 1, device=tail.device).expand(k, -1)
            rest = model(
                input_ids=tail, past_key_values=cache, position_ids=positions, use_cache=False
            ).logits
            logits = torch.cat([first, rest], dim=1)
        else:
            logits = first
        logits = logits[:, :width]  # a group of empty responses: no position to keep
        parts.append(torch.nn.functional.pad(logits, (0, 0, 0, width - logits.shape[1])))
        order.extend(group.rows)
    inverse = torch.empty(len(order), dtype=torch.long)
    inverse[torch.tensor(order)] = torch.arange(len(order))
    return torch.cat(parts)[inverse.to(parts[0].device)]


def token_logprobs(logits: torch.Tensor, token_ids: torch.Tensor) -> torch.Tensor:
    """log p(token) under logits (B, R, V) -> (B, R)."""
    logp = torch.log_softmax(logits, dim=-1)
    return torch.gather(logp, -1, token_ids.unsqueeze(-1)).squeeze(-1)
