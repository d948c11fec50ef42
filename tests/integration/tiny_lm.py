"""A tiny causal LM and tokenizer built offline, for the rollout and decoder service tests.

``build_tiny_lm(folder)`` trains a byte-level BPE tokenizer (~300 ids, with ``<|bos|>``,
``<|eos|>``, ``<|pad|>``) on a few sentences, builds a random 2-layer ``LlamaForCausalLM`` with
hidden size 32 over it, and saves both with ``save_pretrained`` (safetensors), the layout the
trainer writes. Nothing is downloaded.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

SPECIAL = ("<|bos|>", "<|eos|>", "<|pad|>")
CORPUS = (
    "the agent opens the door and walks into the kitchen",
    "the kettle is on the stove; the water is boiling",
    "New items: [button] Submit. Deleted items: none. Updated items: [link] Home",
    '{"modified": {"door": "open"}, "removed": [], "score": 1}',
    "you take the apple from the table and put it in the fridge",
)


def build_tokenizer(vocab_size: int = 300) -> Any:
    """A fast byte-level BPE tokenizer trained on ``CORPUS`` (BOS prepended to every encoding)."""
    from tokenizers import (  # type: ignore[import-untyped]
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
    tok.train_from_iterator(CORPUS * 4, trainer=trainer)
    bos = tok.token_to_id("<|bos|>")
    tok.post_processor = processors.TemplateProcessing(
        single="<|bos|> $A", special_tokens=[("<|bos|>", bos)]
    )
    return PreTrainedTokenizerFast(  # type: ignore[no-untyped-call]
        tokenizer_object=tok, bos_token="<|bos|>", eos_token="<|eos|>", pad_token="<|pad|>"
    )


def build_model(vocab_size: int, seed: int = 0, tie: bool = False) -> Any:
    """A random LlamaForCausalLM (hidden 32, 2 layers), deterministic for ``seed``."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=512,
        tie_word_embeddings=tie,
        bos_token_id=0,
        eos_token_id=1,
        pad_token_id=2,
    )
    model = LlamaForCausalLM(config)  # type: ignore[no-untyped-call]
    model.generation_config.eos_token_id = 1
    return model


def make_eos_likely(model: Any, eos_logit: float = 3.5, eos_id: int = 1) -> None:
    """Give EOS a logit of about ``eos_logit`` at every position (p(EOS) ~ 0.1 for 300 ids).

    Residual dimension 0 is pinned to 10 (embeddings; attention and MLP outputs write nothing
    there), so after the final RMSNorm it is ~sqrt(hidden) everywhere; only EOS reads it."""
    import torch

    hidden = model.config.hidden_size
    with torch.no_grad():
        model.model.embed_tokens.weight[:, 0] = 10.0
        for layer in model.model.layers:
            layer.self_attn.o_proj.weight[0, :] = 0.0
            layer.mlp.down_proj.weight[0, :] = 0.0
        model.model.norm.weight[0] = 1.0
        model.lm_head.weight[:, 0] = 0.0
        model.lm_head.weight[eos_id, 0] = eos_logit / hidden**0.5


def build_tiny_lm(
    folder: Path, seed: int = 0, tie: bool = False, eos_logit: float | None = 3.5
) -> Path:
    """Save a tokenizer and a random model into ``folder``; returns it."""
    tokenizer = build_tokenizer()
    assert tokenizer.convert_tokens_to_ids(list(SPECIAL)) == [0, 1, 2]
    model = build_model(len(tokenizer), seed=seed, tie=tie)
    if eos_logit is not None and not tie:
        make_eos_likely(model, eos_logit)
    folder.mkdir(parents=True, exist_ok=True)
    tokenizer.save_pretrained(folder)
    model.save_pretrained(folder, safe_serialization=True)
    return folder


def load_model(path: Path | str) -> Any:
    """A saved model, in eval mode."""
    from transformers import AutoModelForCausalLM

    model: Any = AutoModelForCausalLM.from_pretrained(path)
    return model.eval()


def perturbed_checkpoint(source: Path, folder: Path, seed: int, scale: float = 0.5) -> Path:
    """A trainer-style checkpoint dir of the model in ``source`` with every weight perturbed."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(source)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for param in model.parameters():
            param.add_(scale * torch.randn(param.shape, generator=gen))
    model.save_pretrained(folder, safe_serialization=True)
    return folder
