"""The compressive tokenizer in the multi-step layout (``tokenizer.kind: compressive``): sequences
with many context tokens and few dynamics tokens per frame, decoding against each clip's own
context, items that carry the context tokens to the decoder service, the run config's checks."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from pydantic import ValidationError

from rlvr_world.apps.video.config import VideoPipelineConfig, load_video_config
from rlvr_world.items import VideoPayload, load_items, save_items, video_context, video_item
from rlvr_world.video.actions import ActionQuantizer
from rlvr_world.video.codec import (
    codebook_sizes,
    decode_future,
    dynamics_tokens_per_frame,
    encode_clip_tokens,
    load_video_tokenizer,
    per_frame,
)
from rlvr_world.video.compressive import CompressiveTokenizer
from rlvr_world.video.multistep import (
    clip_length,
    context_tokens,
    encode_multistep_clips,
    multistep_item,
    multistep_vocab,
)
from rlvr_world.video.tokenizer import FrameTokenizer, TokenizerConfig
from tests.unit.test_video_tokenizer import TINY_CTX

REPO = Path(__file__).resolve().parents[2]
S = 3  # dynamics frames per sequence
CTX = TINY_CTX  # 64 context tokens of 9 codes, 4 dynamics tokens of 16 codes


@pytest.fixture(scope="module")
def compressive() -> CompressiveTokenizer:
    torch.manual_seed(0)
    return CompressiveTokenizer(CTX).eval()


def make_clips(n: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(n)
    frames = rng.integers(0, 256, size=(n, clip_length(S), 16, 16, 3), dtype=np.uint8)
    actions = rng.uniform(0, 512, size=(n, clip_length(S) - 1, 2))
    return frames, actions


def test_sequences_hold_the_context_tokens_then_few_dynamics_tokens_per_frame(
    compressive: CompressiveTokenizer,
) -> None:
    quantizer = ActionQuantizer(np.array([[0.0, 512.0], [0.0, 512.0]]), 8)
    vocab = multistep_vocab(compressive, 8)
    assert (vocab.dynamics_codes, vocab.context_codes) == (16, 9) == codebook_sizes(compressive)
    frames, actions = make_clips(2)
    seqs = encode_multistep_clips(
        list(zip(frames, actions, strict=True)), compressive, quantizer, vocab, S
    )
    ctx, dyn = compressive.encode_clips(frames)
    pc, pd, dims = 64, 4, 2
    for i, seq in enumerate(seqs):
        assert seq.input_ids[:pc] == (ctx[i] + vocab.context_offset).tolist()
        assert context_tokens(seq, vocab) == ctx[i].tolist()
        assert seq.input_ids[pc : pc + pd] == dyn[i, 0].tolist()
        assert seq.prompt_length == pc + pd + dims
        assert len(seq.input_ids) == pc + S * (pd + dims)
    assert dynamics_tokens_per_frame(compressive) == pd


def test_decoding_uses_each_clips_own_context(compressive: CompressiveTokenizer) -> None:
    frames, _ = make_clips(2)
    ctx, dyn = encode_clip_tokens(compressive, frames)
    both = decode_future(compressive, ctx, dyn[:, :2])
    swapped = decode_future(compressive, ctx[::-1].copy(), dyn[:, :2])
    assert both.shape == (2, 2, 16, 16, 3)
    np.testing.assert_allclose(both, compressive.decode_clips(ctx, dyn[:, :2])[:, 1:], atol=1e-5)
    assert np.abs(both - swapped).max() > 1e-4  # the context changes the decoded frames


def test_the_per_frame_tokenizer_gives_the_same_arrays_and_ignores_the_context() -> None:
    torch.manual_seed(0)
    tok = FrameTokenizer(
        TokenizerConfig(image_size=16, channels=(8, 8, 16), downsample=8, levels=(4, 4))
    ).eval()
    frames, _ = make_clips(2)
    ctx, dyn = encode_clip_tokens(tok, frames)
    tokens = tok.encode_frames(frames.reshape(-1, 16, 16, 3)).reshape(2, clip_length(S), -1)
    np.testing.assert_array_equal(ctx, tokens[:, 0])
    np.testing.assert_array_equal(dyn, tokens[:, 1:])
    out = decode_future(tok, ctx, dyn)
    np.testing.assert_allclose(out, decode_future(tok, ctx[::-1].copy(), dyn), atol=0)
    np.testing.assert_allclose(out[1, 2], tok.decode_tokens(dyn[1, 2:3])[0], atol=1e-6)
    assert per_frame(tok, "x") is tok
    with pytest.raises(ValueError, match="dynamics: expected"):
        decode_future(tok, ctx, dyn[0])
    with pytest.raises(ValueError, match="clips: expected uint8"):
        encode_clip_tokens(tok, frames[0])


def test_the_single_step_code_refuses_the_compressive_tokenizer_by_name(
    compressive: CompressiveTokenizer,
) -> None:
    with pytest.raises(ValueError, match="single-step: needs the per-frame tokenizer"):
        per_frame(compressive, "single-step")


def test_checkpoints_load_as_their_kind(compressive: CompressiveTokenizer, tmp_path: Path) -> None:
    compressive.save(tmp_path / "ctx")
    assert isinstance(load_video_tokenizer(tmp_path / "ctx"), CompressiveTokenizer)
    assert isinstance(
        load_video_tokenizer(tmp_path / "ctx", expect="compressive"), CompressiveTokenizer
    )
    with pytest.raises(
        ValueError, match=r"holds a compressive_tokenizer, but tokenizer.kind is frame"
    ):
        load_video_tokenizer(tmp_path / "ctx", expect="frame")
    (tmp_path / "odd").mkdir()
    (tmp_path / "odd" / "config.json").write_text('{"kind": "odd", "format_version": 1}')
    with pytest.raises(ValueError, match="holds kind 'odd'"):
        load_video_tokenizer(tmp_path / "odd")
    with pytest.raises(FileNotFoundError, match=r"config.json is missing"):
        load_video_tokenizer(tmp_path / "absent")


def test_items_carry_the_context_to_the_decoder_and_round_trip(
    compressive: CompressiveTokenizer, tmp_path: Path
) -> None:
    quantizer = ActionQuantizer(np.array([[0.0, 512.0], [0.0, 512.0]]), 8)
    vocab = multistep_vocab(compressive, 8)
    frames, actions = make_clips(1)
    (seq,) = encode_multistep_clips([(frames[0], actions[0])], compressive, quantizer, vocab, S)
    item = multistep_item("c0", seq, frames[0], context=context_tokens(seq, vocab))
    save_items([item], tmp_path / "items.jsonl")
    (back,) = load_items(tmp_path / "items.jsonl")
    assert video_context(back) == compressive.encode_clips(frames)[0][0].tolist()
    assert video_context(multistep_item("c1", seq, frames[0])) == []  # per-frame: none
    with pytest.raises(ValueError, match="context_tokens: the decoder's context is multi-step"):
        video_item("c", [1], frames[0, 0], frames[0, 1], context_tokens=[1, 2])
    assert back.video is not None
    with pytest.raises(ValueError, match=r"context_tokens: expected a list of ints"):
        VideoPayload.from_json(back.video.to_json() | {"context_tokens": ["a"]})


def config(**tokenizer: object) -> dict[str, object]:
    return {
        "task": "video",
        "data": {"episodes": 5, "steps": 10, "held_out": 2, "image_size": 32},
        "tokenizer": {"channels": [16, 32], "downsample": 4, "levels": [4, 4], **tokenizer},
        "model": {"layout": "multi_step", "segment_frames": 3, "context_range": 3},
    }


def test_the_run_config_checks_the_compressive_tokenizer() -> None:
    ok = VideoPipelineConfig.model_validate(config(kind="compressive", context_downsample=4))
    assert ok.tokenizer.kind == "compressive" and ok.tokenizer.patch == 2
    single = config(kind="compressive")
    single["model"] = {"layout": "single_step"}
    with pytest.raises(ValidationError, match=r"only model.layout multi_step has"):
        VideoPipelineConfig.model_validate(single)
    with pytest.raises(ValidationError, match=r"do not fit data.image_size 32"):
        VideoPipelineConfig.model_validate(config(kind="compressive", patch=16))
    with pytest.raises(ValidationError, match="kind"):
        VideoPipelineConfig.model_validate(config(kind="vq"))


def test_the_shipped_comparison_configs_have_equal_tokens_per_frame() -> None:
    per = load_video_config(REPO / "configs" / "video" / "pusht_multistep_f16.yaml")
    ctx = load_video_config(REPO / "configs" / "video" / "pusht_multistep_ctx.yaml")
    side = per.data.image_size
    assert (side // per.tokenizer.downsample) ** 2 == 16
    assert (side // (ctx.tokenizer.downsample * ctx.tokenizer.patch)) ** 2 == 16
    assert ctx.tokenizer.kind == "compressive" and per.tokenizer.kind == "frame"
