"""Token ids to text with a Hugging Face tokenizer; the checks the decoder server applies.

``special_tokens``: ``"keep"`` decodes without ``skip_special_tokens`` (the reference code's
behaviour: an EOS token stays in the text, and the paper-variant rewards expect it), ``"skip"``
drops special tokens; an empty value means ``"keep"``. Ids outside ``[0, len(tokenizer))`` are
refused with the index of the first one. No model is loaded.

A directory with a ``tokenizer.json`` (every fast tokenizer ``save_pretrained`` writes) is read
with the ``tokenizers`` library itself (``rlvr_world.text_tokenizer``): the text is the same as
``AutoTokenizer``'s, and the service starts without importing torch (transformers imports it,
~5 s of CPU on a 2-core machine). A GGUF file, a directory without ``tokenizer.json``, or a
WordPiece-style tokenizer that asks for transformers' space clean-up goes through
``AutoTokenizer``.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rlvr_world.text_tokenizer import RustTokenizer, rust_tokenizer_usable

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


class TextDecoder:
    """A tokenizer that decodes validated ids."""

    def __init__(self, path: str, gguf_file: str | None = None) -> None:
        self.name = path
        self.tokenizer: Any
        if gguf_file is None and rust_tokenizer_usable(Path(path)):
            self.tokenizer = RustTokenizer(Path(path))
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
