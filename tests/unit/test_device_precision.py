"""The precision setting on the CPU: bf16 autocast really runs in the GRPO step and in SFT when
asked (the forward's matmuls come out in bfloat16, the weights stay float32), fp32 runs without
it, and the two agree to bf16's rounding; SFT's held-out loss per epoch is the token-weighted
mean target loss, and examples too long for it are counted, not silently kept."""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import torch

from rlvr_world.grpo.groups import TrainSample
from rlvr_world.items import text_game_item
from rlvr_world.tasks.text_game.kitchen import enumerate_transitions
from rlvr_world.tiny_model import TinyLMConfig, build_tiny_lm
from trainer.config import TinyModel, TrainerConfig
from trainer.model import build_tiny
from trainer.sft import SftConfig, run_sft
from trainer.sft_data import collate, encode, heldout_examples, heldout_loss, target_loss
from trainer.step import train_step

torch.set_num_threads(1)
CPU = torch.device("cpu")


@contextmanager
def linear_dtypes(model: torch.nn.Module) -> Iterator[set[torch.dtype]]:
    """The dtypes the model's Linear layers output while inside."""
    seen: set[torch.dtype] = set()
    hooks = [
        m.register_forward_hook(lambda _m, _i, out: seen.add(out.dtype))
        for m in model.modules()
        if isinstance(m, torch.nn.Linear)
    ]
    try:
        yield seen
    finally:
        for h in hooks:
            h.remove()


def _samples() -> list[TrainSample]:
    gen = torch.Generator().manual_seed(0)

    def ids(k: int) -> tuple[int, ...]:
        return tuple(int(t) for t in torch.randint(3, 100, (k,), generator=gen))

    return [
        TrainSample("g", ids(5), ids(6), (-2.0,) * 6, 1.0, 0.8, None),
        TrainSample("g", ids(5), ids(4), (-2.5,) * 4, 0.0, -0.8, None),
    ]


def _step(precision: str) -> tuple[float, float, set[torch.dtype], set[torch.dtype]]:
    cfg = TrainerConfig.model_validate(
        {"model": {"tiny": {"vocab_size": 128, "hidden_size": 32}}, "grpo": {"kl_coef": 0.0}}
    )
    assert cfg.model.tiny is not None
    policy = build_tiny(TinyModel(vocab_size=128, hidden_size=32, seed=3))
    opt = torch.optim.AdamW(policy.parameters(), lr=1e-3)
    with linear_dtypes(policy) as seen:
        stats = train_step(cfg, policy, None, opt, _samples(), device=CPU, precision=precision)
    weights = {p.dtype for p in policy.parameters()}
    return stats.loss, stats.grad_norm, seen, weights


def test_grpo_step_runs_under_bf16_autocast_on_the_cpu_when_asked() -> None:
    loss16, norm16, seen16, weights16 = _step("bf16")
    loss32, norm32, seen32, weights32 = _step("fp32")
    assert seen16 == {torch.bfloat16} and seen32 == {torch.float32}
    assert weights16 == weights32 == {torch.float32}  # master weights stay float32
    assert math.isfinite(loss16) and math.isfinite(norm16)
    assert loss16 == pytest.approx(loss32, abs=0.05)  # bf16 keeps ~3 significant digits
    assert norm16 == pytest.approx(norm32, rel=0.1)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[tuple[str, str]]]:
    items = [text_game_item(t, str(i)) for i, t in enumerate(enumerate_transitions(1)[:10])]
    pairs = [(i.prompt, i.target) for i in items]
    corpus = [p for p, _ in pairs] + [t for _, t in pairs]
    cfg = TinyLMConfig(vocab_size=400, hidden_size=32, num_layers=1, num_heads=2)
    return build_tiny_lm(tmp_path_factory.mktemp("base"), corpus, cfg), pairs


def test_sft_trains_in_bf16_on_the_cpu_and_measures_the_held_out_loss_each_epoch(
    tiny: tuple[Path, list[tuple[str, str]]], tmp_path: Path
) -> None:
    model_dir, pairs = tiny
    train, held = pairs[:7], pairs[7:]
    seen: list[tuple[int, float, float | None]] = []
    cfg = SftConfig(epochs=4, lr=5e-3, batch_size=3, warmup_steps=0, device="cpu")
    result = run_sft(
        model_dir,
        train,
        tmp_path / "bf16",
        cfg.model_copy(update={"precision": "bf16"}),
        on_epoch=lambda e, loss, h: seen.append((e, loss, h)),
        heldout=held,
    )
    assert (result.device, result.precision) == ("cpu", "bf16")
    assert len(result.losses) == len(result.heldout_losses) == 4
    assert [e for e, _, _ in seen] == [1, 2, 3, 4]
    assert [h for _, _, h in seen] == result.heldout_losses
    assert all(math.isfinite(x) for x in result.heldout_losses)
    assert result.losses[-1] < result.losses[0]
    assert result.heldout_losses[-1] < result.heldout_losses[0]  # the kitchen generalises
    fp32 = run_sft(model_dir, train, tmp_path / "fp32", cfg)  # no held-out pairs
    assert (fp32.precision, fp32.heldout_losses) == ("fp32", [])
    assert fp32.losses[0] == pytest.approx(result.losses[0], abs=0.05)


def test_held_out_loss_is_token_weighted_whatever_the_batch(
    tiny: tuple[Path, list[tuple[str, str]]],
) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model_dir, pairs = tiny
    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    model.train()
    examples = [encode(tok, p, t, 4096) for p, t in pairs[:5]]
    pad = int(tok.pad_token_id)
    with torch.no_grad():
        model.eval()
        whole = float(target_loss(model, *collate(examples, pad)))  # one batch: a token mean
        model.train()
    for size in (1, 2, 5):
        value = heldout_loss(model, examples, batch_size=size, pad=pad, precision="fp32")
        assert value == pytest.approx(whole, rel=1e-5)
    assert model.training  # its mode is restored


def test_held_out_examples_too_long_are_left_out_and_counted(
    tiny: tuple[Path, list[tuple[str, str]]],
) -> None:
    from transformers import AutoTokenizer

    model_dir, pairs = tiny
    tok = AutoTokenizer.from_pretrained(model_dir)
    lengths = [len(encode(tok, p, t, 100_000).input_ids) for p, t in pairs[:4]]
    limit = sorted(lengths)[1]
    kept, left_out = heldout_examples(tok, pairs[:4], limit)
    assert left_out == sum(1 for n in lengths if n > limit) > 0
    assert len(kept) + left_out == 4
    assert all(len(e.input_ids) <= limit for e in kept)
