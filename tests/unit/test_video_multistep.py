"""Multi-step video: sequences from clips, orchestrator items, sample splitting, the in-process
interleaved rollout against teacher forcing, MLE on multi-step sequences, and the config."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from pydantic import ValidationError

from rlvr_world.apps.video.config import VideoPipelineConfig
from rlvr_world.items import (
    VideoPayload,
    load_items,
    save_items,
    video_frames,
    video_inserts,
    video_item,
)
from rlvr_world.video.actions import ActionQuantizer
from rlvr_world.video.data import Episode, clips
from rlvr_world.video.evaluate import EvalConfig
from rlvr_world.video.layout import IGNORE_INDEX, generated_frames
from rlvr_world.video.multistep import (
    clip_length,
    context_clip_pairs,
    encode_multistep_clips,
    multistep_item,
    multistep_vocab,
    rollout_inserts,
    sample_multistep,
)
from rlvr_world.video.tokenizer import FrameTokenizer, TokenizerConfig
from rlvr_world.video.train_mle import MLEConfig, train_mle
from rlvr_world.video.world_model import build_world_model

torch.set_num_threads(1)

S = 3  # dynamics frames per sequence


@pytest.fixture(scope="module")
def tokenizer() -> FrameTokenizer:
    torch.manual_seed(0)
    return FrameTokenizer(
        TokenizerConfig(image_size=16, channels=(8, 8, 16), downsample=8, levels=(4, 4))
    )


def make_clip(seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    frames = rng.integers(0, 256, size=(clip_length(S), 16, 16, 3), dtype=np.uint8)
    actions = rng.uniform(0, 512, size=(clip_length(S) - 1, 2))
    return frames, actions


def test_sequences_follow_the_layout_with_the_frame_tokenizer(tokenizer: FrameTokenizer) -> None:
    quantizer = ActionQuantizer(np.array([[0.0, 512.0], [0.0, 512.0]]), 8)
    vocab = multistep_vocab(tokenizer, 8)
    frames, actions = make_clip(1)
    (seq,) = encode_multistep_clips([(frames, actions)], tokenizer, quantizer, vocab, S)
    per, dims = tokenizer.tokens_per_frame, 2
    tokens = tokenizer.encode_frames(frames)
    # ctx is frame 0 offset into the context range; d_s = frame s; a_s = action at frame s
    assert seq.input_ids[:per] == (tokens[0] + vocab.context_offset).tolist()
    bins = quantizer.tokens(actions[1 : S + 1]) + vocab.action_offset
    at = per
    for s in range(S):
        assert seq.input_ids[at : at + per] == tokens[s + 1].tolist()
        assert seq.input_ids[at + per : at + per + dims] == bins[s].tolist()
        at += per + dims
    assert len(seq.input_ids) == at and seq.prompt_length == 2 * per + dims
    # trained: d2..dS only; the rollout inserts a2..aS
    trained = [i for i, label in enumerate(seq.labels) if label != IGNORE_INDEX]
    expected = [per + s * (per + dims) + j for s in range(1, S) for j in range(per)]
    assert trained == expected
    assert rollout_inserts(seq) == bins[1:].tolist()
    assert seq.loss_mask == ([1] * per + [0] * dims) * (S - 1)


def test_sequences_refuse_wrong_clip_lengths_and_missing_actions(
    tokenizer: FrameTokenizer,
) -> None:
    quantizer = ActionQuantizer(np.array([[0.0, 512.0], [0.0, 512.0]]), 8)
    vocab = multistep_vocab(tokenizer, 8)
    frames, actions = make_clip(2)
    with pytest.raises(ValueError, match=r"clips\[0\]: expected 5 frames and 4 action rows"):
        encode_multistep_clips([(frames[:-1], actions[:-1])], tokenizer, quantizer, vocab, S)
    with pytest.raises(ValueError, match="quantizer: the multi-step layout needs actions"):
        encode_multistep_clips([(frames, actions)], tokenizer, None, vocab, S)
    with pytest.raises(ValueError, match="segment_frames: need at least 2"):
        clip_length(1)


def test_multistep_items_round_trip_and_single_step_items_are_unchanged(
    tokenizer: FrameTokenizer, tmp_path: Path
) -> None:
    quantizer = ActionQuantizer(np.array([[0.0, 512.0], [0.0, 512.0]]), 8)
    vocab = multistep_vocab(tokenizer, 8)
    frames, actions = make_clip(3)
    (seq,) = encode_multistep_clips([(frames, actions)], tokenizer, quantizer, vocab, S)
    item = multistep_item("c0", seq, frames)
    save_items([item], tmp_path / "items.jsonl")
    (back,) = load_items(tmp_path / "items.jsonl")
    assert back == item and back.rollout_prompt == seq.prompt_ids
    target, previous = video_frames(back)
    np.testing.assert_array_equal(target, frames[2 : S + 1])
    np.testing.assert_array_equal(previous, frames[1])
    inserts, segment = video_inserts(back)
    assert inserts == rollout_inserts(seq) and segment == tokenizer.tokens_per_frame
    single = video_item("c1", [1, 2], frames[0], frames[1], target_tokens=[3])
    assert single.extra_info == {} and single.video is not None
    assert not single.video.multi_step and video_inserts(single) == ([], 0)


def test_multistep_items_refuse_mismatches_by_field() -> None:
    frames = np.zeros((2, 8, 8, 3), dtype=np.uint8)
    with pytest.raises(ValueError, match="inserts: 1 runs for 2 target frames"):
        video_item("c", [1], frames, frames[0], inserts=[[5]], segment_tokens=4)
    with pytest.raises(ValueError, match="target_frame: a multi-step item needs"):
        video_item("c", [1], frames[0], frames[0], inserts=[[5]], segment_tokens=4)
    with pytest.raises(ValueError, match="segment_tokens: must be >= 1"):
        video_item("c", [1], frames, frames[0], inserts=[[5], [6]])
    with pytest.raises(ValueError, match="inserts: every run needs"):
        video_item("c", [1], frames, frames[0], inserts=[[5], []], segment_tokens=4)
    item = video_item("c", [1], frames, frames[0], inserts=[[5], [6]], segment_tokens=4)
    assert item.video is not None
    broken = item.video.to_json() | {"inserts": [[5]]}
    with pytest.raises(ValueError, match=r"inserts: 1 runs for 2 target frames"):
        VideoPayload.from_json(broken)


def test_generated_frames_drop_the_forced_tokens() -> None:
    ids = [1, 2, 90, 91, 3, 4, 92, 93]
    flags = [False, False, True, True] * 2
    assert generated_frames(ids, flags, 2, 2) == [[1, 2], [3, 4]]
    assert generated_frames(ids, [], 2, 2) == [[1, 2], [3, 4]]  # by the layout's blocks
    with pytest.raises(ValueError, match="3 flags for 8 tokens"):
        generated_frames(ids, flags[:3], 2, 2)
    with pytest.raises(ValueError, match="4 generated tokens, expected 2 frames of 3"):
        generated_frames(ids, flags, 2, 3)


def test_interleaved_sampler_matches_teacher_forcing(tokenizer: FrameTokenizer) -> None:
    """Greedy rollout with a KV cache = argmax of full forwards over the growing sequence with
    the true actions spliced in after each frame."""
    vocab = multistep_vocab(tokenizer, 8)
    model = build_world_model(vocab, hidden=32, layers=2, heads=2, max_len=64, seed=1)
    model.eval()  # type: ignore[no-untyped-call]
    per, dims, steps = tokenizer.tokens_per_frame, 2, S - 1
    rng = np.random.default_rng(4)
    prompts = rng.integers(0, vocab.dynamics_codes, size=(3, 2 * per + dims))
    inserts = rng.integers(vocab.action_offset, vocab.bos, size=(3, steps, dims))
    allowed = range(vocab.dynamics_codes)
    got = sample_multistep(
        model, prompts, inserts, per, allowed, cfg=EvalConfig(temperature=0, batch_size=2)
    )
    assert got.shape == (3, steps, per)
    for row in range(3):
        ids = list(prompts[row])
        for t in range(steps):
            for j in range(per):
                with torch.inference_mode():
                    logits = model(input_ids=torch.tensor([ids])).logits[0, -1]
                nxt = int(logits[: vocab.dynamics_codes].argmax())
                assert got[row, t, j] == nxt, (row, t, j)
                ids.append(nxt)
            ids += inserts[row, t].tolist()


def test_mle_trains_on_multistep_sequences(tokenizer: FrameTokenizer) -> None:
    quantizer = ActionQuantizer(np.array([[0.0, 512.0], [0.0, 512.0]]), 8)
    vocab = multistep_vocab(tokenizer, 8)
    seqs = encode_multistep_clips([make_clip(i) for i in range(4)], tokenizer, quantizer, vocab, S)
    model = build_world_model(vocab, hidden=32, layers=1, heads=2, max_len=64)
    result = train_mle(model, seqs, MLEConfig(steps=3, batch_size=2, warmup_steps=0), pad_id=0)
    assert result.step == 3 and all(np.isfinite(result.losses))


def test_config_layout_fields_are_checked_by_name() -> None:
    cfg = VideoPipelineConfig.model_validate(
        {"model": {"layout": "multi_step", "segment_frames": 5}, "data": {"steps": 6}}
    )
    assert cfg.model.clip_frames == 7 and VideoPipelineConfig().model.clip_frames == 3
    bad = {
        json.dumps({"model": {"segment_frames": 3}}): "model.segment_frames: only used with",
        json.dumps(
            {"model": {"layout": "multi_step", "context_length": 3}}
        ): "model.context_length: the multi-step layout has one context frame",
        json.dumps(
            {"model": {"layout": "multi_step", "segment_frames": 8}, "data": {"steps": 8}}
        ): "data.steps: a clip of model.segment_frames 8 needs 10 frames",
        json.dumps({"model": {"layout": "multistep"}}): "layout",
        json.dumps(
            {"model": {"context_range": 15}}
        ): "model.context_range: only used with model.layout multi_step",
        json.dumps({"model": {"layout": "multi_step", "context_range": -1}}): "context_range",
    }
    for text, message in bad.items():
        with pytest.raises(ValidationError, match=message):
            VideoPipelineConfig.model_validate(json.loads(text))


def _numbered_episode(n_frames: int) -> Episode:
    """Frame ``i`` is filled with the value ``i``; action ``i`` is ``(i, -i)``."""
    frames = np.repeat(np.arange(n_frames, dtype=np.uint8), 4 * 4 * 3).reshape(n_frames, 4, 4, 3)
    actions = np.stack([np.arange(n_frames - 1), -np.arange(n_frames - 1)], axis=1)
    return Episode(frames, actions.astype(np.float32), "numbered")


def test_random_context_clips_keep_the_segments_and_draw_the_context_in_range() -> None:
    episodes = [_numbered_episode(20), _numbered_episode(12)]
    contiguous = list(clips(episodes, clip_length(S)))
    drawn = context_clip_pairs(episodes, S, 15, seed=0)
    assert len(drawn) == len(contiguous)
    seen = set()
    for (frames, actions), clip in zip(drawn, contiguous, strict=True):
        np.testing.assert_array_equal(frames[1:], clip.frames[1:])  # d1 .. and the actions
        np.testing.assert_array_equal(actions, clip.actions)
        start, ctx = int(clip.frames[1, 0, 0, 0]), int(frames[0, 0, 0, 0])
        assert max(0, start - 15) <= ctx <= start
        seen.add(start - ctx)
    assert len(seen) > 3  # really drawn, not always the same offset
    again = context_clip_pairs(episodes, S, 15, seed=0)
    assert all(np.array_equal(a[0], b[0]) for a, b in zip(drawn, again, strict=True))
    other = context_clip_pairs(episodes, S, 15, seed=1)
    assert any(not np.array_equal(a[0], b[0]) for a, b in zip(drawn, other, strict=True))


def test_context_range_zero_takes_d1_as_context_and_bad_ranges_are_refused() -> None:
    for frames, _ in context_clip_pairs([_numbered_episode(10)], S, 0, seed=0):
        assert frames[0, 0, 0, 0] == frames[1, 0, 0, 0]
    for bad in (-1, 1.5, True):
        with pytest.raises(ValueError, match="context_range"):
            context_clip_pairs([_numbered_episode(10)], S, bad, seed=0)  # type: ignore[arg-type]
