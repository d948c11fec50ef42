"""World model: build, save (weights + offline tokenizer + video.json), load with the Auto
classes, and generate through the rollout service's TransformersEngine from token-id prompts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from rlvr_world.video.layout import MultiStepVocab, SingleStepVocab
from rlvr_world.video.world_model import (
    VIDEO_JSON,
    build_tokenizer,
    build_world_model,
    load_world_model,
    read_spec,
    save_world_model,
    token_names,
    visual_ids,
)
from services.rollout.engine import SamplingParams
from services.rollout.transformers_engine import TransformersEngine

torch.set_num_threads(1)

VOCAB = SingleStepVocab(visual_codes=40, action_bins=16)
TINY = {"hidden": 64, "layers": 2, "heads": 4, "max_len": 64}
QUANT = {"ranges": [[0.0, 512.0], [0.0, 512.0]], "bins": 16}


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> Path:
    model = build_world_model(VOCAB, seed=3, **TINY)
    folder = tmp_path_factory.mktemp("wm")
    return save_world_model(
        model,
        VOCAB,
        folder,
        tokens_per_frame=4,
        context_length=2,
        action_quantizer=QUANT,
        extra={"frame_tokenizer": "tok/dir"},
    )


def test_build_is_llama_sized_by_config_and_seeded() -> None:
    a = build_world_model(VOCAB, seed=1, **TINY)
    b = build_world_model(VOCAB, seed=1, **TINY)
    cfg = a.config
    assert cfg.model_type == "llama" and cfg.hidden_act == "silu"
    assert (cfg.vocab_size, cfg.hidden_size, cfg.num_hidden_layers) == (VOCAB.size, 64, 2)
    assert (cfg.bos_token_id, cfg.eos_token_id, cfg.pad_token_id) == (56, 57, 57)
    assert cfg.max_position_embeddings == 64
    assert type(a.model.norm).__name__ == "LlamaRMSNorm"
    for (name, p), q in zip(a.named_parameters(), b.parameters(), strict=True):
        assert torch.equal(p, q), name


def test_build_rejects_bad_shapes() -> None:
    with pytest.raises(ValueError, match="heads"):
        build_world_model(VOCAB, hidden=60, heads=8, layers=1)
    with pytest.raises(ValueError, match="layers"):
        build_world_model(VOCAB, layers=0)


def test_token_names_cover_both_vocabularies() -> None:
    names = token_names(VOCAB)
    assert len(names) == VOCAB.size
    assert names[0] == "<v0>" and names[VOCAB.action_offset] == "<a0>"
    assert names[VOCAB.bos] == "<bos>" and names[VOCAB.eos] == "<eos>"
    multi = MultiStepVocab(dynamics_codes=5, context_codes=7, action_bins=3)
    names = token_names(multi)
    assert len(names) == multi.size
    assert names[multi.context_offset] == "<c0>" and names[multi.action_offset] == "<a0>"
    assert visual_ids(multi) == range(5) and visual_ids(VOCAB) == range(40)


def test_tokenizer_round_trips_ids() -> None:
    tok = build_tokenizer(VOCAB)
    ids = [0, 39, 40, 55, VOCAB.bos, 7, VOCAB.eos]
    text = tok.decode(ids)
    assert tok(text, add_special_tokens=False)["input_ids"] == ids
    assert len(tok) == VOCAB.size


def test_saved_dir_loads_with_auto_classes(saved: Path) -> None:
    assert (saved / "model.safetensors").is_file()
    spec = json.loads((saved / VIDEO_JSON).read_text())
    assert spec["vocab"] == {"kind": "SingleStepVocab", "visual_codes": 40, "action_bins": 16}
    assert spec["action_quantizer"] == QUANT and spec["frame_tokenizer"] == "tok/dir"
    model = AutoModelForCausalLM.from_pretrained(str(saved))
    tok = AutoTokenizer.from_pretrained(str(saved))
    assert model.config.vocab_size == VOCAB.size
    assert (tok.bos_token_id, tok.eos_token_id, tok.pad_token_id) == (56, 57, 57)
    loaded, wm_spec = load_world_model(saved)
    assert wm_spec.vocab == VOCAB and wm_spec.tokens_per_frame == 4
    assert wm_spec.extra == {"frame_tokenizer": "tok/dir"} and not loaded.training
    fresh = build_world_model(VOCAB, seed=3, **TINY)
    for (name, p), q in zip(fresh.named_parameters(), loaded.parameters(), strict=True):
        assert torch.equal(p, q), name


def test_engine_generates_from_token_id_prompts(saved: Path) -> None:
    engine = TransformersEngine(str(saved))
    assert engine.vocab_size == VOCAB.size and VOCAB.eos in engine.eos
    prompt = [1, 2, 3, 4, 40, 41, 5, 6, 7, 8, 42, 43, VOCAB.bos]
    params = SamplingParams(n=3, temperature=1.0, max_tokens=5, ignore_eos=True, seed=7)
    gen = engine.generate(prompt, params)
    assert gen.prompt_token_ids == prompt
    assert [len(s.token_ids) for s in gen.samples] == [5, 5, 5]
    assert all(0 <= t < VOCAB.size for s in gen.samples for t in s.token_ids)
    assert all(lp <= 0.0 for s in gen.samples for lp in s.logprobs)
    again = engine.generate(prompt, params)
    assert [s.token_ids for s in again.samples] == [s.token_ids for s in gen.samples]


def test_load_rejects_folder_without_spec(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=VIDEO_JSON):
        read_spec(tmp_path)
    (tmp_path / VIDEO_JSON).write_text(json.dumps({"vocab": {"kind": "Nope"}}))
    with pytest.raises(ValueError, match="tokens_per_frame"):
        read_spec(tmp_path)
