"""Per-patch perceptual credit: a scorer's spatial map averaged over a patch grid, the package's
own ``spatial=True`` output as the reference, and its place in ``score_video``'s patch rewards.

Bad input, and what it gets: a grid that does not split the frames into equal patches raises
``InvalidInput`` from ``patch_distances`` (``score_video`` answers ``invalid_input`` before any
scorer runs); a scorer whose patch values have the wrong shape or are not finite gives status
``error`` with the reason; a module without a spatial map gives every patch the frame's distance.
"""

from __future__ import annotations

import numpy as np
import pytest

for _module in ("torch", "stlpips_pytorch"):
    pytest.importorskip(_module, reason="perceptual metrics need the video extra")

import torch  # noqa: E402

from rlvr_world.rewards.perceptual import TorchPerceptualScorer, make_perceptual  # noqa: E402
from rlvr_world.rewards.types import InvalidInput, Status  # noqa: E402
from rlvr_world.rewards.video import VideoRewardConfig, score_video  # noqa: E402

GRID = (8, 8)


@pytest.fixture(scope="module")
def stlpips_vgg() -> TorchPerceptualScorer:
    scorer = make_perceptual("stlpips", "vgg", "cpu", batch_size=3)
    assert isinstance(scorer, TorchPerceptualScorer)
    return scorer


def scene(seed: int = 0, side: int = 64) -> np.ndarray:
    """A smooth frame (a PushT-like background with a block), values in [0, 1]."""
    rng = np.random.default_rng(seed)
    frame = np.full((side, side, 3), 0.9) + rng.normal(0.0, 0.01, (side, side, 3))
    frame[20:36, 24:40] = (0.4, 0.5, 0.8)
    return np.clip(frame, 0.0, 1.0)


def test_patch_values_are_the_packages_spatial_map_per_patch(
    stlpips_vgg: TorchPerceptualScorer,
) -> None:
    target = np.stack([scene(0), scene(1)])[[0, 0, 1, 1]]  # two pairs share each target frame
    pred = np.clip(target + np.random.default_rng(2).normal(0.0, 0.05, target.shape), 0.0, 1.0)
    dist, cells = stlpips_vgg.patch_distances(pred, target, GRID)
    np.testing.assert_array_equal(dist, stlpips_vgg(pred, target))  # the same distances
    module = stlpips_vgg.module
    module.spatial = True  # the package's own per-pixel map: the reference
    try:
        with torch.inference_mode():
            a = torch.from_numpy(pred.astype(np.float32)).permute(0, 3, 1, 2)
            b = torch.from_numpy(target.astype(np.float32)).permute(0, 3, 1, 2)
            spatial = module(a, b, normalize=True).double().numpy()[:, 0]
    finally:
        module.spatial = False
    by_hand = spatial.reshape(4, 8, 8, 8, 8).mean(axis=(2, 4))
    np.testing.assert_allclose(cells, by_hand, rtol=1e-4, atol=1e-7)
    np.testing.assert_allclose(cells.mean(axis=(1, 2)), dist, rtol=0.05)  # upsampling ~ keeps it


def test_a_change_in_one_patch_is_charged_to_that_patch(
    stlpips_vgg: TorchPerceptualScorer,
) -> None:
    target = scene(3)[None]
    pred = target.copy()
    pred[0, 16:24, 40:48] = 0.0  # patch (2, 5) turns black
    config = VideoRewardConfig(weights={"stlpips": 1.0}, lpips_net="vgg", patch_grid=GRID)
    result = score_video(pred, target, config, perceptual=stlpips_vgg)
    assert result.status is Status.OK
    patches = np.array(result.patch_rewards).reshape(GRID)
    row, col = np.unravel_index(patches.argmin(), GRID)
    # The deep layers' coarse maps spread the charge over the neighbours (measured: the most
    # charged cell of this change is (1, 5)), so the changed patch's own cell or a neighbour.
    assert abs(int(row) - 2) <= 1 and abs(int(col) - 5) <= 1
    assert patches[7, 0] - patches[2, 5] > 0.5 * -result.reward  # far patches are charged little
    assert patches.mean() == pytest.approx(result.reward, rel=1e-12)
    same = score_video(target, target, config, perceptual=stlpips_vgg)
    assert same.patch_rewards == (0.0,) * 64


def test_bad_grids_and_bad_patch_values_get_clear_errors(
    stlpips_vgg: TorchPerceptualScorer,
) -> None:
    pred, target = scene(4)[None], scene(5)[None]
    with pytest.raises(InvalidInput, match="frames of 64x64 do not split into a 3x3 grid"):
        stlpips_vgg.patch_distances(pred, target, (3, 3))

    class BadCells:
        metric, net = "stlpips", "vgg"

        def __call__(self, p: np.ndarray, t: np.ndarray) -> np.ndarray:
            return np.ones(len(p))

        def patch_distances(
            self, p: np.ndarray, t: np.ndarray, grid: tuple[int, int]
        ) -> tuple[np.ndarray, np.ndarray]:
            return np.ones(len(p)), np.full((len(p), 2, 2), np.nan)

    config = VideoRewardConfig(weights={"stlpips": 1.0}, lpips_net="vgg", patch_grid=GRID)
    result = score_video(pred, target, config, perceptual=BadCells())
    assert result.status is Status.ERROR
    assert "patch values of shape (1, 2, 2)" in result.message
    assert result.patch_rewards == ()


class MeanAbsModule(torch.nn.Module):
    """A distance module that is not LPIPS-style: it has no spatial map."""

    def forward(self, a: torch.Tensor, b: torch.Tensor, normalize: bool = False) -> torch.Tensor:
        return (a - b).abs().mean(dim=(1, 2, 3), keepdim=True)


def test_a_module_without_a_spatial_map_gives_every_patch_the_frames_distance() -> None:
    scorer = TorchPerceptualScorer("stlpips", "vgg", MeanAbsModule(), "cpu", batch_size=2)
    pred, target = np.stack([scene(6), scene(7), scene(8)]), np.stack([scene(9)] * 3)
    dist, cells = scorer.patch_distances(pred, target, (4, 4))
    np.testing.assert_allclose(dist, np.abs(pred - target).mean(axis=(1, 2, 3)), rtol=1e-5)
    np.testing.assert_array_equal(cells, np.broadcast_to(dist[:, None, None], (3, 4, 4)))
