"""MLE training of the video world model on single-step layout sequences."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from rlvr_world.video.actions import ActionQuantizer
from rlvr_world.video.layout import SingleStepVocab, TokenSequence, single_step
from rlvr_world.video.tokenizer import FrameTokenizer, TokenizerConfig
from rlvr_world.video.train_mle import (
    TRAIN_STATE,
    MLEConfig,
    collate,
    encode_clips,
    lr_at,
    save_checkpoint,
    train_mle,
)
from rlvr_world.video.world_model import WorldModelSpec, build_world_model, load_world_model

torch.set_num_threads(1)

VOCAB = SingleStepVocab(visual_codes=16, action_bins=8)
TINY = {"hidden": 64, "layers": 2, "heads": 4, "max_len": 32}
P = 4  # tokens per frame


def copy_sequences(n: int, seed: int = 0) -> list[TokenSequence]:
    """Clips whose next frame repeats the last context frame: learnable by a tiny model."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        frames = rng.integers(0, VOCAB.visual_codes, size=(3, P))
        frames[2] = frames[1]
        actions = rng.integers(0, VOCAB.action_bins, size=(2, 2))
        out.append(single_step(frames, actions, VOCAB))
    return out


def test_lr_schedule_warmup_then_cosine_to_floor() -> None:
    cfg = MLEConfig(steps=12, lr=1e-3, warmup_steps=2, min_lr_ratio=0.1, schedule="cosine")
    assert lr_at(0, cfg) == pytest.approx(5e-4)
    assert lr_at(1, cfg) == pytest.approx(1e-3)
    assert lr_at(2, cfg) == pytest.approx(1e-3)
    assert lr_at(7, cfg) == pytest.approx(1e-4 + 0.9e-3 * 0.5)
    assert lr_at(12, cfg) == pytest.approx(1e-4)
    linear = cfg.model_copy(update={"schedule": "linear"})
    assert lr_at(7, linear) == pytest.approx(1e-4 + 0.9e-3 * 0.5)
    constant = cfg.model_copy(update={"schedule": "constant"})
    assert lr_at(11, constant) == pytest.approx(1e-3)


def test_collate_right_pads_with_ignored_labels() -> None:
    a = copy_sequences(1)[0]
    short = TokenSequence(
        input_ids=[1, 2, 3],
        labels=[-100, 2, 3],
        attention_mask=[1, 1, 1],
        position_ids=[0, 1, 2],
        prompt_length=1,
        response_length=2,
        loss_mask=[1, 1],
    )
    batch = collate([a, short], pad_id=VOCAB.pad)
    width = len(a.input_ids)
    assert batch["input_ids"].shape == (2, width)
    assert batch["input_ids"][1, 3:].tolist() == [VOCAB.pad] * (width - 3)
    assert batch["labels"][1, 3:].tolist() == [-100] * (width - 3)
    assert batch["attention_mask"][1].tolist() == [1, 1, 1] + [0] * (width - 3)
    assert batch["position_ids"][1].tolist() == list(range(width))
    assert batch["labels"][0].tolist() == a.labels


def test_train_lowers_loss_and_logs_each_step(tmp_path: Path) -> None:
    model = build_world_model(VOCAB, seed=0, **TINY)
    cfg = MLEConfig(steps=20, batch_size=8, lr=5e-3, warmup_steps=2, seed=1)
    log_path = tmp_path / "mle.jsonl"
    result = train_mle(model, copy_sequences(32), cfg, pad_id=VOCAB.pad, log_path=log_path)
    assert result.step == 20 and len(result.losses) == 20
    rows = [json.loads(line) for line in log_path.read_text().splitlines()]
    assert [r["step"] for r in rows] == list(range(1, 21))
    assert {"loss", "lr", "grad_norm", "tokens", "elapsed_s"} <= set(rows[0])
    assert rows[-1]["tokens"] == 20 * 8 * len(copy_sequences(1)[0].input_ids)
    assert np.mean(result.losses[-5:]) < 0.7 * np.mean(result.losses[:5])
    assert math.log(VOCAB.size) * 0.7 < result.losses[0] < math.log(VOCAB.size) * 1.5
    assert not model.training and result.tokens_per_s > 0


def test_time_budget_stops_early() -> None:
    model = build_world_model(VOCAB, seed=0, **TINY)
    cfg = MLEConfig(steps=100_000, batch_size=4, time_budget_s=0.5)
    result = train_mle(model, copy_sequences(8), cfg, pad_id=VOCAB.pad)
    assert 1 <= result.step < 100_000
    # stops at the first step boundary after 0.5 s: a step takes milliseconds here, so 30 s
    # leaves room for a starved machine (make test-stress) while 100,000 steps would take minutes
    assert 0.5 <= result.seconds < 30.0


