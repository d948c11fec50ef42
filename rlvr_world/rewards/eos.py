"""End-of-sequence text in decoded responses: the one list every strict scorer strips.

A rollout decoded without ``skip_special_tokens`` (the reference's reward manager keeps special
tokens, and so does our orchestrator) ends with the tokenizer's end-of-sequence text. The strict
variants of the text-game and web scorers remove it before parsing, so that the last JSON object
or tree item is not corrupted; the ``paper`` variants keep it, as the authors' code does
(docs/reference.md, Q6). Every tokenizer this project ships or names has its EOS text here:
``tests/unit/test_eos.py`` checks the tiny model's and SmolLM2's.

Pure string code; no tokenizer is loaded here.
"""

from __future__ import annotations

EOS_TEXTS: tuple[str, ...] = (
    "<｜end▁of▁sentence｜>",  # DeepSeek-R1
    "<|endoftext|>",  # GPT-2, Qwen base, SmolLM2
    "<|im_end|>",  # Qwen / SmolLM2 chat
    "<|eot_id|>",  # Llama 3 chat
    "<|end_of_text|>",  # Llama 3 base
    "</s>",  # Llama 2, Mistral
    "<|eos|>",  # this project's tiny models (rlvr_world.tiny_model)
)


def strip_eos(text: str) -> str:
    """``text`` with every end-of-sequence text in ``EOS_TEXTS`` removed, wherever it stands."""
    for marker in EOS_TEXTS:
        if marker in text:
            text = text.replace(marker, "")
    return text
