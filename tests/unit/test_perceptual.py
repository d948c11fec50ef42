"""Perceptual scorers: ST-LPIPS from the wheel, LPIPS from locally built backbone weights."""

from __future__ import annotations

import functools
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

for _module in ("torch", "torchvision", "lpips", "stlpips_pytorch"):
    pytest.importorskip(_module, reason="perceptual metrics need the video extra")

import lpips as lpips_pkg  # noqa: E402
import torch  # noqa: E402
import torchvision  # noqa: E402

from rlvr_world.rewards.perceptual import (  # noqa: E402
    BACKBONE_ENV,
    LPIPSWeightsUnavailable,
    TorchPerceptualScorer,
    backbone_cache_path,
    backbone_filename,
    make_perceptual,
)
from rlvr_world.rewards.types import InvalidInput, Status  # noqa: E402
from rlvr_world.rewards.video import FloatArray, VideoRewardConfig, score_video  # noqa: E402

#: Indices of the ReLUs whose outputs LPIPS compares, per torchvision ``features``.
RELU_TAPS = {"vgg": (3, 8, 15, 22, 29), "alex": (1, 4, 7, 9, 11)}


@pytest.fixture(autouse=True)
def _one_thread() -> Iterator[None]:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def frames(n: int, seed: int = 0, side: int = 64) -> FloatArray:
    return np.random.default_rng(seed).random((n, side, side, 3))


def noisy(x: FloatArray, sigma: float, seed: int = 1) -> FloatArray:
    return np.clip(x + np.random.default_rng(seed).normal(0.0, sigma, x.shape), 0.0, 1.0)


# ---------------------------------------------------------------- ST-LPIPS (offline)


@pytest.fixture(scope="module")
def stlpips_alex() -> TorchPerceptualScorer:
    scorer = make_perceptual("stlpips", "alex", "cpu", batch_size=2)
    assert isinstance(scorer, TorchPerceptualScorer)
    return scorer


def test_stlpips_identical_is_zero_and_grows_with_noise(
    stlpips_alex: TorchPerceptualScorer,
) -> None:
    x = frames(2)
    np.testing.assert_allclose(stlpips_alex(x, x), 0.0, atol=1e-6)
    d = [stlpips_alex(x, noisy(x, s)) for s in (0.05, 0.1, 0.2)]
    assert np.all(d[0] > 1e-4)
    assert np.all(d[0] < d[1]) and np.all(d[1] < d[2]), d


def test_stlpips_batched_equals_per_pair(stlpips_alex: TorchPerceptualScorer) -> None:
    x = frames(5)
    y = noisy(x, 0.1)
    batched = stlpips_alex(x, y)  # micro-batches of 2, 2, 1
    single = [stlpips_alex(x[i : i + 1], y[i : i + 1])[0] for i in range(5)]
    np.testing.assert_allclose(batched, single, rtol=1e-5, atol=1e-7)
    assert batched.shape == (5,)
    assert len(set(np.round(batched, 6))) > 1  # per-pair values, not one repeated number


def test_one_channel_frames_are_repeated(stlpips_alex: TorchPerceptualScorer) -> None:
    gray = frames(2)[..., :1]
    other = noisy(gray, 0.1)
    three = stlpips_alex(np.repeat(gray, 3, axis=-1), np.repeat(other, 3, axis=-1))
    np.testing.assert_allclose(stlpips_alex(gray, other), three, rtol=1e-4)


def test_scorer_rejects_bad_batches(stlpips_alex: TorchPerceptualScorer) -> None:
    with pytest.raises(InvalidInput, match="differ"):
        stlpips_alex(frames(2), frames(1))
    with pytest.raises(InvalidInput, match="stlpips frames need at least 21x21"):
        stlpips_alex(frames(1, side=8), frames(1, side=8))
    with pytest.raises(InvalidInput, match="at least 21x21 pixels, got \\(20, 20\\)"):
        stlpips_alex(frames(1, side=20), frames(1, side=20))  # reflect padding would fail here
    assert stlpips_alex(frames(1, side=21), frames(1, side=21)).shape == (1,)
    with pytest.raises(InvalidInput, match=r"\(N, H, W, 1\|3\)"):
        stlpips_alex(frames(1)[0], frames(1)[0])


def test_small_frames_get_invalid_input_from_score_video(
    stlpips_alex: TorchPerceptualScorer,
) -> None:
    config = VideoRewardConfig(weights={"l1": 1.0, "stlpips": 1.0}, lpips_net="alex")
    r = score_video(frames(1, side=16), frames(1, side=16), config, perceptual=stlpips_alex)
    assert r.status is Status.INVALID_INPUT and "at least 21x21" in r.message


