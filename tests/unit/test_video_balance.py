"""Balancing the video reward's terms (``rlvr_world.apps.video.balance``), by hand-computed values
and on a real tiny model."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from rlvr_world.apps.video.balance import balanced_weights, group_spread, measure_spread
from rlvr_world.apps.video.config import VideoRl
from rlvr_world.rewards.perceptual import make_perceptual
from rlvr_world.video.actions import ActionQuantizer
from rlvr_world.video.layout import SingleStepVocab
from rlvr_world.video.tokenizer import FrameTokenizer, TokenizerConfig
from rlvr_world.video.train_mle import encode_clips
from rlvr_world.video.world_model import build_world_model

torch.set_num_threads(1)


def test_terms_get_equal_weighted_spread_and_the_sum_is_kept() -> None:
    out = balanced_weights({"l1": 1.0, "stlpips": 1.0}, {"l1": 0.001, "stlpips": 0.007})
    assert out["l1"] * 0.001 == pytest.approx(out["stlpips"] * 0.007)
    assert out["l1"] + out["stlpips"] == pytest.approx(2.0)
    assert out == pytest.approx({"l1": 1.75, "stlpips": 0.25})


def test_a_term_without_spread_or_weight_is_left_alone() -> None:
    out = balanced_weights({"l1": 2.0, "ssim": 1.0, "mse": 0.0}, {"l1": 0.5, "ssim": 0.0})
    assert out == {"l1": 2.0, "ssim": 1.0, "mse": 0.0}
    with pytest.raises(ValueError, match="no measurement for psnr"):
        balanced_weights({"l1": 1.0, "psnr": 1.0}, {"l1": 1.0})
    with pytest.raises(ValueError, match="no positive weight"):
        balanced_weights({"l1": 0.0}, {"l1": 1.0})


def test_group_spread_is_the_mean_within_group_std() -> None:
    losses = np.array([[0.0, 2.0], [1.0, 1.0]])
    assert group_spread(losses) == pytest.approx(0.5)
    with pytest.raises(ValueError, match="G >= 2"):
        group_spread(np.zeros((3, 1)))


def test_measure_spread_samples_groups_from_a_real_model() -> None:
    tok = FrameTokenizer(
        TokenizerConfig(image_size=32, channels=(8, 16), downsample=4, levels=(3, 3))
    )
    vocab = SingleStepVocab(visual_codes=tok.codebook_size, action_bins=8)
    rng = np.random.default_rng(0)
    clips = [
        (rng.integers(0, 255, (2, 32, 32, 3), dtype=np.uint8), rng.uniform(0, 512, (1, 2)))
        for _ in range(3)
    ]
    quantizer = ActionQuantizer(np.array([[0.0, 512.0], [0.0, 512.0]]), bins=8)
    seqs = encode_clips(clips, tok, quantizer, vocab)
    model = build_world_model(vocab, hidden=32, layers=1, heads=2, max_len=160)
    spread = measure_spread(
        model,
        tok,
        vocab,
        seqs,
        np.stack([f[-1] for f, _ in clips]),
        perceptual=make_perceptual("stlpips", "alex", device="cpu"),
        rl=VideoRl(weights={"l1": 1.0, "perceptual": 1.0}, group_size=3, temperature=1.0),
        seed=0,
    )
    assert set(spread) == {"l1", "stlpips"}
    assert all(v > 0 for v in spread.values())  # a random model's samples differ
