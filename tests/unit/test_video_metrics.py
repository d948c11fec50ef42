"""Video reward core: metrics against hand values, aggregation, repetition, validation."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from rlvr_world.rewards.types import InvalidInput, Status
from rlvr_world.rewards.video import (
    PSNR_CAP_DB,
    SSIM_K1,
    SSIM_K2,
    FloatArray,
    VideoRewardConfig,
    gaussian_window,
    l1_per_frame,
    mse_per_frame,
    psnr_from_mse,
    score_video,
    ssim_per_frame,
    validate_video,
)

L1_ONLY = VideoRewardConfig(weights={"l1": 1.0})


def const(value: float, shape: tuple[int, ...] = (4, 4, 3)) -> FloatArray:
    return np.full(shape, value, dtype=np.float64)


# ---------------------------------------------------------------- metrics


def test_l1_mse_psnr_hand_values() -> None:
    pred = np.array([[0.0, 0.0], [0.0, 0.0]]).reshape(1, 2, 2, 1)
    target = np.array([[0.5, 0.25], [0.0, 1.0]]).reshape(1, 2, 2, 1)
    assert l1_per_frame(pred, target)[0] == pytest.approx(1.75 / 4)
    assert mse_per_frame(pred, target)[0] == pytest.approx((0.25 + 0.0625 + 1.0) / 4)
    # mse 0.01 -> 20 dB, 0.1 -> 10 dB, identical -> the cap
    psnr = psnr_from_mse(np.array([0.01, 0.1, 0.0]))
    np.testing.assert_allclose(psnr, [20.0, 10.0, PSNR_CAP_DB])


def test_metrics_are_per_frame() -> None:
    pred = np.zeros((3, 2, 2, 3))
    target = np.stack([const(v, (2, 2, 3)) for v in (0.1, 0.2, 0.4)])
    np.testing.assert_allclose(l1_per_frame(pred, target), [0.1, 0.2, 0.4])
    np.testing.assert_allclose(mse_per_frame(pred, target), [0.01, 0.04, 0.16])


def test_gaussian_window_is_normalised_and_symmetric() -> None:
    g = gaussian_window()
    assert g.shape == (11,)
    assert g.sum() == pytest.approx(1.0)
    np.testing.assert_allclose(g, g[::-1])
    assert g[5] / g[6] == pytest.approx(math.exp(1 / (2 * 1.5**2)))


def test_ssim_of_identical_frames_is_one() -> None:
    x = np.random.default_rng(0).random((2, 16, 20, 3))
    np.testing.assert_allclose(ssim_per_frame(x, x), [1.0, 1.0])


def test_ssim_of_constant_frames_is_the_luminance_term() -> None:
    # No variance anywhere: SSIM = (2ab + C1) / (a^2 + b^2 + C1).
    a, b = 0.2, 0.4
    c1 = SSIM_K1**2
    got = ssim_per_frame(const(a, (1, 12, 13, 1)), const(b, (1, 12, 13, 1)))
    assert got[0] == pytest.approx((2 * a * b + c1) / (a * a + b * b + c1))


def _ssim_direct(x: FloatArray, y: FloatArray) -> float:
    """Window-by-window SSIM of one (H, W, C) pair with the explicit 2-D Gaussian weights."""
    w = np.outer(gaussian_window(), gaussian_window())
    c1, c2 = SSIM_K1**2, SSIM_K2**2
    values = []
    for c in range(x.shape[2]):
        for i in range(x.shape[0] - 10):
            for j in range(x.shape[1] - 10):
                px, py = x[i : i + 11, j : j + 11, c], y[i : i + 11, j : j + 11, c]
                mx, my = (w * px).sum(), (w * py).sum()
                vx, vy = (w * (px - mx) ** 2).sum(), (w * (py - my) ** 2).sum()
                cov = (w * (px - mx) * (py - my)).sum()
                values.append(
                    (2 * mx * my + c1) * (2 * cov + c2) / ((mx**2 + my**2 + c1) * (vx + vy + c2))
                )
    return float(np.mean(values))


def test_ssim_matches_a_direct_window_computation() -> None:
    rng = np.random.default_rng(1)
    x = rng.random((2, 13, 14, 3))
    y = np.clip(x + rng.normal(0, 0.2, x.shape), 0, 1)
    got = ssim_per_frame(x, y)
    expected = [_ssim_direct(x[t], y[t]) for t in range(2)]
    np.testing.assert_allclose(got, expected, rtol=1e-10)
    assert 0.0 < got[0] < 1.0


def test_ssim_of_exactly_one_window() -> None:
    rng = np.random.default_rng(2)
    x, y = rng.random((1, 11, 11, 1)), rng.random((1, 11, 11, 1))
    assert ssim_per_frame(x, y)[0] == pytest.approx(_ssim_direct(x[0], y[0]), rel=1e-12)


# ---------------------------------------------------------------- score_video: weights, aggregation


def test_default_config_is_the_paper_reward() -> None:
    config = VideoRewardConfig()
    assert dict(config.weights) == {"l1": 1.0, "lpips": 1.0}
    assert (config.aggregation, config.repetition_penalty, config.lpips_net) == ("mean", 0.0, "vgg")


def test_single_frame_weighted_sum() -> None:
    pred, target = const(0.5), const(0.6)  # l1 0.1, mse 0.01, psnr 20 dB
    r = score_video(pred, target, VideoRewardConfig(weights={"l1": 1.0, "mse": 2.0}))
    assert r.status is Status.OK
    assert r.reward == pytest.approx(-(0.1 + 2 * 0.01))
    assert r.metrics["l1"] == pytest.approx(0.1)
    assert r.metrics["mse"] == pytest.approx(0.01)
    assert r.metrics["psnr"] == pytest.approx(20.0)
    assert r.metrics["n_frames"] == 1.0
    assert "ssim" not in r.metrics  # 4x4 frames are smaller than the SSIM window
    assert "lpips" not in r.metrics
    psnr = score_video(pred, target, VideoRewardConfig(weights={"psnr": 0.5}))
    assert psnr.reward == pytest.approx(10.0)  # loss = -psnr


def test_ssim_weight_uses_one_minus_ssim() -> None:
    x = np.random.default_rng(3).random((12, 12, 3))
    same = score_video(x, x, VideoRewardConfig(weights={"ssim": 1.0}))
    assert same.reward == pytest.approx(0.0)
    assert same.metrics["ssim"] == pytest.approx(1.0)
    a, b, c1 = 0.2, 0.4, SSIM_K1**2
    flat = score_video(const(a, (12, 12, 1)), const(b, (12, 12, 1)), VideoRewardConfig({"ssim": 2}))
    assert flat.reward == pytest.approx(-2 * (1 - (2 * a * b + c1) / (a * a + b * b + c1)))


def _three_frames() -> tuple[FloatArray, FloatArray]:
    target = np.stack([const(0.5), const(0.6), const(0.7)])
    pred = target - np.array([0.1, 0.2, 0.3])[:, None, None, None]  # l1 = 0.1, 0.2, 0.3
    return pred, target


@pytest.mark.parametrize(
    ("aggregation", "gamma", "expected"),
    [
        ("mean", 0.9, -(0.1 + 0.2 + 0.3) / 3),
        ("last", 0.9, -0.3),
        ("discount", 0.5, -(0.1 + 0.5 * 0.2 + 0.25 * 0.3) / 1.75),
        ("discount", 1.0, -(0.1 + 0.2 + 0.3) / 3),
    ],
)
def test_aggregation(aggregation: str, gamma: float, expected: float) -> None:
    pred, target = _three_frames()
    config = VideoRewardConfig(weights={"l1": 1.0}, aggregation=aggregation, gamma=gamma)
    r = score_video(pred, target, config)
    assert r.status is Status.OK
    assert r.reward == pytest.approx(expected)
    assert r.metrics["l1"] == pytest.approx(0.2)
    assert r.metrics["n_frames"] == 3.0


def test_repetition_penalty_counts_copied_frames() -> None:
    a, b = const(0.3), const(0.8)
    pred = np.stack([a, a, b])
    config = VideoRewardConfig(weights={"l1": 1.0}, repetition_penalty=0.5)
    # Frame 1 copies frame 0; frame 0 copies the given previous frame.
    with_prev = score_video(pred, pred, config, previous_frame=a)
    assert with_prev.reward == pytest.approx(-(0.5 + 0.5 + 0.0) / 3)
    assert with_prev.metrics["repetition_rate"] == pytest.approx(2 / 3)
    without_prev = score_video(pred, pred, config)
    assert without_prev.reward == pytest.approx(-0.5 / 3)
    assert without_prev.metrics["repetition_rate"] == pytest.approx(1 / 2)
    # Frames differing by more than the threshold are not copies.
    near = np.stack([a, a + 0.01, a + 0.02])
    assert score_video(near, near, config).metrics["repetition_rate"] == 0.0
    loose = VideoRewardConfig(
        weights={"l1": 1.0}, repetition_penalty=0.5, repetition_threshold=0.02
    )
    assert score_video(near, near, loose).reward == pytest.approx(-1.0 / 3)


def test_repetition_rate_is_reported_without_penalty() -> None:
    r = score_video(const(0.3, (1, 4, 4, 3)), const(0.3, (1, 4, 4, 3)), L1_ONLY)
    assert r.metrics["repetition_rate"] == 0.0  # nothing to compare the only frame with
    pred = np.stack([const(0.3)] * 2)
    assert score_video(pred, pred, L1_ONLY).reward == 0.0
    assert score_video(pred, pred, L1_ONLY).metrics["repetition_rate"] == 1.0


def test_uint8_frames_are_scaled_and_predictions_clamped() -> None:
    pred = np.full((4, 4, 3), 51, dtype=np.uint8)  # 0.2
    assert score_video(pred, const(0.0), L1_ONLY).reward == pytest.approx(-0.2)
    over = score_video(const(1.5), const(1.0), L1_ONLY)  # clamped to 1
    assert (over.status, over.reward) == (Status.OK, 0.0)
    assert score_video(const(-0.5).astype(np.float32), const(0.0), L1_ONLY).reward == 0.0


# ---------------------------------------------------------------- perceptual wiring


class MeanSquareScorer:
    """A real, trivially simple ``PerceptualScorer``: mean squared difference per frame."""

    def __init__(self, metric: str = "lpips", net: str = "vgg", bad: bool = False) -> None:
        self.metric, self.net, self.bad = metric, net, bad

    def __call__(self, pred: FloatArray, target: FloatArray) -> FloatArray:
        out = np.square(pred - target).mean(axis=(1, 2, 3))
        return np.asarray(out * np.nan if self.bad else out, dtype=np.float64)


def test_perceptual_weight_uses_the_scorer() -> None:
    pred, target = _three_frames()  # mse 0.01, 0.04, 0.09
    r = score_video(pred, target, VideoRewardConfig(), perceptual=MeanSquareScorer())
    assert r.reward == pytest.approx(-(0.2 + (0.01 + 0.04 + 0.09) / 3))
    assert r.metrics["lpips"] == pytest.approx(0.14 / 3)
    both = VideoRewardConfig(weights={"lpips": 1.0, "stlpips": 2.0})
    scorers = {"lpips": MeanSquareScorer(), "stlpips": MeanSquareScorer("stlpips")}
    r2 = score_video(pred, target, both, perceptual=scorers)
    assert r2.reward == pytest.approx(-3 * 0.14 / 3)
    assert r2.metrics["stlpips"] == pytest.approx(0.14 / 3)


def test_missing_or_mismatched_perceptual_scorer_raises() -> None:
    pred = target = const(0.5)
    with pytest.raises(InvalidInput, match=r"weights\['lpips'\].*PerceptualScorer \(given: none\)"):
        score_video(pred, target, VideoRewardConfig())
    with pytest.raises(InvalidInput, match="stlpips"):
        score_video(pred, target, VideoRewardConfig(), perceptual=MeanSquareScorer("stlpips"))
    with pytest.raises(InvalidInput, match="lpips_net='vgg'"):
        score_video(pred, target, VideoRewardConfig(), perceptual=MeanSquareScorer(net="alex"))


def test_non_finite_perceptual_output_is_an_error_status() -> None:
    r = score_video(
        const(0.5), const(0.6), VideoRewardConfig(), perceptual=MeanSquareScorer(bad=True)
    )
    assert r.status is Status.ERROR
    assert "lpips scorer returned" in r.message


# ---------------------------------------------------------------- invalid input


@pytest.mark.parametrize(
    ("pred", "target", "message"),
    [
        (np.zeros((4, 4)), np.zeros((4, 4)), r"prediction: expected shape \(H, W, C\)"),
        (np.zeros((1, 2, 4, 4, 3)), np.zeros((1, 2, 4, 4, 3)), "prediction: expected shape"),
        (const(0.5), np.zeros((4, 4)), "target: expected shape"),
        (const(0.5), const(0.5, (4, 5, 3)), "prediction: shape .* differs from target"),
        (const(0.5, (2, 4, 4, 3)), const(0.5), "differs from target"),
        (const(np.nan), const(0.5), "prediction: contains NaN or infinite"),
        (const(0.5), const(np.inf), "target: contains NaN or infinite"),
        (const(0.5), const(1.5), r"target: float values must lie in \[0, 1\]"),
        (const(0.5), const(-0.1), r"target: float values must lie in \[0, 1\]"),
        (const(0.5).astype(np.int64), const(0.5), "prediction: unsupported dtype int64"),
        (np.ones((4, 4, 3), dtype=bool), const(0.5), "prediction: unsupported dtype bool"),
        (const(0.5).tolist(), const(0.5), "prediction: expected a numpy array, got list"),
        (np.zeros((0, 4, 4, 3)), np.zeros((0, 4, 4, 3)), "prediction: empty array"),
        (np.zeros((4, 0, 3)), np.zeros((4, 0, 3)), "prediction: empty array"),
        (const(0.5, (4, 4, 2)), const(0.5, (4, 4, 2)), "prediction: expected 1 or 3 channels"),
        (const(0.5), const(0.5, (4, 4, 4)), "target: expected 1 or 3 channels"),
    ],
)
def test_bad_frames_give_invalid_input(pred: object, target: object, message: str) -> None:
    r = score_video(pred, target, L1_ONLY)
    assert r.status is Status.INVALID_INPUT
    assert r.reward == 0.0
    assert r.metrics == {}
    assert r.message
    assert re.search(message, r.message), r.message
    with pytest.raises(InvalidInput, match=message):
        validate_video(pred, target)


def test_target_within_tolerance_is_accepted() -> None:
    r = score_video(const(1.0), const(1.0 + 1e-9), L1_ONLY)
    assert (r.status, r.reward) == (Status.OK, 0.0)


@pytest.mark.parametrize(
    ("previous", "message"),
    [
        (const(0.5, (4, 5, 3)), r"previous_frame: shape \(4, 5, 3\) differs"),
        (const(0.5, (1, 4, 4, 3)), r"previous_frame: expected one frame \(H, W, C\)"),
        (const(np.nan), "previous_frame: contains NaN"),
        ([0.5], "previous_frame: expected one frame"),
    ],
)
def test_bad_previous_frame(previous: object, message: str) -> None:
    r = score_video(const(0.5), const(0.5), L1_ONLY, previous_frame=previous)
    assert r.status is Status.INVALID_INPUT
    assert re.search(message, r.message), r.message


def test_ssim_weight_on_frames_smaller_than_the_window() -> None:
    r = score_video(const(0.5, (8, 8, 3)), const(0.5, (8, 8, 3)), VideoRewardConfig({"ssim": 1}))
    assert r.status is Status.INVALID_INPUT
    assert "at least 11x11" in r.message


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"weights": {"mae": 1.0}}, "unknown metric 'mae'"),
        ({"weights": {"l1": -1.0}}, r"weights\['l1'\]: must be a finite number >= 0"),
        ({"weights": {"l1": math.nan}}, r"weights\['l1'\]: must be a finite"),
        ({"weights": {"l1": True}}, r"weights\['l1'\]: expected a number"),
        ({"weights": {"l1": "1"}}, r"weights\['l1'\]: expected a number"),
        ({"weights": {"l1": 0.0}}, "at least one metric needs a positive weight"),
        ({"weights": {}}, "at least one metric"),
        ({"aggregation": "sum"}, "aggregation: 'sum' is not one of"),
        ({"gamma": 0.0}, r"gamma: must lie in \(0, 1\]"),
        ({"gamma": 1.5}, "gamma: must lie"),
        ({"gamma": math.nan}, "gamma: must lie"),
        ({"repetition_penalty": -0.1}, "repetition_penalty: must be a finite number >= 0"),
        ({"repetition_threshold": math.inf}, "repetition_threshold: must be a finite"),
        ({"lpips_net": "squeeze"}, "lpips_net: 'squeeze' is not one of"),
    ],
)
def test_bad_config_raises(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(InvalidInput, match=message):
        VideoRewardConfig(**kwargs)  # type: ignore[arg-type]


def test_config_weights_are_frozen_copies() -> None:
    weights = {"l1": 1.0}
    config = VideoRewardConfig(weights=weights)
    weights["l1"] = 5.0
    assert config.weights["l1"] == 1.0
    with pytest.raises(TypeError):
        config.weights["l1"] = 2.0  # type: ignore[index]
    assert config.active() == ("l1",)


# ---------------------------------------------------------------- property


frames = st.tuples(
    st.integers(1, 3), st.integers(1, 14), st.integers(1, 14), st.sampled_from([1, 3])
).flatmap(
    lambda shape: st.tuples(
        hnp.arrays(np.float64, shape, elements=st.floats(-0.5, 1.5)),
        hnp.arrays(np.float64, shape, elements=st.floats(0.0, 1.0)),
    )
)


@settings(max_examples=60, deadline=None)
@given(
    pair=frames,
    weights=st.dictionaries(
        st.sampled_from(["l1", "mse", "psnr"]), st.floats(0.01, 10.0), min_size=1
    ),
    aggregation=st.sampled_from(["mean", "last", "discount"]),
    gamma=st.floats(0.01, 1.0),
)
def test_random_frames_give_finite_rewards(
    pair: tuple[FloatArray, FloatArray], weights: dict[str, float], aggregation: str, gamma: float
) -> None:
    pred, target = pair
    config = VideoRewardConfig(weights, aggregation=aggregation, gamma=gamma, repetition_penalty=1)
    r = score_video(pred, target, config)
    assert r.status is Status.OK, r.message
    assert math.isfinite(r.reward)
    assert all(math.isfinite(v) for v in r.metrics.values())
    assert 0.0 <= r.metrics["l1"] <= 1.0
    assert r.metrics["psnr"] <= PSNR_CAP_DB
    assert ("ssim" in r.metrics) == (min(pred.shape[1], pred.shape[2]) >= 11)
