"""The device and precision settings on CUDA (skipped with a reason where there is none; `make
gpu-check` runs these): ``auto`` picks the GPU and bf16 where it is supported, the GRPO step and
SFT train there under bf16 autocast, and the rollout engine on CUDA gives the CPU's greedy
tokens."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from rlvr_world.devices import Placement, resolve_device
from rlvr_world.grpo.groups import TrainSample
from rlvr_world.tiny_model import TinyLMConfig, build_tiny_lm
from trainer.config import TinyModel, TrainerConfig
from trainer.model import build_tiny
from trainer.sft import SftConfig, run_sft
from trainer.step import train_step

pytestmark = pytest.mark.gpu

CORPUS = [f"object {i} is moved to the box when the action is taken" for i in range(100)]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    cfg = TinyLMConfig(vocab_size=300, hidden_size=64, num_layers=2, num_heads=2)
    return build_tiny_lm(tmp_path_factory.mktemp("tiny"), CORPUS, cfg)


def test_auto_is_the_first_gpu_and_bf16_where_supported() -> None:
    placement = Placement.resolve("auto", "auto")
    assert placement.device == resolve_device("cuda") == "cuda:0"
    assert placement.precision == ("bf16" if torch.cuda.is_bf16_supported() else "fp32")


def test_the_grpo_step_trains_on_cuda_in_bf16() -> None:
    cfg = TrainerConfig.model_validate({"model": {"tiny": {}}, "grpo": {"kl_coef": 0.0}})
    device = torch.device("cuda:0")
    policy = build_tiny(TinyModel(vocab_size=128, hidden_size=32, seed=1)).to(device)
    opt = torch.optim.AdamW(policy.parameters(), lr=1e-3)
    samples = [
        TrainSample("g", (5, 6, 7), (8, 9, 10, 11), (-2.0,) * 4, 1.0, 0.7, None),
        TrainSample("g", (5, 6, 7), (12, 13), (-2.0,) * 2, 0.0, -0.7, None),
    ]
    stats = train_step(cfg, policy, None, opt, samples, device=device, precision="bf16")
    assert math.isfinite(stats.loss) and math.isfinite(stats.grad_norm) and not stats.skipped
    assert next(policy.parameters()).dtype == torch.float32


def test_sft_trains_on_cuda(tiny: Path, tmp_path: Path) -> None:
    pairs = [(f"where is object {i}?", f"object {i} is in the box") for i in range(16)]
    cfg = SftConfig(epochs=3, batch_size=4, lr=3e-3, warmup_steps=0, device="cuda")
    result = run_sft(tiny, pairs[:12], tmp_path / "sft", cfg, heldout=pairs[12:])
    assert result.device == "cuda:0"
    assert result.precision == ("bf16" if torch.cuda.is_bf16_supported() else "fp32")
    assert result.losses[-1] < result.losses[0] and len(result.heldout_losses) == 3


def test_the_rollout_engine_on_cuda_gives_the_cpu_s_greedy_tokens(tiny: Path) -> None:
    from services.rollout.engine import SamplingParams
    from services.rollout.transformers_engine import TransformersEngine

    params = SamplingParams(n=1, temperature=0.0, max_tokens=12, ignore_eos=True)
    prompt = "object 3 is moved"
    on_cpu = TransformersEngine(str(tiny), device="cpu").generate(prompt, params)
    gpu = TransformersEngine(str(tiny), device="cuda")
    assert str(gpu.device) == "cuda:0" and gpu.info().extra["device"] == "cuda:0"
    on_gpu = gpu.generate(prompt, params)
    assert on_gpu.samples[0].token_ids == on_cpu.samples[0].token_ids
