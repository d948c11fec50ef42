"""Batched perceptual scoring of GRPO groups: each distinct target frame goes through the backbone
once per micro-batch, and the distances equal the module's own, pair by pair."""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

for _module in ("torch", "lpips", "stlpips_pytorch"):
    pytest.importorskip(_module, reason="perceptual metrics need the video extra")

import lpips as lpips_pkg  # noqa: E402
import torch  # noqa: E402

from rlvr_world.rewards.perceptual import TorchPerceptualScorer, make_perceptual  # noqa: E402


@pytest.fixture(autouse=True)
def _one_thread() -> Iterator[None]:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def module_distances(scorer: TorchPerceptualScorer, pred: Any, target: Any) -> Any:
    """The wrapped module's own forward, one pair per call."""
    with torch.inference_mode():
        return np.array(
            [
                scorer.module(
                    scorer._to_tensor(pred[i : i + 1]),
                    scorer._to_tensor(target[i : i + 1]),
                    normalize=True,
                )
                .mean()
                .item()
                for i in range(len(pred))
            ]
        )


def grpo_pairs(groups: int, group: int, side: int, channels: int = 3) -> tuple[Any, Any]:
    """Predictions and targets of ``groups`` GRPO groups, interleaved (not sorted by target)."""
    rng = np.random.default_rng(0)
    pred = rng.random((groups * group, side, side, channels), dtype=np.float32)
    targets = rng.random((groups, side, side, channels), dtype=np.float32)
    return pred, targets[np.arange(groups * group) % groups]


class CountingNet(torch.nn.Module):
    """Wraps a backbone and counts the frames it sees."""

    def __init__(self, net: torch.nn.Module) -> None:
        super().__init__()
        self.inner = net
        self.frames = 0

    def forward(self, x: torch.Tensor) -> Any:
        self.frames += int(x.shape[0])
        return self.inner(x)


@pytest.fixture(scope="module")
def stlpips_alex() -> TorchPerceptualScorer:
    scorer = make_perceptual("stlpips", "alex", "cpu", batch_size=8)
    assert isinstance(scorer, TorchPerceptualScorer)
    return scorer


def test_stlpips_grpo_groups_equal_the_module_pair_by_pair(
    stlpips_alex: TorchPerceptualScorer,
) -> None:
    pred, target = grpo_pairs(groups=3, group=4, side=32)
    target[7] = 0.5  # one pair with a target of its own
    got = stlpips_alex(pred, target)
    want = module_distances(stlpips_alex, pred, target)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-7)
    assert len(set(np.round(got, 6))) == len(got)  # each pair its own value, in request order


def test_each_distinct_target_is_one_forward_per_micro_batch(
    stlpips_alex: TorchPerceptualScorer,
) -> None:
    counting = CountingNet(stlpips_alex.module.net)  # type: ignore[arg-type]
    original = stlpips_alex.module.net
    stlpips_alex.module.net = counting
    try:
        pred, target = grpo_pairs(groups=2, group=8, side=32)  # 16 pairs, micro-batches of 8
        stlpips_alex(pred, target)
        # grouped by target: each micro-batch holds one group: 8 predictions + 1 target, twice
        assert counting.frames == 2 * (8 + 1)
        counting.frames = 0
        distinct = np.random.default_rng(1).random(pred.shape, dtype=np.float32)
        stlpips_alex(pred, distinct)
        assert counting.frames == 2 * len(pred)  # nothing shared: both sides of every pair
    finally:
        stlpips_alex.module.net = original


def test_lpips_one_channel_shared_target_equals_the_module() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        # heads from the wheel, random backbone: the arithmetic is what is compared here
        module = lpips_pkg.LPIPS(net="alex", pretrained=True, pnet_rand=True, verbose=False)
    scorer = TorchPerceptualScorer("lpips", "alex", module.eval(), "cpu", batch_size=3)
    pred, target = grpo_pairs(groups=1, group=5, side=32, channels=1)
    np.testing.assert_allclose(
        scorer(pred, target), module_distances(scorer, pred, target), rtol=1e-5, atol=1e-7
    )
