"""Token ids to text with a Hugging Face tokenizer; the checks the decoder server applies.

``special_tokens``: ``"keep"`` decodes without ``skip_special_tokens`` (the reference code's
behaviour: an EOS token stays in the text, and the paper-variant rewards expect it), ``"skip"``
drops special tokens; an empty value means ``"keep"``. Ids outside ``[0, len(tokenizer))`` are
refused with the index of the first one. No model is loaded.

A directory with a ``tokenizer.json`` (every fast tokenizer ``save_pretrained`` writes) is read
with the ``tokenizers`` library itself, with the special tokens ``tokenizer_config.json`` names
marked special as transformers marks them: the text is the same as ``AutoTokenizer``'s (tested on
the tiny tokenizers and SmolLM2's), and the service starts without importing torch (transformers
imports it, ~5 s of CPU on a 2-core machine). A GGUF file, a directory without
``tokenizer.json``, or a WordPiece-style tokenizer that asks for transformers' space clean-up
goes through ``AutoTokenizer``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

SPECIAL_TOKEN_MODES = ("keep", "skip")


class InvalidDecodeRequest(ValueError):
    """Bad input (INVALID_ARGUMENT); the message names the field."""


def check_mode(mode: str, field: str = "special_tokens") -> bool:
    """True to skip special tokens; ``InvalidDecodeRequest`` for an unknown mode."""
    if mode in ("", "keep"):
        return False
    if mode == "skip":
        return True
    raise InvalidDecodeRequest(f"{field} = {mode!r}: must be 'keep' or 'skip' (empty: keep)")


def check_ids(ids: Sequence[int], vocab_size: int, field: str = "token_ids") -> list[int]:
    """The ids as a list; ``InvalidDecodeRequest`` names the first one outside the vocabulary."""
    out = [int(i) for i in ids]
    for index, token in enumerate(out):
        if not 0 <= token < vocab_size:
            raise InvalidDecodeRequest(
                f"{field}[{index}] = {token} is outside the vocabulary [0, {vocab_size})"
            )
    return out


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


class _RustTokenizer:
    """The ``tokenizers`` object behind a fast tokenizer, decoding as ``AutoTokenizer`` does."""

    def __init__(self, directory: Path) -> None:
        from tokenizers import AddedToken, Tokenizer

        self._tok = Tokenizer.from_file(str(directory / "tokenizer.json"))
        config_path = directory / "tokenizer_config.json"
        config = json.loads(config_path.read_text()) if config_path.is_file() else {}
        specials = special_tokens_of(config)
        if specials:
            self._tok.add_special_tokens([AddedToken(t, special=True) for t in specials])

    def __len__(self) -> int:
        return int(self._tok.get_vocab_size(with_added_tokens=True))

    def decode(self, ids: list[int], skip_special_tokens: bool) -> str:
        return str(self._tok.decode(ids, skip_special_tokens=skip_special_tokens))


def rust_tokenizer_usable(directory: Path) -> bool:
    """True where ``_RustTokenizer`` gives ``AutoTokenizer``'s text (module docstring)."""
    if not (directory / "tokenizer.json").is_file():
        return False
    config_path = directory / "tokenizer_config.json"
    try:
        config = json.loads(config_path.read_text()) if config_path.is_file() else {}
        model_type = json.loads((directory / "tokenizer.json").read_text())["model"]["type"]
    except (OSError, ValueError, KeyError, TypeError):
        return False  # AutoTokenizer gives the reason
    # transformers applies its space clean-up only to non-BPE tokenizers that ask for it
    return not (config.get("clean_up_tokenization_spaces") and model_type != "BPE")


class TextDecoder:
    """A tokenizer that decodes validated ids."""

    def __init__(self, path: str, gguf_file: str | None = None) -> None:
        self.name = path
        self.tokenizer: Any
        if gguf_file is None and rust_tokenizer_usable(Path(path)):
            self.tokenizer = _RustTokenizer(Path(path))
            self.backend = "tokenizers"
        else:
            from transformers import AutoTokenizer

            kwargs: dict[str, Any] = {} if gguf_file is None else {"gguf_file": gguf_file}
            self.tokenizer = AutoTokenizer.from_pretrained(path, **kwargs)
            self.backend = "transformers"
        self.vocab_size = len(self.tokenizer)

    def decode(self, ids: Sequence[int], mode: str, field: str = "") -> str:
        """Text of ``ids``; ``field`` prefixes the names in error messages (``requests[3].``)."""
        skip = check_mode(mode, f"{field}special_tokens")
        valid = check_ids(ids, self.vocab_size, f"{field}token_ids")
        return str(self.tokenizer.decode(valid, skip_special_tokens=skip))
