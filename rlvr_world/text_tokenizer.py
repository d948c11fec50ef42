"""A fast tokenizer read from its ``tokenizer.json`` with the ``tokenizers`` library alone.

Every fast tokenizer's ``save_pretrained`` writes ``tokenizer.json``; read directly, it encodes
and decodes as ``AutoTokenizer`` does without importing transformers (which imports torch and, in
transformers' model classes, ``torch._dynamo``: seconds of start-up on a small machine). The
special tokens that ``tokenizer_config.json`` names are marked special as transformers marks
them. ``rust_tokenizer_usable`` says where this gives ``AutoTokenizer``'s ids and text (tested on
the tiny tokenizers and SmolLM2's, ``tests/unit/test_decoder_backend.py``,
``tests/unit/test_llama_engine.py``); elsewhere (a GGUF file, no ``tokenizer.json``, a
WordPiece-style tokenizer that asks for transformers' space clean-up, a config that asks
transformers to add BOS/EOS itself) callers use ``AutoTokenizer``. Used by the decoder service
and the rollout engine.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

#: ``tokenizer_config.json`` keys whose tokens transformers marks special.
SPECIAL_TOKEN_KEYS = (
    "bos_token",
    "eos_token",
    "unk_token",
    "sep_token",
    "pad_token",
    "cls_token",
    "mask_token",
)


def _token_text(value: Any) -> str | None:
    """A special token as ``tokenizer_config.json`` writes it: a string or ``{"content": ...}``."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and isinstance(value.get("content"), str):
        return str(value["content"])
    return None


def special_tokens_of(config: dict[str, Any]) -> list[str]:
    """Every token ``tokenizer_config.json`` declares special, in a stable order."""
    names = [_token_text(config.get(key)) for key in SPECIAL_TOKEN_KEYS]
    for key in ("additional_special_tokens", "extra_special_tokens"):
        extra = config.get(key) or []
        names += [_token_text(v) for v in (extra.values() if isinstance(extra, dict) else extra)]
    decoder = config.get("added_tokens_decoder") or {}
    names += [_token_text(v) for v in decoder.values() if isinstance(v, dict) and v.get("special")]
    out: list[str] = []
    for name in names:
        if name and name not in out:
            out.append(name)
    return out


def _config(directory: Path) -> dict[str, Any]:
    path = directory / "tokenizer_config.json"
    return json.loads(path.read_text()) if path.is_file() else {}


class RustTokenizer:
    """The ``tokenizers`` object behind a fast tokenizer, encoding and decoding as
    ``AutoTokenizer`` does (``rust_tokenizer_usable``)."""

    def __init__(self, directory: Path) -> None:
        from tokenizers import AddedToken, Tokenizer

        self._tok = Tokenizer.from_file(str(directory / "tokenizer.json"))
        config = _config(directory)
        specials = special_tokens_of(config)
        if specials:
            self._tok.add_special_tokens([AddedToken(t, special=True) for t in specials])
        eos = _token_text(config.get("eos_token"))
        self.eos_token_id: int | None = None if eos is None else self._tok.token_to_id(eos)

    def __len__(self) -> int:
        return int(self._tok.get_vocab_size(with_added_tokens=True))

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        """Token ids of ``text`` (with the post-processor's specials when asked)."""
        return list(self._tok.encode(text, add_special_tokens=add_special_tokens).ids)

    def decode(self, ids: list[int], skip_special_tokens: bool = False) -> str:
        """The text of ``ids``."""
        return str(self._tok.decode(ids, skip_special_tokens=skip_special_tokens))


def rust_tokenizer_usable(directory: Path, *, encoding: bool = False) -> bool:
    """True where ``RustTokenizer`` decodes (and with ``encoding``, also encodes) as
    ``AutoTokenizer`` does (module docstring)."""
    if not (directory / "tokenizer.json").is_file():
        return False
    try:
        config = _config(directory)
        model_type = json.loads((directory / "tokenizer.json").read_text())["model"]["type"]
    except (OSError, ValueError, KeyError, TypeError):
        return False  # AutoTokenizer gives the reason
    if encoding and (config.get("add_bos_token") or config.get("add_eos_token")):
        return False  # some transformers classes add these themselves, not the post-processor
    # transformers applies its space clean-up only to non-BPE tokenizers that ask for it
    return not (config.get("clean_up_tokenization_spaces") and model_type != "BPE")
