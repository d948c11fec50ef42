"""SFT warm-up on a tiny offline model: prompt tokens masked, loss falls, checkpoint layout."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlvr_world.items import text_game_item
from rlvr_world.tasks.text_game.kitchen import enumerate_transitions
from rlvr_world.tiny_model import EOS_ID, TinyLMConfig, build_tiny_lm
from trainer.sft import (
    IGNORE,
    SftConfig,
    collate,
    encode,
    group_batches,
    prompt_groups,
    run_sft,
    shared_target_loss,
    target_loss,
)


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


def test_prompt_groups_join_prompts_that_differ_only_in_the_last_line() -> None:
    pairs = [
        ("State: A\nAction: x\n", "t0"),
        ("State: B\nAction: x\n", "t1"),
        ("State: A\nAction: y\n", "t2"),
        ("State: A\nAction: z", "t3"),  # no trailing newline: the same state
    ]
    assert prompt_groups(pairs) == [[0, 2, 3], [1]]


def test_group_batches_cover_every_example_once_in_chunks_of_one_group() -> None:
    import random

    groups = [[0, 1, 2], [3], [4, 5, 6, 7, 8, 9, 10], [11, 12]]
    owner = {i: k for k, g in enumerate(groups) for i in g}
    for group_rows, most in ((0, 4), (2, 2)):
        steps = group_batches(groups, 4, random.Random(0), group_rows)
        assert sorted(i for step in steps for g in step for i in g) == list(range(13))
        assert all(sum(len(g) for g in step) >= 4 for step in steps[:-1])
        for chunk in (g for step in steps for g in step):
            assert 1 <= len(chunk) <= most
            assert len({owner[i] for i in chunk}) == 1  # a chunk is part of one group
    # the group of 7 becomes chunks of 4 and 3 (group_rows 0: up to batch_size)
    sizes = sorted(
        len(c)
        for step in group_batches(groups, 4, random.Random(1))
        for c in step
        if owner[c[0]] == 2
    )
    assert sizes == [3, 4]
    # a new epoch (the same rng, drawn on) shuffles the chunks' members
    rng = random.Random(2)
    epochs = [group_batches(groups, 4, rng, 2) for _ in range(4)]
    assert len({str(e) for e in epochs}) > 1


def test_shared_loss_equals_the_full_forward_loss_and_gradient(
    tiny: tuple[Path, list[tuple[str, str]]],
) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model_dir, pairs = tiny
    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    examples = [encode(tok, p, t, 4096) for p, t in pairs]
    groups = prompt_groups(pairs)
    assert any(len(g) > 1 for g in groups), "the fixture must have states with several actions"
    order = [i for g in groups for i in g]
    batch = [examples[i] for i in order]
    local, k = [], 0
    for g in groups:
        local.append(list(range(k, k + len(g))))
        k += len(g)
    full = target_loss(model, *collate(batch, 0))
    full.backward()  # type: ignore[no-untyped-call]
    want = [torch.zeros(0) if w.grad is None else w.grad.clone() for w in model.parameters()]
    model.zero_grad()
    shared = shared_target_loss(model, batch, local)
    shared.backward()  # type: ignore[no-untyped-call]
    assert float(shared.detach()) == pytest.approx(float(full.detach()), rel=1e-5)
    for w, expected in zip(model.parameters(), want, strict=True):
        torch.testing.assert_close(w.grad, expected, rtol=1e-4, atol=1e-6)


def test_shared_sft_trains_and_keeps_the_step_budget(
    tiny: tuple[Path, list[tuple[str, str]]], tmp_path: Path
) -> None:
    model_dir, pairs = tiny
    cfg = SftConfig(epochs=4, lr=5e-3, batch_size=3, warmup_steps=0, share_prompts=True)
    result = run_sft(model_dir, pairs, tmp_path / "sft", cfg)
    assert result.losses[-1] < result.losses[0]
    capped = run_sft(model_dir, pairs, tmp_path / "cap", cfg.model_copy(update={"max_steps": 2}))
    assert capped.steps == 2