def test_resume_from_checkpoint_matches_uninterrupted_run(tmp_path: Path) -> None:
    data = copy_sequences(12)
    cfg = MLEConfig(steps=8, batch_size=4, lr=2e-3, warmup_steps=2, seed=5)
    spec = WorldModelSpec(vocab=VOCAB, tokens_per_frame=P, context_length=2)
    straight = build_world_model(VOCAB, seed=2, **TINY)
    full = train_mle(straight, data, cfg, pad_id=VOCAB.pad)

    first = build_world_model(VOCAB, seed=2, **TINY)
    half = train_mle(first, data, cfg, pad_id=VOCAB.pad, max_new_steps=4)
    folder = save_checkpoint(tmp_path / "ckpt", first, spec, half)
    assert (folder / TRAIN_STATE).is_file()
    resumed, loaded_spec = load_world_model(folder)
    assert loaded_spec.vocab == VOCAB
    rest = train_mle(resumed, data, cfg, pad_id=VOCAB.pad, resume=folder)
    assert (rest.start_step, rest.step) == (4, 8)
    assert half.losses + rest.losses == pytest.approx(full.losses, rel=1e-5)
    for (name, p), q in zip(straight.named_parameters(), resumed.parameters(), strict=True):
        torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-6, msg=name)


def test_rejects_sequences_without_targets() -> None:
    model = build_world_model(VOCAB, seed=0, **TINY)
    s = copy_sequences(1)[0]
    blank = TokenSequence(
        input_ids=s.input_ids,
        labels=[-100] * len(s.labels),
        attention_mask=s.attention_mask,
        position_ids=s.position_ids,
        prompt_length=s.prompt_length,
        response_length=s.response_length,
        loss_mask=s.loss_mask,
    )
    with pytest.raises(ValueError, match=r"sequences\[0\]"):
        train_mle(model, [blank], MLEConfig(steps=1), pad_id=VOCAB.pad)
    with pytest.raises(ValueError, match="empty"):
        train_mle(model, [], MLEConfig(steps=1), pad_id=VOCAB.pad)


def test_encode_clips_shares_frames_of_overlapping_clips() -> None:
    tok = FrameTokenizer(
        TokenizerConfig(image_size=16, channels=(8, 8, 16), downsample=8, levels=(4, 4))
    )
    vocab = SingleStepVocab(visual_codes=tok.codebook_size, action_bins=8)
    rng = np.random.default_rng(0)
    frames = rng.integers(0, 255, size=(5, 16, 16, 3), dtype=np.uint8)
    actions = rng.uniform(-1, 1, size=(4, 2))
    clips = [(frames[s : s + 3], actions[s : s + 2]) for s in range(3)]
    quantizer = ActionQuantizer(np.array([[-1.0, 1.0], [-1.0, 1.0]]), bins=8)
    sequences = encode_clips(clips, tok, quantizer, vocab, batch_size=2)
    direct = tok.encode_frames(frames)
    for s, seq in enumerate(sequences):
        expected = single_step(direct[s : s + 3], quantizer.tokens(actions[s : s + 2]), vocab)
        assert seq == expected


def test_encode_clips_holds_the_tokens_of_still_patches() -> None:
    """A 2x2 token grid over 16x16 frames: only the top-left patch moves between the frames, so
    with ``hold_below`` the other three keep frame 0's tokens even where the encoder (whose
    receptive field spans patches) gave them new ones."""
    tok = FrameTokenizer(
        TokenizerConfig(image_size=16, channels=(8, 8, 16), downsample=8, levels=(4, 4))
    )
    vocab = SingleStepVocab(visual_codes=tok.codebook_size, action_bins=8)
    rng = np.random.default_rng(1)
    first = rng.integers(0, 255, size=(16, 16, 3), dtype=np.uint8)
    second = first.copy()
    second[:8, :8] = 255 - second[:8, :8]  # the top-left patch changes a lot
    second[8:, 8:] = np.clip(second[8:, 8:].astype(int) + 3, 0, 255)  # bottom-right: +3 levels
    frames = np.stack([first, second])
    clip = [(frames, np.zeros((1, 2)))]
    quantizer = ActionQuantizer(np.array([[-1.0, 1.0], [-1.0, 1.0]]), bins=8)
    raw = tok.encode_frames(frames)
    held = encode_clips(clip, tok, quantizer, vocab, hold_below=8)[0]
    target = held.input_ids[held.prompt_length : held.prompt_length + 4]
    assert target == [int(raw[1, 0]), int(raw[0, 1]), int(raw[0, 2]), int(raw[0, 3])]
    # At 2 levels the bottom-right patch counts as moved and keeps its own new token.
    strict = encode_clips(clip, tok, quantizer, vocab, hold_below=2)[0]
    assert strict.input_ids[strict.prompt_length + 3] == int(raw[1, 3])
    assert encode_clips(clip, tok, quantizer, vocab)[0] == single_step(
        raw, quantizer.tokens(np.zeros((1, 2))), vocab
    )
