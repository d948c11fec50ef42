"""SFT warm-up on a tiny offline model: prompt tokens masked, loss falls, checkpoint layout."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlvr_world.items import text_game_item
from rlvr_world.tasks.text_game.kitchen import enumerate_transitions
from rlvr_world.tiny_model import EOS_ID, TinyLMConfig, build_tiny_lm
from trainer.sft import IGNORE, SftConfig, encode, run_sft


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[tuple[str, str]]]:
    import torch

    torch.set_num_threads(1)
    items = [text_game_item(t, str(i)) for i, t in enumerate(enumerate_transitions(1)[:6])]
    pairs = [(i.prompt, i.target) for i in items]
    corpus = [p for p, _ in pairs] + [t for _, t in pairs]
    cfg = TinyLMConfig(vocab_size=400, hidden_size=32, num_layers=1, num_heads=2)
    return build_tiny_lm(tmp_path_factory.mktemp("base"), corpus, cfg), pairs


def test_encode_masks_the_prompt_and_ends_with_eos(
    tiny: tuple[Path, list[tuple[str, str]]],
) -> None:
    from transformers import AutoTokenizer

    model_dir, pairs = tiny
    tok = AutoTokenizer.from_pretrained(model_dir)
    prompt, target = pairs[0]
    ex = encode(tok, prompt, target, max_length=4096)
    n_prompt = len(tok(prompt)["input_ids"])
    assert ex.labels[:n_prompt] == [IGNORE] * n_prompt
    assert ex.labels[n_prompt:] == ex.input_ids[n_prompt:]
    assert ex.input_ids[-1] == EOS_ID
    assert tok.decode(ex.input_ids[n_prompt:-1]) == target
    with pytest.raises(ValueError, match="max_length"):
        encode(tok, prompt, target, max_length=8)


def test_sft_lowers_the_target_loss_and_saves_a_loadable_checkpoint(
    tiny: tuple[Path, list[tuple[str, str]]], tmp_path: Path
) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model_dir, pairs = tiny
    cfg = SftConfig(epochs=4, lr=5e-3, batch_size=3, warmup_steps=0)
    result = run_sft(model_dir, pairs, tmp_path / "sft", cfg)
    assert result.steps == 8
    assert result.losses[-1] < result.losses[0]
    assert (tmp_path / "sft" / "model.safetensors").exists()
    AutoModelForCausalLM.from_pretrained(tmp_path / "sft")
    assert AutoTokenizer.from_pretrained(tmp_path / "sft").eos_token_id == EOS_ID


def test_sft_stops_at_its_step_budget(
    tiny: tuple[Path, list[tuple[str, str]]], tmp_path: Path
) -> None:
    """The MLE control continues SFT for GRPO's budget: max_steps ends mid-epoch, the checkpoint
    is still written, and the loss of a partial epoch is the mean of its steps."""
    model_dir, pairs = tiny
    cfg = SftConfig(epochs=1000, batch_size=2, max_steps=5, warmup_steps=0)
    result = run_sft(model_dir, pairs, tmp_path / "budget", cfg)
    assert result.steps == 5
    assert len(result.losses) == 2  # 3 steps per epoch of 6 examples: one full epoch, then 2 steps
    assert (tmp_path / "budget" / "model.safetensors").exists()


def test_learning_rate_schedules() -> None:
    from trainer.sft import _lr_at

    const = SftConfig(lr=1.0, warmup_steps=4)
    assert [_lr_at(s, const, 20) for s in (0, 3, 10, 19)] == [0.25, 1.0, 1.0, 1.0]
    cos = SftConfig(lr=1.0, warmup_steps=4, schedule="cosine")
    assert _lr_at(1, cos, 20) == 0.5  # warm-up first
    assert _lr_at(4, cos, 20) == 1.0
    assert _lr_at(12, cos, 20) == pytest.approx(0.5)
    assert _lr_at(20, cos, 20) == pytest.approx(0.0)
    assert _lr_at(30, cos, 20) == pytest.approx(0.0)  # past the end stays at 0
