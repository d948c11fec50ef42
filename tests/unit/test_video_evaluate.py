"""Held-out evaluation: masked batched sampling with a KV cache, metrics and the PNG grid."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from transformers import LlamaForCausalLM

from rlvr_world.rewards.perceptual import make_perceptual
from rlvr_world.video import data
from rlvr_world.video.actions import ActionQuantizer
from rlvr_world.video.evaluate import (
    EvalConfig,
    evaluate,
    pick,
    restrict_logits,
    sample_frames,
    write_grid,
)
from rlvr_world.video.layout import SingleStepVocab
from rlvr_world.video.tokenizer import FrameTokenizer, TokenizerConfig
from rlvr_world.video.train_mle import MLEConfig, encode_clips, save_checkpoint, train_mle
from rlvr_world.video.world_model import WorldModelSpec, build_world_model, load_world_model
from services.rollout.engine import SamplingParams
from services.rollout.transformers_engine import TransformersEngine
from tests.helpers.shared import shared_files

torch.set_num_threads(1)

VOCAB = SingleStepVocab(visual_codes=9, action_bins=8)


def tiny_model() -> LlamaForCausalLM:
    return build_world_model(VOCAB, hidden=64, layers=2, heads=4, max_len=64, seed=0)


def test_restrict_logits_masks_outside_range() -> None:
    logits = torch.arange(12, dtype=torch.float32).repeat(2, 1)
    out = restrict_logits(logits, range(2, 5))
    assert out[0].argmax().item() == 4
    assert torch.isinf(out[:, :2]).all() and torch.isinf(out[:, 5:]).all()
    assert torch.equal(out[:, 2:5], logits[:, 2:5])


def test_pick_greedy_and_top_k() -> None:
    logits = torch.tensor([[0.0, 3.0, 1.0, 2.0]])
    assert pick(logits, 0.0, 0, None).tolist() == [1]
    gen = torch.Generator().manual_seed(0)
    draws = {int(pick(logits, 1.0, 2, gen)) for _ in range(50)}
    assert draws == {1, 3}


def test_sample_frames_greedy_matches_uncached_argmax() -> None:
    model = tiny_model()
    rng = np.random.default_rng(0)
    prompts = rng.integers(0, VOCAB.size, size=(3, 10))
    cfg = EvalConfig(temperature=0.0, batch_size=2)
    out = sample_frames(model, prompts, 5, range(VOCAB.visual_codes), cfg)
    assert out.shape == (3, 5)
    ids = torch.from_numpy(prompts)
    with torch.no_grad():
        for _ in range(5):
            logits = model(input_ids=ids).logits[:, -1, :]
            nxt = restrict_logits(logits, range(VOCAB.visual_codes)).argmax(-1)
            ids = torch.cat([ids, nxt[:, None]], dim=1)
    assert out.tolist() == ids[:, 10:].tolist()


def test_sample_frames_seeded_and_visual_only() -> None:
    model = tiny_model()
    prompts = np.full((4, 6), VOCAB.bos, dtype=np.int64)
    cfg = EvalConfig(temperature=1.0, top_k=0, seed=3, batch_size=4)
    a = sample_frames(model, prompts, 20, range(VOCAB.visual_codes), cfg)
    b = sample_frames(model, prompts, 20, range(VOCAB.visual_codes), cfg)
    assert np.array_equal(a, b)
    assert a.min() >= 0 and a.max() < VOCAB.visual_codes
    c = sample_frames(
        model, prompts, 20, range(VOCAB.visual_codes), cfg.model_copy(update={"seed": 4})
    )
    assert not np.array_equal(a, c)


def test_write_grid_lays_out_rows_and_columns(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    context = [rng.integers(0, 255, size=(2, 8, 10, 3), dtype=np.uint8) for _ in range(3)]
    pred = rng.random((3, 8, 10, 3)).astype(np.float32)
    truth = rng.integers(0, 255, size=(3, 8, 10, 3), dtype=np.uint8)
    path = write_grid(tmp_path / "g.png", context, pred, truth, scale=2, gap=4)
    img = np.asarray(Image.open(path))
    assert img.shape == (14 + 3 * (16 + 4) + 4, 4 * (20 + 4) + 4, 3)
    # the true frame of row 1 (column 3) sits where the layout puts it, upscaled 2x
    top, left = 14 + 4 + 1 * 20, 4 + 3 * 24
    assert np.array_equal(img[top : top + 16 : 2, left : left + 20 : 2], truth[1])
    with pytest.raises(ValueError, match="same non-zero length"):
        write_grid(tmp_path / "h.png", context[:2], pred, truth)


@pytest.mark.slow
def test_evaluate_reports_metrics_baselines_and_grid(tmp_path: Path) -> None:
    tok = FrameTokenizer(
        TokenizerConfig(image_size=32, channels=(8, 8, 16), downsample=8, levels=(3, 3))
    )
    assert tok.codebook_size == VOCAB.visual_codes
    rng = np.random.default_rng(1)
    clips = []
    for _ in range(5):
        frames = rng.integers(0, 255, size=(3, 32, 32, 3), dtype=np.uint8)
        frames[2] = frames[1]  # the true next frame repeats the last context frame
        clips.append((frames, rng.uniform(0, 512, size=(2, 2)).astype(np.float32)))
    quantizer = ActionQuantizer(np.array([[0.0, 512.0], [0.0, 512.0]]), bins=8)
    perceptual = make_perceptual("stlpips", "vgg", device="cpu")
    cfg = EvalConfig(temperature=1.0, top_k=5, seed=0, batch_size=2, grid_rows=3)
    report = evaluate(
        tiny_model(),
        tok,
        clips,
        cfg,
        vocab=VOCAB,
        quantizer=quantizer,
        perceptual=perceptual,
        out_dir=tmp_path,
    )
    assert report["n_clips"] == 5 and report["perceptual"] == "stlpips"
    for key in ("l1", "mse", "psnr", "ssim", "stlpips", "reward", "repetition_rate"):
        assert np.isfinite(report[key]), key
    assert report["reward"] == pytest.approx(-(report["l1"] + report["stlpips"]))
    # the last context frame is the true frame, so "copy" equals the tokenizer's reconstruction
    for key in ("l1", "mse", "psnr", "stlpips", "reward"):
        assert report[f"copy_{key}"] == pytest.approx(report[f"recon_{key}"]), key
    # copying the raw last frame is exact here: the true frame is that frame
    assert report["raw_copy_l1"] == 0.0 and report["raw_copy_psnr"] == 100.0
    for key in ("l1", "reward", "stlpips", "psnr"):  # per clip, in clip order, means agree
        assert len(report["per_clip"][key]) == 5
        assert np.mean(report["per_clip"][key]) == pytest.approx(report[key])
        assert np.mean(report["per_clip_copy"][key]) == pytest.approx(report[f"copy_{key}"])
    assert 0.0 <= report["token_copy_rate"] <= 1.0
    # the true frame repeats the last one: nothing truly changed, so recall has nothing to count
    assert report["changed_true"] == 0.0 and report["changed_recall"] is None
    assert report["changed_pred"] == pytest.approx(16 * (1 - report["token_copy_rate"]))
    assert json.loads((tmp_path / "eval.json").read_text())["n_clips"] == 5
    grid = np.asarray(Image.open(tmp_path / "grid.png"))
    assert grid.shape[0] == 14 + 3 * (64 + 4) + 4 and grid.shape[1] == 4 * (64 + 4) + 4
    sequences = encode_clips(clips, tok, quantizer, VOCAB)
    again = evaluate(
        tiny_model(),
        tok,
        clips,
        cfg.model_copy(update={"baselines": False}),
        vocab=VOCAB,
        quantizer=quantizer,
        perceptual=perceptual,
        sequences=sequences,
    )
    assert again["l1"] == report["l1"] and again["reward"] == report["reward"]
    assert "copy_l1" not in again and "recon_l1" not in again and "per_clip_copy" not in again
    assert again["per_clip"] == report["per_clip"]
    # anchored: "copy" is the raw last frame exactly, and so is the true frame's reconstruction
    # here (true = last context frame: its tokens equal the context's, nothing is decoded)
    anchored = evaluate(
        tiny_model(),
        tok,
        clips,
        cfg.model_copy(update={"anchor_dilate": 0}),
        vocab=VOCAB,
        quantizer=quantizer,
        perceptual=perceptual,
        sequences=sequences,
    )
    assert anchored["anchor_dilate"] == 0 and report["anchor_dilate"] is None
    # (to float32 rounding: the anchored frames are float32, the raw copy is scored from uint8)
    for key in ("l1", "mse", "reward"):
        raw = anchored[f"raw_copy_{key}"]
        assert anchored[f"copy_{key}"] == pytest.approx(raw, abs=1e-6), key
        assert anchored[f"recon_{key}"] == pytest.approx(raw, abs=1e-6), key
    assert anchored["copy_l1"] < 1e-6 and anchored["copy_psnr"] > 60.0


@pytest.mark.slow
def test_real_pusht_clips_train_save_serve_and_evaluate(tmp_path: Path) -> None:
    """data.Clip objects from the real PushT sample through MLE, the engine and evaluation."""
    paths = shared_files("*.npz", "data", "video", "pusht", need=2)
    episodes = [data.resize_episode(e, 32) for e in data.load_episodes(paths)]
    quantizer = ActionQuantizer.from_actions(data.all_actions(episodes[:1]), bins=8)
    tok = FrameTokenizer(
        TokenizerConfig(image_size=32, channels=(8, 8, 16), downsample=8, levels=(3, 3))
    )
    train = list(data.clips(episodes[:1], 3, 10))
    held = list(data.clips(episodes[1:], 3, 25))
    sequences = encode_clips(train, tok, quantizer, VOCAB)
    model = build_world_model(VOCAB, hidden=64, layers=2, heads=4, max_len=64, seed=0)
    result = train_mle(model, sequences, MLEConfig(steps=5, batch_size=4), pad_id=VOCAB.pad)
    spec = WorldModelSpec(
        vocab=VOCAB, tokens_per_frame=16, context_length=2, action_quantizer=quantizer.to_dict()
    )
    ckpt = save_checkpoint(tmp_path / "ckpt", model, spec, result)
    engine = TransformersEngine(str(ckpt))
    params = SamplingParams(max_tokens=16, ignore_eos=True, seed=1, allowed_tokens=(0, 9))
    gen = engine.generate(sequences[0].prompt_ids, params)
    assert all(0 <= t < 9 for t in gen.samples[0].token_ids)
    loaded, _ = load_world_model(ckpt)
    report = evaluate(
        loaded,
        tok,
        held,
        EvalConfig(baselines=False, perceptual="stlpips"),
        vocab=VOCAB,
        quantizer=quantizer,
        out_dir=tmp_path / "eval",
    )
    assert report["n_clips"] == len(held) and np.isfinite(report["reward"])
    assert (tmp_path / "eval" / "grid.png").is_file()


def test_change_stats_count_where_the_model_moves_tokens() -> None:
    from rlvr_world.video.evaluate import change_stats

    last = np.array([[1, 1, 1, 1], [2, 2, 2, 2]])
    truth = np.array([[1, 5, 6, 1], [2, 2, 2, 7]])  # 3 true changes
    pred = np.array([[1, 5, 9, 3], [2, 2, 2, 2]])  # 3 predicted: 2 where truth moved, 1 exact
    stats = change_stats(pred, last, truth)
    assert stats == {
        "changed_true": 1.5,
        "changed_pred": 1.5,
        "changed_precision": pytest.approx(2 / 3),
        "changed_recall": pytest.approx(2 / 3),
        "changed_exact": pytest.approx(1 / 3),
    }
    still = change_stats(last, last, last)
    assert still["changed_precision"] is None and still["changed_recall"] is None


def test_report_pictures_are_anchored_where_the_run_anchors(tmp_path: Path) -> None:
    """compare.png's frames are rendered as the evaluations score them: with anchor_dilate set,
    the last context frame's own pixels wherever the sampled token equals the context token."""
    from rlvr_world.apps.video.config import SamplingChoice
    from rlvr_world.apps.video.report import predicted_frames
    from rlvr_world.video.anchor import last_context_tokens
    from rlvr_world.video.world_model import visual_ids

    tok = FrameTokenizer(
        TokenizerConfig(image_size=32, channels=(8, 8, 16), downsample=8, levels=(3, 3))
    )
    tiny_model().save_pretrained(tmp_path / "m")
    rng = np.random.default_rng(2)
    clips = [
        (
            rng.integers(0, 255, size=(2, 32, 32, 3), dtype=np.uint8),
            rng.uniform(0, 512, size=(1, 2)).astype(np.float32),
        )
        for _ in range(4)
    ]
    quantizer = ActionQuantizer(np.array([[0.0, 512.0], [0.0, 512.0]]), bins=8)
    kw = {"vocab": VOCAB, "quantizer": quantizer, "seed": 3}
    greedy = SamplingChoice(temperature=0.0, top_k=0)
    plain = predicted_frames(tmp_path / "m", clips, tok, sampling=greedy, **kw)
    anchored = predicted_frames(tmp_path / "m", clips, tok, sampling=greedy, anchor_dilate=0, **kw)
    assert plain.shape == anchored.shape == (4, 32, 32, 3)
    prompts = [s.prompt_ids for s in encode_clips(clips, tok, quantizer, VOCAB)]
    model = LlamaForCausalLM.from_pretrained(str(tmp_path / "m"))
    tokens = sample_frames(
        model, np.array(prompts), 16, visual_ids(VOCAB), EvalConfig(temperature=0.0, seed=3)
    )
    raw = np.stack([f[-2] for f, _ in clips]).astype(np.float32) / 255.0
    kept = 0
    for i, prompt in enumerate(prompts):
        same = np.array(last_context_tokens(prompt, 16, 2)) == tokens[i]
        for k in np.flatnonzero(same):  # an unchanged token: the real frame's pixels, exactly
            r, c = divmod(int(k), 4)
            patch = (i, slice(8 * r, 8 * r + 8), slice(8 * c, 8 * c + 8))
            np.testing.assert_allclose(anchored[patch], raw[patch], atol=1e-6)
            kept += 1
    assert 0 < kept < tokens.size  # both kinds of patch occur
    assert not np.allclose(plain, anchored)
