"""FSQ, the per-frame tokenizer, its checkpoints and training, and the compressive tokenizer."""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch", reason="the video tokenizer needs the video extra")
pytest.importorskip("safetensors", reason="tokenizer checkpoints need safetensors")

import torch

from rlvr_world.video.compressive import CompressiveConfig, CompressiveTokenizer
from rlvr_world.video.fsq import FSQ
from rlvr_world.video.tokenizer import (
    CONFIG_FILE,
    WEIGHTS_FILE,
    FrameTokenizer,
    TokenizerConfig,
)
from rlvr_world.video.train_tokenizer import (
    TrainSettings,
    background_of,
    foreground_metrics,
    lr_factor,
    spread,
    train_compressive,
    train_tokenizer,
    weighted_l1,
)

TINY = TokenizerConfig(
    image_size=16, channels=(8, 8), downsample=4, levels=(3, 4), norm_groups=4, input_patch=1
)


@pytest.fixture(autouse=True)
def _one_thread() -> Iterator[None]:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture
def tiny() -> FrameTokenizer:
    torch.manual_seed(0)
    return FrameTokenizer(TINY).eval()


def blobs(n: int, size: int, seed: int = 0) -> np.ndarray:
    """``n`` uint8 frames: a white background with one coloured square at a random place."""
    rng = np.random.default_rng(seed)
    frames = np.full((n, size, size, 3), 240, dtype=np.uint8)
    side = size // 4
    for i in range(n):
        r, c = rng.integers(0, size - side, 2)
        frames[i, r : r + side, c : c + side] = rng.integers(0, 200, 3)
    return frames


# --------------------------------------------------------------------------------------------
# FSQ


@pytest.mark.parametrize("levels", [(8, 5, 5, 5), (7, 5, 5, 5, 5), (2,), (3, 4)])
def test_fsq_every_index_round_trips(levels: tuple[int, ...]) -> None:
    fsq = FSQ(levels)
    assert fsq.codebook_size == math.prod(levels)
    ids = torch.arange(fsq.codebook_size)
    codes = fsq.indices_to_codes(ids)
    assert codes.shape == (fsq.codebook_size, len(levels))
    assert float(codes.abs().max()) <= 1.0
    assert torch.equal(fsq.codes_to_indices(codes), ids)
    # Each code is a fixed point of quantisation (its own rounding), so codes <-> ids agree.
    assert len({tuple(c) for c in codes.tolist()}) == fsq.codebook_size


def test_fsq_quantisation_reaches_every_level_and_matches_indices() -> None:
    fsq = FSQ((8, 5, 5, 5))
    z = torch.linspace(-6.0, 6.0, 4001).unsqueeze(-1).expand(-1, 4)
    codes, ids = fsq(z)
    for channel, level in enumerate(fsq.levels):
        assert torch.unique(codes[:, channel]).numel() == level
    assert torch.equal(fsq.indices_to_codes(ids), codes)
    assert int(ids.min()) == 0
    assert int(ids.max()) == fsq.codebook_size - 1


def test_fsq_gradients_flow_straight_through() -> None:
    fsq = FSQ((5, 5))
    z = torch.tensor([[0.3, -0.7], [1.5, 0.05]], requires_grad=True)
    codes = fsq.quantize(z)
    (codes * torch.tensor([[1.0, 2.0], [3.0, 4.0]])).sum().backward()  # type: ignore[no-untyped-call]
    assert z.grad is not None
    expected = torch.tensor([[1.0, 2.0], [3.0, 4.0]]) * _bound_slope(fsq, z.detach())
    assert torch.allclose(z.grad, expected)