def test_score_video_with_a_real_stlpips_scorer(stlpips_alex: TorchPerceptualScorer) -> None:
    x = frames(3)
    y = noisy(x, 0.1)
    config = VideoRewardConfig(weights={"l1": 1.0, "stlpips": 1.0}, lpips_net="alex")
    r = score_video(y, x, config, perceptual=stlpips_alex)
    assert r.status is Status.OK
    expected = np.abs(y - x).mean() + stlpips_alex(y, x).mean()
    assert r.reward == pytest.approx(-expected, rel=1e-6)
    assert r.metrics["stlpips"] > 0.0


@pytest.mark.slow
def test_stlpips_vgg_identical_is_zero_and_grows_with_noise() -> None:
    scorer = make_perceptual("stlpips", "vgg", "cpu")
    x = frames(2)
    np.testing.assert_allclose(scorer(x, x), 0.0, atol=1e-6)
    d = [scorer(x, noisy(x, s)) for s in (0.05, 0.1, 0.2)]
    assert np.all(d[0] > 1e-4)
    assert np.all(d[0] < d[1]) and np.all(d[1] < d[2]), d


# ---------------------------------------------------------------- LPIPS (local backbone)


@functools.cache
def backbone_features(net: str, seed: int) -> torch.nn.Sequential:
    """torchvision's ``features`` for ``net`` with random weights drawn under a fixed seed."""
    torch.manual_seed(seed)
    features: torch.nn.Sequential
    if net == "vgg":
        vgg = torchvision.models.vgg
        features = vgg.make_layers(vgg.cfgs["D"])
    else:
        features = torchvision.models.AlexNet().features
    return features.eval()


def save_backbone(path: Path, net: str, seed: int) -> Path:
    """A torchvision-style checkpoint: ``features.*`` plus a classifier tensor, as the real one."""
    state = {f"features.{k}": v for k, v in backbone_features(net, seed).state_dict().items()}
    state["classifier.6.bias"] = torch.zeros(1000)
    torch.save(state, path)
    return path


def lpips_direct(net: str, seed: int, x: FloatArray, y: FloatArray) -> FloatArray:
    """LPIPS written out: scaled inputs, ReLU taps, unit-normalised features, v0.1 heads, means."""
    features = backbone_features(net, seed)
    heads = torch.load(
        Path(lpips_pkg.__file__).parent / "weights" / "v0.1" / f"{net}.pth",
        map_location="cpu",
        weights_only=True,
    )
    shift = torch.tensor([-0.030, -0.088, -0.188]).view(1, 3, 1, 1)
    scale = torch.tensor([0.458, 0.448, 0.450]).view(1, 3, 1, 1)

    def taps(img: FloatArray) -> list[torch.Tensor]:
        h = (torch.from_numpy(img).float().permute(0, 3, 1, 2) * 2 - 1 - shift) / scale
        out = []
        for i, layer in enumerate(features[: RELU_TAPS[net][-1] + 1]):
            h = layer(h)
            if i in RELU_TAPS[net]:
                out.append(h / (h.pow(2).sum(1, keepdim=True).sqrt() + 1e-10))
        return out

    with torch.no_grad():
        total = torch.zeros(x.shape[0])
        for k, (a, b) in enumerate(zip(taps(x), taps(y), strict=True)):
            w = heads[f"lin{k}.model.1.weight"]
            total += ((a - b) ** 2 * w.view(1, -1, 1, 1)).sum(1).mean(dim=(1, 2))
    return np.asarray(total.double().numpy(), dtype=np.float64)


@pytest.fixture
def no_lpips_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """No backbone anywhere: an empty torch hub and no ``RLVR_LPIPS_BACKBONE_PATH``."""
    monkeypatch.delenv(BACKBONE_ENV, raising=False)
    home = tmp_path / "torch_home"
    monkeypatch.setenv("TORCH_HOME", str(home))
    return home


def test_lpips_alex_uses_the_given_backbone(tmp_path: Path, no_lpips_env: Path) -> None:
    path = save_backbone(tmp_path / "alex.pth", "alex", seed=0)
    scorer = make_perceptual("lpips", "alex", "cpu", weights_path=path, batch_size=2)
    x = frames(3)
    y = noisy(x, 0.1)
    got = scorer(x, y)
    np.testing.assert_allclose(got, lpips_direct("alex", 0, x, y), rtol=1e-4)
    np.testing.assert_allclose(scorer(x, x), 0.0, atol=1e-6)
    other = make_perceptual(
        "lpips", "alex", "cpu", weights_path=save_backbone(tmp_path / "o", "alex", 1)
    )
    assert np.abs(other(x, y) - got).max() > 1e-3


