"""The tiny causal LM of the rollout and decoder service tests, built by ``rlvr_world.tiny_model``.

``build_tiny_lm(folder)`` trains the package's byte-level BPE tokenizer (300 ids; ``<|bos|>``,
``<|eos|>``, ``<|pad|>`` are 0, 1, 2) on a few sentences, builds the package's random Llama over it
(hidden 32, 2 layers, 4 heads; ``TINY``) and saves both, the layout the trainer writes, after
making EOS likely (``make_eos_likely``) so that sampled continuations also end with ``stop``.
Nothing is downloaded.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from rlvr_world.tiny_model import EOS_ID, TinyLMConfig, build_tokenizer, save_tiny_lm, tiny_lm

if TYPE_CHECKING:
    from transformers import LlamaForCausalLM, PreTrainedModel, PreTrainedTokenizerFast

CORPUS = (
    "the agent opens the door and walks into the kitchen",
    "the kettle is on the stove; the water is boiling",
    "New items: [button] Submit. Deleted items: none. Updated items: [link] Home",
    '{"modified": {"door": "open"}, "removed": [], "score": 1}',
    "you take the apple from the table and put it in the fridge",
)
#: The corpus the tokenizer is trained on: ``CORPUS`` four times (the merges depend on counts).
TRAINING_TEXT = CORPUS * 4
TINY = TinyLMConfig(vocab_size=300, hidden_size=32, num_layers=2, num_heads=4, max_positions=512)


def tiny_tokenizer() -> PreTrainedTokenizerFast:
    """The tokenizer alone (300 ids), for the decoder tests."""
    return build_tokenizer(TRAINING_TEXT, TINY.vocab_size)


def make_eos_likely(model: LlamaForCausalLM, eos_logit: float = 3.5, eos_id: int = EOS_ID) -> None:
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


def build_tiny_lm(folder: Path, cfg: TinyLMConfig = TINY, eos_logit: float | None = 3.5) -> Path:
    """Tokenizer and model of ``cfg`` saved into ``folder`` (EOS made likely unless
    ``eos_logit`` is None); returns it."""
    tokenizer, model = tiny_lm(TRAINING_TEXT, cfg)
    if eos_logit is not None:
        make_eos_likely(model, eos_logit)
    return save_tiny_lm(folder, tokenizer, model)


def load_model(path: Path | str) -> PreTrainedModel:
    """A saved model, in eval mode."""
    from transformers import AutoModelForCausalLM

    model: PreTrainedModel = AutoModelForCausalLM.from_pretrained(path)
    return model.eval()  # type: ignore[no-untyped-call,no-any-return]


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
