"""Perceptual distances on CUDA agree with the CPU (skipped with a reason where CUDA is absent)."""

from __future__ import annotations

import numpy as np
import pytest

from rlvr_world.rewards.perceptual import make_perceptual

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("net", ["alex", "vgg"])
def test_stlpips_cuda_matches_cpu(net: str) -> None:
    rng = np.random.default_rng(0)
    target = rng.random((6, 64, 64, 3))
    pred = np.clip(target + rng.normal(0.0, 0.1, target.shape), 0.0, 1.0)
    on_cpu = make_perceptual("stlpips", net, "cpu")(pred, target)
    on_gpu = make_perceptual("stlpips", net, "cuda")(pred, target)
    np.testing.assert_allclose(on_gpu, on_cpu, rtol=1e-3, atol=1e-4)
    assert (on_gpu > 0).all()