def test_lpips_backbone_from_env_and_from_the_hub_cache(
    tmp_path: Path, no_lpips_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    x = frames(2)
    y = noisy(x, 0.1)
    expected = lpips_direct("alex", 0, x, y)
    path = save_backbone(tmp_path / "alex.pth", "alex", seed=0)
    monkeypatch.setenv(BACKBONE_ENV, str(path))
    np.testing.assert_allclose(make_perceptual("lpips", "alex", "cpu")(x, y), expected, rtol=1e-4)
    monkeypatch.delenv(BACKBONE_ENV)
    cached = backbone_cache_path("alex")
    assert cached == no_lpips_env / "hub" / "checkpoints" / "alexnet-owt-7be5be79.pth"
    cached.parent.mkdir(parents=True)
    path.rename(cached)
    np.testing.assert_allclose(make_perceptual("lpips", "alex", "cpu")(x, y), expected, rtol=1e-4)


@pytest.mark.slow
def test_lpips_vgg_uses_the_given_backbone(tmp_path: Path, no_lpips_env: Path) -> None:
    path = save_backbone(tmp_path / "vgg.pth", "vgg", seed=0)
    scorer = make_perceptual("lpips", "vgg", "cpu", weights_path=path)
    x = frames(2)
    y = noisy(x, 0.1)
    got = scorer(x, y)
    np.testing.assert_allclose(got, lpips_direct("vgg", 0, x, y), rtol=1e-4)
    other = make_perceptual(
        "lpips", "vgg", "cpu", weights_path=save_backbone(tmp_path / "o", "vgg", 1)
    )
    assert np.abs(other(x, y) - got).max() > 1e-3


def test_missing_backbone_names_cache_env_and_stlpips(no_lpips_env: Path) -> None:
    with pytest.raises(LPIPSWeightsUnavailable) as info:
        make_perceptual("lpips", "vgg", "cpu")
    message = str(info.value)
    assert str(no_lpips_env / "hub" / "checkpoints" / "vgg16-397923af.pth") in message
    assert BACKBONE_ENV in message
    assert "ST-LPIPS" in message
    assert backbone_filename("alex") == "alexnet-owt-7be5be79.pth"


def test_missing_explicit_or_env_backbone_file(
    tmp_path: Path, no_lpips_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(LPIPSWeightsUnavailable, match=r"weights_path .*nope\.pth is not a file"):
        make_perceptual("lpips", "vgg", "cpu", weights_path=tmp_path / "nope.pth")
    monkeypatch.setenv(BACKBONE_ENV, str(tmp_path / "gone.pth"))
    with pytest.raises(LPIPSWeightsUnavailable, match=rf"{BACKBONE_ENV}=.*gone\.pth is not a file"):
        make_perceptual("lpips", "vgg", "cpu")


def test_wrong_backbone_file_is_refused(tmp_path: Path, no_lpips_env: Path) -> None:
    torch.save({"features.0.weight": torch.zeros(1)}, tmp_path / "bad.pth")
    with pytest.raises(LPIPSWeightsUnavailable, match="not a torchvision backbone"):
        make_perceptual("lpips", "alex", "cpu", weights_path=tmp_path / "bad.pth")
    state = {f"features.{k}": v for k, v in backbone_features("alex", 0).state_dict().items()}
    state["features.0.weight"] = torch.zeros(3, 3, 3, 3)
    torch.save(state, tmp_path / "shape.pth")
    with pytest.raises(LPIPSWeightsUnavailable, match="does not fit"):
        make_perceptual("lpips", "alex", "cpu", weights_path=tmp_path / "shape.pth")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("ssim", "vgg"), "name: 'ssim' is not one of"),
        (("lpips", "squeeze"), "net: 'squeeze' is not one of"),
    ],
)
def test_make_perceptual_rejects_unknown_names(args: tuple[str, str], message: str) -> None:
    with pytest.raises(InvalidInput, match=message):
        make_perceptual(*args)
    with pytest.raises(InvalidInput, match="only LPIPS takes a backbone path"):
        make_perceptual("stlpips", "alex", weights_path="x.pth")
