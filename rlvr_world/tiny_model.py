"""A tokenizer and a small causal LM built offline, for the embedded pipeline default.

``build_tokenizer(corpus, vocab_size)`` trains a byte-level BPE tokenizer on the run's own prompts
and targets (``<|bos|>`` prepended to every encoding, ``<|eos|>`` ends a target, ``<|pad|>``), so
the compact prompt of a small game is ~4x shorter than with a general tokenizer.
``build_model(...)`` makes a randomly initialised ``LlamaForCausalLM`` over it; ``tiny_lm`` builds
the pair and checks the special ids, ``save_tiny_lm`` saves both with ``save_pretrained``
(safetensors): the directory layout the SFT step, the trainer and the rollout service all read.
``build_tiny_lm`` does all three. The tests build their tiny models here too. Nothing is
downloaded. Heavy imports happen inside functions.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field

if TYPE_CHECKING:
    from transformers import LlamaForCausalLM, PreTrainedTokenizerFast

SPECIAL = ("<|bos|>", "<|eos|>", "<|pad|>")
BOS_ID, EOS_ID, PAD_ID = 0, 1, 2


class TinyLMConfig(BaseModel):
    """Shape of the from-scratch model and its tokenizer."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    vocab_size: int = Field(default=1024, ge=300, le=65_536, description="BPE vocabulary size")
    hidden_size: int = Field(default=128, ge=16, le=4096, description="hidden width")
    num_layers: int = Field(default=4, ge=1, le=48, description="decoder layers")
    num_heads: int = Field(default=4, ge=1, le=64, description="attention heads")
    max_positions: int = Field(default=1024, ge=64, le=32_768, description="context length")
    seed: int = Field(default=0, ge=0, description="initialisation seed")


def build_tokenizer(corpus: Iterable[str], vocab_size: int) -> PreTrainedTokenizerFast:
    """A fast byte-level BPE tokenizer trained on ``corpus`` (module docstring)."""
    from tokenizers import (
        Tokenizer,
        decoders,
        models,
        pre_tokenizers,
        processors,
        trainers,
    )
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIAL),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(list(corpus), trainer=trainer)
    tok.post_processor = processors.TemplateProcessing(
        single="<|bos|> $A", special_tokens=[("<|bos|>", BOS_ID)]
    )
    return PreTrainedTokenizerFast(  # type: ignore[no-untyped-call]  # transformers: unannotated
        tokenizer_object=tok, bos_token="<|bos|>", eos_token="<|eos|>", pad_token="<|pad|>"
    )


def build_model(cfg: TinyLMConfig, vocab_size: int) -> LlamaForCausalLM:
    """A random ``LlamaForCausalLM`` (deterministic for ``cfg.seed``)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(cfg.seed)
    config = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=cfg.hidden_size,
        intermediate_size=cfg.hidden_size * 2,
        num_hidden_layers=cfg.num_layers,
        num_attention_heads=cfg.num_heads,
        num_key_value_heads=cfg.num_heads,
        max_position_embeddings=cfg.max_positions,
        tie_word_embeddings=False,
        bos_token_id=BOS_ID,
        eos_token_id=EOS_ID,
        pad_token_id=PAD_ID,
    )
    model = LlamaForCausalLM(config)  # type: ignore[no-untyped-call]  # transformers: unannotated
    model.generation_config.eos_token_id = EOS_ID
    return model


def tiny_lm(
    corpus: Iterable[str], cfg: TinyLMConfig
) -> tuple[PreTrainedTokenizerFast, LlamaForCausalLM]:
    """The tokenizer trained on ``corpus`` and a random model over its vocabulary."""
    tokenizer = build_tokenizer(corpus, cfg.vocab_size)
    if tokenizer.convert_tokens_to_ids(list(SPECIAL)) != [BOS_ID, EOS_ID, PAD_ID]:
        raise RuntimeError("tokenizer: special tokens did not get ids 0, 1, 2")
    return tokenizer, build_model(cfg, len(tokenizer))


def save_tiny_lm(folder: Path, tokenizer: PreTrainedTokenizerFast, model: LlamaForCausalLM) -> Path:
    """Both saved into ``folder`` (safetensors weights); returns it."""
    folder.mkdir(parents=True, exist_ok=True)
    tokenizer.save_pretrained(folder)
    model.save_pretrained(folder, safe_serialization=True)
    return folder


def build_tiny_lm(folder: Path, corpus: Iterable[str], cfg: TinyLMConfig) -> Path:
    """Train the tokenizer, build the model, save both into ``folder``; returns it."""
    return save_tiny_lm(folder, *tiny_lm(corpus, cfg))