def _bound_slope(fsq: FSQ, z: torch.Tensor) -> torch.Tensor:
    """d(bound(z) / half_width)/dz, computed independently by autograd on the bound alone."""
    zz = z.clone().requires_grad_(True)
    (fsq.bound(zz) / torch.tensor([lv // 2 for lv in fsq.levels])).sum().backward()  # type: ignore[no-untyped-call]
    assert zz.grad is not None
    return zz.grad


def test_fsq_rejects_bad_levels_indices_and_dims() -> None:
    with pytest.raises(ValueError, match="levels"):
        FSQ((1, 5))
    with pytest.raises(ValueError, match="levels"):
        FSQ(())
    fsq = FSQ((3, 4))
    with pytest.raises(ValueError, match=r"\[0, 12\)"):
        fsq.indices_to_codes(torch.tensor([12]))
    with pytest.raises(ValueError, match=r"\[0, 12\)"):
        fsq.indices_to_codes(torch.tensor([-1]))
    with pytest.raises(ValueError, match="integer"):
        fsq.indices_to_codes(torch.tensor([1.0]))
    with pytest.raises(ValueError, match="last dimension must be 2"):
        fsq.quantize(torch.zeros(4, 3))


# --------------------------------------------------------------------------------------------
# FrameTokenizer


def test_default_config_is_a_small_cpu_size() -> None:
    model = FrameTokenizer()
    assert model.codebook_size == 1000
    assert model.grid == (8, 8)
    assert model.tokens_per_frame == 64
    assert model.frame_shape == (64, 64, 3)


@torch.no_grad()
def test_encode_decode_shapes_ranges_and_determinism(tiny: FrameTokenizer) -> None:
    x = torch.rand(3, 3, 16, 16)
    tokens = tiny.encode(x)
    assert tokens.dtype == torch.long
    assert tokens.shape == (3, tiny.tokens_per_frame) == (3, 16)
    assert int(tokens.min()) >= 0
    assert int(tokens.max()) < tiny.codebook_size == 12
    frames = tiny.decode(tokens)
    assert frames.shape == (3, 3, 16, 16)
    assert float(frames.min()) >= 0.0
    assert float(frames.max()) <= 1.0
    assert torch.equal(tiny.encode(x), tokens)
    # decode(tokens) is the clamped training reconstruction: the token path is the model path.
    recon, again = tiny(x)
    assert torch.equal(again, tokens)
    assert torch.allclose(recon.clamp(0, 1), frames, atol=1e-6)


def test_non_square_frames() -> None:
    cfg = TokenizerConfig(image_size=(16, 24), channels=(8, 8), downsample=4, norm_groups=4)
    model = FrameTokenizer(cfg).eval()
    assert model.grid == (4, 6)
    frames = blobs(2, 24)[:, :16]
    tokens = model.encode_frames(frames)
    assert tokens.shape == (2, 24)
    assert model.decode_tokens(tokens).shape == (2, 16, 24, 3)


def test_numpy_helpers_batch_consistently(tiny: FrameTokenizer) -> None:
    frames = blobs(5, 16)
    tokens = tiny.encode_frames(frames, batch_size=2)
    assert tokens.dtype == np.int64
    assert tokens.shape == (5, 16)
    assert np.array_equal(tokens, tiny.encode_frames(frames, batch_size=5))
    decoded = tiny.decode_tokens(tokens.astype(np.int32), batch_size=3)
    assert decoded.dtype == np.float32
    assert decoded.shape == (5, 16, 16, 3)
    assert np.allclose(decoded, tiny.decode_tokens(tokens, batch_size=5), atol=1e-6)


@pytest.mark.parametrize(
    ("tokens", "message"),
    [
        (np.full((2, 16), 12), r"ids must be in \[0, 12\)"),
        (np.full((2, 16), -1), r"ids must be in \[0, 12\)"),
        (np.zeros((2, 15), dtype=np.int64), r"\(N, 16\)"),
        (np.zeros(16, dtype=np.int64), r"\(N, 16\)"),
        (np.zeros((2, 16), dtype=np.float32), "integer dtype"),
        ([[0] * 16], "numpy array"),
    ],
)
def test_decode_tokens_rejects_bad_tokens(
    tiny: FrameTokenizer, tokens: object, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        tiny.decode_tokens(tokens)  # type: ignore[arg-type]


def test_decode_rejects_bad_token_tensors(tiny: FrameTokenizer) -> None:
    with pytest.raises(ValueError, match=r"\[0, 12\)"):
        tiny.decode(torch.full((1, 16), 99))
    with pytest.raises(ValueError, match=r"\(B, 16\)"):
        tiny.decode(torch.zeros(1, 17, dtype=torch.long))
    with pytest.raises(ValueError, match="integer"):
        tiny.decode(torch.zeros(1, 16))


@pytest.mark.parametrize(
    ("frames", "message"),
    [
        (np.zeros((2, 16, 16, 3), dtype=np.float32), "uint8"),
        (np.zeros((2, 16, 16), dtype=np.uint8), r"\(N, 16, 16, 3\)"),
        (np.zeros((2, 16, 18, 3), dtype=np.uint8), r"\(N, 16, 16, 3\)"),
        (np.zeros((2, 16, 16, 1), dtype=np.uint8), r"\(N, 16, 16, 3\)"),
    ],
)
def test_encode_frames_rejects_bad_frames(
    tiny: FrameTokenizer, frames: object, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        tiny.encode_frames(frames)  # type: ignore[arg-type]


def test_encode_rejects_bad_tensors(tiny: FrameTokenizer) -> None:
    with pytest.raises(ValueError, match="float"):
        tiny.encode(torch.zeros(1, 3, 16, 16, dtype=torch.uint8))
    with pytest.raises(ValueError, match=r"\(B, 3, 16, 16\)"):
        tiny.encode(torch.zeros(1, 3, 32, 32))


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"downsample": 6}, "power of two"),
        ({"downsample": 8}, "needs 3 stages"),
        ({"image_size": 18}, "divisible by downsample"),
        ({"channels": (8, 6)}, "divisible by 4"),
        ({"levels": (5, 1)}, "levels"),
    ],
)
def test_config_rejects_inconsistent_shapes(fields: dict[str, object], message: str) -> None:
    base = TINY.model_dump()
    with pytest.raises(ValueError, match=message):
        TokenizerConfig.model_validate(base | fields)


def test_save_load_round_trip(tiny: FrameTokenizer, tmp_path: Path) -> None:
    tiny.save(tmp_path / "tok")
    loaded = FrameTokenizer.load(tmp_path / "tok")
    assert loaded.config == tiny.config
    assert not loaded.training
    frames = blobs(3, 16)
    tokens = tiny.encode_frames(frames)
    assert np.array_equal(loaded.encode_frames(frames), tokens)
    assert np.array_equal(loaded.decode_tokens(tokens), tiny.decode_tokens(tokens))


def test_load_fails_clearly(tiny: FrameTokenizer, tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=CONFIG_FILE):
        FrameTokenizer.load(tmp_path / "nothing")
    tiny.save(tmp_path / "a")
    (tmp_path / "a" / WEIGHTS_FILE).unlink()
    with pytest.raises(FileNotFoundError, match=WEIGHTS_FILE):
        FrameTokenizer.load(tmp_path / "a")
    # Weights of one shape under a config of another.
    tiny.save(tmp_path / "b")
    meta = json.loads((tmp_path / "b" / CONFIG_FILE).read_text())
    meta["config"]["channels"] = [16, 16]
    (tmp_path / "b" / CONFIG_FILE).write_text(json.dumps(meta))
    with pytest.raises(ValueError, match="does not fit"):
        FrameTokenizer.load(tmp_path / "b")
    meta["kind"] = "something_else"
    (tmp_path / "b" / CONFIG_FILE).write_text(json.dumps(meta))
    with pytest.raises(ValueError, match="kind 'something_else'"):
        FrameTokenizer.load(tmp_path / "b")
    (tmp_path / "b" / WEIGHTS_FILE).write_bytes(b"not safetensors")
    meta["kind"] = FrameTokenizer.KIND
    (tmp_path / "b" / CONFIG_FILE).write_text(json.dumps(meta))
    with pytest.raises(ValueError, match="safetensors"):
        FrameTokenizer.load(tmp_path / "b")


# --------------------------------------------------------------------------------------------
# Training


def test_lr_schedule_warms_up_then_decays() -> None:
    settings = TrainSettings(steps=100, warmup_steps=10)
    factors = [lr_factor(s, settings) for s in range(100)]
    assert factors[0] == pytest.approx(0.1)
    assert factors[9] == pytest.approx(1.0)
    assert factors[10] == pytest.approx(1.0)
    assert all(a >= b for a, b in itertools.pairwise(factors[10:]))
    assert factors[-1] > 0.1


def test_train_tokenizer_writes_checkpoint_grid_and_metrics(tmp_path: Path) -> None:
    frames = blobs(40, 16)
    settings = TrainSettings(
        batch_size=4, lr=3e-3, warmup_steps=2, grid_frames=3, eval_every=6, perceptual_weight=0.0
    )
    metrics = train_tokenizer(frames, TINY, 12, tmp_path, settings=settings)
    assert metrics["steps"] == 12
    assert metrics["n_train"] == 36
    assert metrics["n_eval"] == 4
    assert metrics["eval_psnr"] > 0
    assert 0.0 < metrics["eval_l1"] < 1.0
    assert [row["step"] for row in metrics["history"]] == [6.0, 12.0]
    assert "eval_psnr" in metrics["history"][0]
    assert metrics["history"][-1]["loss"] < metrics["history"][0]["loss"] * 2
    from PIL import Image

    with Image.open(tmp_path / "recon.png") as grid:
        assert grid.size == (3 * 16 * 2, 2 * 16 * 2)  # GRID_SCALE 2
    assert json.loads((tmp_path / "metrics.json").read_text())["eval_psnr"] == metrics["eval_psnr"]
    loaded = FrameTokenizer.load(tmp_path)
    assert loaded.encode_frames(frames[:2]).shape == (2, 16)


def test_perceptual_loss_needs_frames_it_can_score(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="at least 24 pixels"):
        train_tokenizer(blobs(8, 16), TINY, 1, tmp_path, settings=TrainSettings())


@pytest.mark.parametrize("patch", [2, 4])
def test_input_patch_runs_the_cnn_at_lower_resolution(patch: int) -> None:
    model = FrameTokenizer(
        TokenizerConfig.model_validate(TINY.model_dump() | {"input_patch": patch})
    )
    assert model.tokens_per_frame == 16
    frames = blobs(2, 16)
    assert model.decode_tokens(model.encode_frames(frames)).shape == (2, 16, 16, 3)
    with pytest.raises(ValueError, match="input_patch"):
        TokenizerConfig.model_validate(TINY.model_dump() | {"input_patch": 8})


def test_training_lowers_the_loss(tmp_path: Path) -> None:
    frames = blobs(64, 16)
    settings = TrainSettings(
        batch_size=8, lr=3e-3, warmup_steps=2, log_every=1, perceptual_weight=0.0
    )
    metrics = train_tokenizer(frames, TINY, 30, tmp_path, settings=settings)
    losses = [row["loss"] for row in metrics["history"]]
    assert np.mean(losses[-5:]) < 0.5 * np.mean(losses[:5])


def test_background_is_the_per_pixel_median() -> None:
    frames = blobs(40, 16)
    bg = background_of(frames)
    assert bg.shape == (16, 16, 3) and bg.dtype == np.float32
    # Each square covers a sixteenth of the frame, so the median of every pixel is the backdrop.
    np.testing.assert_allclose(bg, 240 / 255, rtol=0, atol=1e-6)


def test_weighted_l1_counts_foreground_pixels_more() -> None:
    bg = torch.zeros(1, 3, 4, 4)
    x = torch.zeros(2, 3, 4, 4)
    x[:, :, 0, 0] = 1.0  # one foreground pixel per frame
    recon = x.clone()
    recon[:, :, 0, 0] = 0.5  # an error of 0.5 on the object
    recon[:, :, 3, 3] = 0.5  # and the same error on one background pixel
    plain = weighted_l1(recon, x, bg, TrainSettings())
    assert plain.item() == pytest.approx(1.0 / 16)  # (0.5 + 0.5) over 16 pixels
    weighted = weighted_l1(recon, x, bg, TrainSettings(foreground_weight=9.0))
    # weights: 10 on the object, 1 on the 15 others -> (10 * 0.5 + 0.5) / 25
    assert weighted.item() == pytest.approx(5.5 / 25)


def test_foreground_metrics_measure_only_the_objects() -> None:
    bg = background_of(blobs(40, 16))  # the backdrop exactly (the test above)
    frames = blobs(6, 16)
    recon = frames.astype(np.float32) / 255.0
    exact = foreground_metrics(recon, frames, bg, 0.15)
    assert exact["foreground_l1"] == pytest.approx(0.0, abs=1e-7)
    assert exact["foreground_fraction"] == pytest.approx(1 / 16)
    blank = np.broadcast_to(bg, recon.shape).copy()  # the objects erased
    erased = foreground_metrics(blank, frames, bg, 0.15)
    expected_l1 = np.abs(recon - bg).sum(-1)[np.abs(recon - bg).sum(-1) > 0.15].sum()
    assert erased["foreground_l1"] == pytest.approx(expected_l1 / (3 * 6 * 16), rel=1e-5)
    assert erased["foreground_psnr"] < 20.0
    empty = foreground_metrics(blank, (blank * 255).round().astype(np.uint8), bg, 0.15)
    assert math.isnan(empty["foreground_psnr"]) and empty["foreground_fraction"] == 0.0


def test_foreground_weight_settings_are_checked() -> None:
    with pytest.raises(ValueError, match="foreground_weight"):
        TrainSettings(foreground_weight=-1.0)
    with pytest.raises(ValueError, match="foreground_threshold"):
        TrainSettings(foreground_threshold=0.0)


def test_grid_frames_spread_over_the_held_out_set() -> None:
    assert spread(100, 5).tolist() == [0, 25, 50, 74, 99]
    assert spread(3, 8).tolist() == [0, 1, 2]


def test_train_tokenizer_reports_foreground_metrics(tmp_path: Path) -> None:
    frames = blobs(40, 16)
    settings = TrainSettings(
        batch_size=4, lr=3e-3, warmup_steps=2, perceptual_weight=0.0, foreground_weight=10.0
    )
    metrics = train_tokenizer(frames, TINY, 6, tmp_path, settings=settings)
    assert metrics["eval_foreground_psnr"] < metrics["eval_psnr"]
    assert 0.0 < metrics["eval_foreground_fraction"] <= 1.0  # early on, anything off-backdrop
    assert metrics["settings"]["foreground_weight"] == 10.0


# --------------------------------------------------------------------------------------------
# Compressive tokenizer

TINY_CTX = CompressiveConfig(
    image_size=16,
    context_channels=(8, 8),
    context_downsample=2,
    context_levels=(3, 3),
    dynamics_channels=(8, 8),
    dynamics_downsample=2,
    patch=4,
    dynamics_levels=(4, 4),
    norm_groups=4,
)


@torch.no_grad()
def test_compressive_shapes_and_token_counts() -> None:
    torch.manual_seed(0)
    model = CompressiveTokenizer(TINY_CTX).eval()
    assert model.context_tokens_per_frame == 64  # (16/2)^2
    assert model.dynamics_tokens_per_frame == 4  # (16/2/4)^2
    assert model.context_codebook_size == 9
    assert model.dynamics_codebook_size == 16
    ctx = torch.rand(2, 3, 16, 16)
    future = torch.rand(2, 3, 3, 16, 16)
    ctx_tokens = model.encode_context(ctx)
    assert ctx_tokens.shape == (2, 64)
    dyn = model.encode_dynamics(future, ctx_tokens)
    assert dyn.shape == (2, 3, 4)
    assert int(dyn.max()) < 16
    frames = model.decode(ctx_tokens, dyn)
    assert frames.shape == (2, 4, 3, 16, 16)
    assert float(frames.min()) >= 0.0
    assert float(frames.max()) <= 1.0
    with pytest.raises(ValueError, match=r"\[0, 16\)"):
        model.decode(ctx_tokens, torch.full((2, 3, 4), 16))
    with pytest.raises(ValueError, match=r"\(B, 64\)"):
        model.decode(ctx_tokens[:, :10], dyn)
    with pytest.raises(ValueError, match="batch"):
        model.encode_dynamics(future[:1], ctx_tokens)


def test_compressive_future_frames_depend_on_the_context() -> None:
    torch.manual_seed(0)
    model = CompressiveTokenizer(TINY_CTX).eval()
    dyn = torch.zeros(1, 1, 4, dtype=torch.long)
    a = model.decode(torch.zeros(1, 64, dtype=torch.long), dyn)[:, 1]
    b = model.decode(torch.full((1, 64), 8), dyn)[:, 1]
    assert float((a - b).abs().max()) > 1e-4


def test_compressive_save_load_round_trip(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = CompressiveTokenizer(TINY_CTX).eval()
    model.save(tmp_path)
    loaded = CompressiveTokenizer.load(tmp_path)
    ctx = torch.rand(1, 3, 16, 16)
    future = torch.rand(1, 2, 3, 16, 16)
    c = model.encode_context(ctx)
    assert torch.equal(loaded.encode_context(ctx), c)
    assert torch.equal(loaded.encode_dynamics(future, c), model.encode_dynamics(future, c))
    with pytest.raises(ValueError, match="kind"):
        FrameTokenizer.load(tmp_path)


def test_compressive_trains_a_few_steps(tmp_path: Path) -> None:
    clips = np.stack([blobs(3, 16, seed=s) for s in range(24)])
    settings = TrainSettings(
        batch_size=4, lr=3e-3, warmup_steps=2, log_every=1, perceptual_weight=0.0
    )
    metrics = train_compressive(clips, TINY_CTX, 20, tmp_path, settings=settings)
    losses = [row["loss"] for row in metrics["history"]]
    assert np.mean(losses[-4:]) < 0.7 * np.mean(losses[:4])
    assert metrics["eval_psnr"] > 0
    assert CompressiveTokenizer.load(tmp_path).dynamics_tokens_per_frame == 4


@torch.no_grad()
def test_compressive_decode_future_matches_decode_clips_and_refuses_bad_shapes() -> None:
    """``decode_future`` (what the decoder service and the multi-step run use) is the clip decoding
    without its context frame; a dynamics array of the wrong rank, batch or width and an id
    outside either codebook are refused, naming the array."""
    torch.manual_seed(0)
    model = CompressiveTokenizer(TINY_CTX).eval()
    rng = np.random.default_rng(0)
    ctx = rng.integers(0, model.context_codebook_size, size=(3, model.context_tokens_per_frame))
    dyn = rng.integers(
        0, model.dynamics_codebook_size, size=(3, 2, model.dynamics_tokens_per_frame)
    )
    future = model.decode_future(ctx, dyn, batch_size=2)
    assert future.shape == (3, 2, 16, 16, 3) and future.dtype == np.float32
    np.testing.assert_allclose(future, model.decode_clips(ctx, dyn)[:, 1:], atol=1e-5)
    with pytest.raises(ValueError, match="dynamics_tokens: expected"):
        model.decode_future(ctx, dyn[0])
    with pytest.raises(ValueError, match="context's N = 3"):
        model.decode_future(ctx, dyn[:2])
    with pytest.raises(ValueError, match="dynamics_tokens: ids must be in"):
        model.decode_future(ctx, dyn + model.dynamics_codebook_size)
    with pytest.raises(ValueError, match="context_tokens: ids must be in"):
        model.decode_future(ctx - 1 - ctx.max(), dyn)
