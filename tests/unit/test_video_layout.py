"""Single- and multi-step sequence layouts (docs/reference.md#sequence-layouts) against the
golden records."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from rlvr_world.video.actions import ActionQuantizer
from rlvr_world.video.layout import (
    IGNORE_INDEX,
    MultiStepVocab,
    SingleStepVocab,
    multi_step,
    multi_step_frames,
    single_step,
)
from tests.helpers.shared import read_jsonl


def _record(shared: Path, kind: str) -> dict[str, Any]:
    rows = [
        r for r in read_jsonl(shared / "golden" / "golden_grpo_video.jsonl") if r["kind"] == kind
    ]
    assert len(rows) >= 1, kind
    return rows[0]


def _golden_actions(shared: Path) -> tuple[ActionQuantizer, np.ndarray]:
    """The 13-dim ranges and the five raw actions of the first action_discretization record."""
    q = ActionQuantizer(np.array(_record(shared, "action_ranges")["ranges"]))
    rows = read_jsonl(shared / "golden" / "golden_grpo_video.jsonl")
    first = next(r for r in rows if r["kind"] == "action_discretization")
    return q, np.array(first["actions"], dtype=np.float32)


def test_vocab_sizes_match_paper() -> None:
    single = SingleStepVocab(4375)
    assert (single.action_offset, single.bos, single.eos, single.pad, single.size) == (
        4375,
        4631,
        4632,
        4632,
        4633,
    )
    multi = MultiStepVocab(4375, 4375)
    assert (multi.context_offset, multi.action_offset, multi.bos, multi.eos, multi.size) == (
        4375,
        8750,
        9006,
        9007,
        9008,
    )


def test_single_step_golden(shared: Path) -> None:
    rec = _record(shared, "video_layout_single_step")
    cfg = rec["config"]
    vocab = SingleStepVocab(cfg["visual_token_num"], cfg["action_bins"])
    assert (vocab.bos, vocab.eos, vocab.pad) == (
        cfg["bos_token_id"],
        cfg["eos_token_id"],
        cfg["pad_token_id"],
    )
    # fake tokenizer: frame t token at position p = (1000*t + p) % 4375; 320 tokens per frame
    frames = np.array([[(1000 * t + p) % 4375 for p in range(320)] for t in range(5)])
    q, actions = _golden_actions(shared)
    seq = single_step(frames, q.tokens(actions[: cfg["context_length"]]), vocab)
    assert seq.input_ids == rec["input_ids"]
    assert seq.labels == rec["labels"]
    assert seq.attention_mask == [int(x) for x in rec["attention_mask"]]
    assert seq.position_ids == [int(x) for x in rec["position_ids"]]
    assert len(seq.input_ids) == rec["len_input_ids"] == 1654
    assert seq.prompt_length == rec["gen_input_length(max_prompt_length)"] == 1333
    assert seq.response_length == rec["response_length"] == 321
    assert seq.prompt_ids[-1] == vocab.bos
    assert seq.loss_mask == [1] * 321


def test_multi_step_golden(shared: Path) -> None:
    rec = _record(shared, "video_layout_multi_step")
    cfg = rec["config"]
    vocab = MultiStepVocab(4375, 4375, cfg["action_bins"])
    assert (vocab.bos, vocab.eos, vocab.pad) == (
        cfg["bos_token_id"],
        cfg["eos_token_id"],
        cfg["pad_token_id"],
    )
    # fake tokenizer: ctx token p = p % 4375 (1280 tokens); dyn token of future frame t (1..8)
    # at p = (p + 100*t) % 4375 (80 tokens)
    ctx = np.arange(1280) % 4375
    dyn = np.array([[(p + 100 * t) % 4375 for p in range(80)] for t in range(1, 9)])
    golden_action_ids = np.array(rec["action_ids"])
    assert golden_action_ids.shape == (8, 13)
    # The record's actions are actions[:, 1:] of a 9-frame clip; the first four are the raw
    # actions 1..4 of the golden action_discretization record, quantised here.
    q, actions = _golden_actions(shared)
    np.testing.assert_array_equal(
        q.tokens(actions[1:5]) + vocab.action_offset, golden_action_ids[:4]
    )
    seq = multi_step(ctx, dyn, golden_action_ids - vocab.action_offset, vocab)
    assert seq.input_ids == rec["input_ids"]
    assert seq.labels == rec["labels"]
    assert seq.action_ids == rec["action_ids"]
    assert seq.input_ids[:5] == rec["ctx_tokens_offset"]
    assert len(seq.input_ids) == rec["len_input_ids"] == 2024
    assert seq.prompt_length == rec["gen_input_length(max_prompt_length)"] == 1373
    assert seq.response_length == rec["response_length"] == 651
    assert seq.attention_mask == [1] * 2024
    assert seq.position_ids == list(range(2024))


def test_multi_step_loss_mask_blocks(shared: Path) -> None:
    rec = _record(shared, "video_layout_multi_step")
    vocab = MultiStepVocab(4375, 4375)
    ctx = np.arange(1280)
    dyn = np.array([[(p + 100 * t) % 4375 for p in range(80)] for t in range(1, 9)])
    seq = multi_step(ctx, dyn, np.array(rec["action_ids"]) - vocab.action_offset, vocab)
    mask = np.array(seq.loss_mask).reshape(7, 93)
    assert (mask[:, :80] == 1).all()
    assert (mask[:, 80:] == 0).all()
    # the mask agrees with the labels: trained response tokens are exactly the labelled ones
    resp_labels = np.array(seq.labels[seq.prompt_length :])
    np.testing.assert_array_equal(resp_labels != IGNORE_INDEX, np.array(seq.loss_mask) == 1)
    frames = multi_step_frames(np.array(seq.response_ids), 80, 13)
    np.testing.assert_array_equal(frames, dyn[1:])


def test_single_step_small() -> None:
    vocab = SingleStepVocab(1000, 256)
    rng = np.random.default_rng(0)
    frames = rng.integers(0, 1000, size=(3, 64))
    bins = rng.integers(0, 256, size=(2, 2))
    seq = single_step(frames, bins, vocab)
    assert len(seq.input_ids) == 2 * (64 + 2) + 1 + 64 + 1 == 198
    assert seq.prompt_length == 133
    assert seq.response_length == 65
    assert seq.input_ids[64:66] == (bins[0] + 1000).tolist()
    assert seq.input_ids[66:130] == frames[1].tolist()
    assert seq.response_ids == [*frames[2].tolist(), vocab.eos]
    assert seq.labels[:132] == [IGNORE_INDEX] * 132
    assert seq.labels[132:] == seq.input_ids[132:]
    assert seq.action_ids == (bins + 1000).tolist()


def test_multi_step_small() -> None:
    vocab = MultiStepVocab(64, 128, 16)
    rng = np.random.default_rng(1)
    ctx = rng.integers(0, 128, size=(32,))
    dyn = rng.integers(0, 64, size=(4, 8))
    bins = rng.integers(0, 16, size=(4, 2))
    seq = multi_step(ctx, dyn, bins, vocab)
    assert len(seq.input_ids) == 32 + 4 * 10
    assert seq.prompt_length == 42
    assert seq.response_length == 30
    assert seq.input_ids[:32] == (ctx + 64).tolist()
    assert seq.loss_mask == ([1] * 8 + [0] * 2) * 3
    assert all(i < vocab.bos for i in seq.input_ids)


def test_zero_dim_actions_layout() -> None:
    seq = single_step(
        np.zeros((3, 4), dtype=np.int64), np.zeros((2, 0), dtype=np.int64), SingleStepVocab(8)
    )
    assert len(seq.input_ids) == 4 + 4 + 1 + 4 + 1


@pytest.mark.parametrize(
    ("frames", "bins", "field"),
    [
        (np.full((3, 4), 8), np.zeros((2, 1), dtype=int), "frame_tokens"),
        (np.full((3, 4), -1), np.zeros((2, 1), dtype=int), "frame_tokens"),
        (np.zeros((3, 4)), np.zeros((2, 1), dtype=int), "frame_tokens"),  # float dtype
        (np.zeros((12,), dtype=int), np.zeros((2, 1), dtype=int), "frame_tokens"),
        (np.zeros((1, 4), dtype=int), np.zeros((0, 1), dtype=int), "frame_tokens"),
        (np.zeros((3, 4), dtype=int), np.zeros((3, 1), dtype=int), "action_bins"),
        (np.zeros((3, 4), dtype=int), np.full((2, 1), 256), "action_bins"),
        (np.zeros((3, 4), dtype=int), np.zeros((2,), dtype=int), "action_bins"),
    ],
)
def test_single_step_rejects(frames: np.ndarray, bins: np.ndarray, field: str) -> None:
    with pytest.raises(ValueError, match=field):
        single_step(frames, bins, SingleStepVocab(8))


@pytest.mark.parametrize(
    ("ctx", "dyn", "bins", "field"),
    [
        (
            np.full((4,), 16),
            np.zeros((3, 2), dtype=int),
            np.zeros((3, 1), dtype=int),
            "context_tokens",
        ),
        (
            np.zeros((0,), dtype=int),
            np.zeros((3, 2), dtype=int),
            np.zeros((3, 1), dtype=int),
            "context_tokens",
        ),
        (
            np.zeros((4,), dtype=int),
            np.full((3, 2), 8),
            np.zeros((3, 1), dtype=int),
            "dynamics_tokens",
        ),
        (
            np.zeros((4,), dtype=int),
            np.zeros((1, 2), dtype=int),
            np.zeros((1, 1), dtype=int),
            "dynamics_tokens",
        ),
        (
            np.zeros((4,), dtype=int),
            np.zeros((3, 2), dtype=int),
            np.zeros((2, 1), dtype=int),
            "action_bins",
        ),
        (np.zeros((4,), dtype=int), np.zeros((3, 2), dtype=int), np.full((3, 1), 4), "action_bins"),
    ],
)
def test_multi_step_rejects(ctx: np.ndarray, dyn: np.ndarray, bins: np.ndarray, field: str) -> None:
    with pytest.raises(ValueError, match=field):
        multi_step(ctx, dyn, bins, MultiStepVocab(8, 16, 4))


@pytest.mark.parametrize("value", [0, -3, True])
def test_vocab_rejects_bad_sizes(value: int) -> None:
    with pytest.raises(ValueError, match="visual_codes"):
        SingleStepVocab(value)
    with pytest.raises(ValueError, match="context_codes"):
        MultiStepVocab(8, value)


def test_multi_step_frames_rejects_bad_length() -> None:
    with pytest.raises(ValueError, match="response_ids"):
        multi_step_frames(np.zeros(11, dtype=int), 8, 2)
    with pytest.raises(ValueError, match="response_ids"):
        multi_step_frames(np.zeros(10), 8, 2)
