"""Context-anchored decoding (rlvr_world.video.anchor): where the tokens did not change, the last
context frame's real pixels; where they did (grown by ``dilate``), those pixels plus the decoded
change (decoded prediction - decoded context tokens)."""

from __future__ import annotations

import numpy as np
import pytest

from rlvr_world.items import VideoPayload, video_anchor, video_item
from rlvr_world.video.anchor import (
    anchor_frames,
    anchor_samples,
    changed_mask,
    hold_unchanged,
    last_context_tokens,
)

GRID = (4, 4)  # 16 tokens, each 2x2 pixels of an 8x8 frame


def _frames(value: float, n: int = 1) -> np.ndarray:
    return np.full((n, 8, 8, 3), value, dtype=np.float32)


def test_unchanged_tokens_give_exactly_the_context_frame() -> None:
    rng = np.random.default_rng(0)
    ctx = rng.integers(0, 256, (2, 8, 8, 3), dtype=np.uint8)
    tokens = rng.integers(0, 50, (2, 16))
    out = anchor_frames(_frames(0.5, 2), _frames(0.3, 2), ctx, tokens, tokens.copy(), grid=GRID)
    np.testing.assert_array_equal(out, ctx.astype(np.float32) / 255.0)


def test_a_changed_token_adds_the_decoded_change_on_its_patch_and_dilated_neighbours() -> None:
    ctx_tokens = np.zeros((1, 16), dtype=np.int64)
    pred = ctx_tokens.copy()
    pred[0, 5] = 7  # grid position (1, 1)
    # decoded prediction 0.9, decoded context 0.6: the change is +0.3 on the real frame's 0.1
    decoded, base, ctx = _frames(0.9), _frames(0.6), _frames(0.1)
    exact = anchor_frames(decoded, base, ctx, pred, ctx_tokens, grid=GRID, dilate=0)
    assert np.allclose(exact[0, 2:4, 2:4], 0.4)
    assert np.isclose(exact.mean(), (4 * 0.4 + 60 * 0.1) / 64)
    grown = anchor_frames(decoded, base, ctx, pred, ctx_tokens, grid=GRID, dilate=1)
    assert np.allclose(grown[0, 0:6, 0:6], 0.4)  # rows/cols 0..2 of the grid
    assert np.allclose(grown[0, 6:, :], 0.1)
    assert np.allclose(grown[0, :, 6:], 0.1)


def test_changed_mask_at_the_border_does_not_wrap() -> None:
    ctx = np.zeros((1, 16), dtype=np.int64)
    pred = ctx.copy()
    pred[0, 0] = 1
    mask = changed_mask(pred, ctx, GRID, dilate=1)
    assert mask[0].sum() == 4  # (0,0), (0,1), (1,0), (1,1)
    assert not mask[0, 3, 3]


def test_results_are_clipped_and_float_contexts_are_used_as_given() -> None:
    ctx_tokens = np.zeros((1, 16), dtype=np.int64)
    pred = np.ones((1, 16), dtype=np.int64)
    up = anchor_frames(_frames(1.0), _frames(0.0), _frames(0.25), pred, ctx_tokens, grid=GRID)
    assert up.dtype == np.float32
    assert np.allclose(up, 1.0)
    down = anchor_frames(_frames(0.0), _frames(1.0), _frames(0.25), pred, ctx_tokens, grid=GRID)
    assert np.allclose(down, 0.0)
    same = anchor_frames(
        _frames(1.0), _frames(0.0), _frames(0.25), ctx_tokens, ctx_tokens, grid=GRID
    )
    assert np.allclose(same, 0.25)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"pred_tokens": np.zeros((1, 15), dtype=np.int64)}, "must be the same"),
        (
            {
                "pred_tokens": np.zeros((1, 15), dtype=np.int64),
                "context_tokens": np.zeros((1, 15), dtype=np.int64),
            },
            "per frame",
        ),
        ({"context_frames": _frames(0.1, 2)}, "must be the same"),
        ({"context_decoded": _frames(0.1, 2)}, "must be the same"),
        ({"grid": (2, 4)}, "per frame"),
        ({"dilate": -1}, "dilate"),
        (
            {
                "pred_tokens": np.zeros((2, 16), dtype=np.int64),
                "context_tokens": np.zeros((2, 16), dtype=np.int64),
            },
            "2 frames for 1 decoded",
        ),
    ],
)
def test_bad_inputs_are_refused_with_the_reason(kwargs: dict, message: str) -> None:
    args = {
        "decoded": _frames(0.5),
        "context_decoded": _frames(0.4),
        "context_frames": _frames(0.1),
        "pred_tokens": np.zeros((1, 16), dtype=np.int64),
        "context_tokens": np.zeros((1, 16), dtype=np.int64),
        "grid": GRID,
        "dilate": 1,
    }
    args.update(kwargs)
    with pytest.raises(ValueError, match=message):
        anchor_frames(**args)  # type: ignore[arg-type]


def test_a_grid_that_does_not_divide_the_frame_is_refused() -> None:
    tokens = np.zeros((1, 9), dtype=np.int64)
    with pytest.raises(ValueError, match="does not divide"):
        anchor_frames(_frames(0.5), _frames(0.5), _frames(0.1), tokens, tokens, grid=(3, 3))


def test_anchor_samples_anchors_every_sample_of_a_group_to_one_context() -> None:
    ctx_tokens = np.zeros(16, dtype=np.int64)
    ids = [[0] * 16, [0] * 5 + [3] + [0] * 10]
    previous = np.full((8, 8, 3), 51, dtype=np.uint8)  # 0.2
    base = np.full((8, 8, 3), 0.5, dtype=np.float32)
    out = anchor_samples(_frames(0.9, 2), base, previous, ids, ctx_tokens, grid=GRID, dilate=0)
    assert np.allclose(out[0], 0.2)
    assert np.allclose(out[1, 2:4, 2:4], 0.6)  # 0.2 + (0.9 - 0.5)
    assert np.isclose(out[1].mean(), (4 * 0.6 + 60 * 0.2) / 64)
    with pytest.raises(ValueError, match="expected \\(G, P\\)"):
        anchor_samples(_frames(0.9, 1), base, previous, [0] * 16, ctx_tokens, grid=GRID, dilate=0)  # type: ignore[arg-type]


def test_last_context_tokens_are_the_ids_before_the_last_action_and_bos() -> None:
    # [f0 (3 ids) a0 (2 ids)] [f1 (3 ids) a1 (2 ids)] BOS
    prompt = [1, 2, 3, 90, 91, 4, 5, 6, 92, 93, 99]
    assert last_context_tokens(prompt, 3, 2) == [4, 5, 6]
    assert last_context_tokens([7, 8, 99], 2, 0) == [7, 8]
    with pytest.raises(ValueError, match="cannot end in a frame"):
        last_context_tokens([7, 99], 2, 0)


def test_video_items_carry_their_anchor_and_refuse_a_wrong_one() -> None:
    frame = np.zeros((8, 8, 3), dtype=np.uint8)
    item = video_item("c", [1, 2, 3], frame, frame, anchor=(list(range(16)), GRID))
    tokens, grid = video_anchor(item)
    assert grid == GRID
    assert tokens.tolist() == list(range(16))
    with pytest.raises(ValueError, match="15 context tokens for a 4x4 grid"):
        video_item("c", [1], frame, frame, anchor=(list(range(15)), GRID))
    with pytest.raises(ValueError, match="single-step only"):
        video_item(
            "c",
            [1],
            np.zeros((2, 8, 8, 3), dtype=np.uint8),
            frame,
            inserts=[[1], [2]],
            segment_tokens=16,
            anchor=(list(range(16)), GRID),
        )
    with pytest.raises(ValueError, match="built without anchor"):
        video_anchor(video_item("c", [1], frame, frame))
    payload = video_item("c", [1], frame, frame, anchor=(list(range(16)), GRID)).video
    assert payload is not None
    with pytest.raises(ValueError, match="anchor_grid"):
        VideoPayload.from_json(payload.to_json() | {"anchor_grid": [4, 0]})
    with pytest.raises(ValueError, match="list of ints"):
        VideoPayload.from_json(payload.to_json() | {"anchor_tokens": [1.5] * 16})


def test_hold_unchanged_carries_tokens_through_still_frames_and_refuses_bad_shapes() -> None:
    frames = np.zeros((3, 8, 8, 3), dtype=np.uint8)
    frames[1, 0:2, 0:2] = 200  # frame 1: grid position (0, 0) moves
    frames[2] = frames[1]  # frame 2: nothing moves
    frames[2, 6:8, 6:8] = 5  # ... except 5 levels at (3, 3)
    tokens = np.arange(48).reshape(3, 16)
    held = hold_unchanged(tokens, frames, GRID, below=4)
    np.testing.assert_array_equal(held[0], tokens[0])
    assert held[1, 0] == tokens[1, 0] and (held[1, 1:] == tokens[0, 1:]).all()
    # frame 2 holds frame 1's *held* tokens, apart from the patch that moved by 5 > 4
    np.testing.assert_array_equal(held[2, :15], held[1, :15])
    assert held[2, 15] == tokens[2, 15]
    assert hold_unchanged(tokens, frames, GRID, below=5)[2, 15] == tokens[0, 15]
    bad = {
        "tokens": (tokens[:, :15], frames, GRID, 0),
        "frames": (tokens, frames[:2], GRID, 0),
        "does not divide": (tokens.reshape(3, 16), frames[:, :7], (4, 4), 0),
        "below": (tokens, frames, GRID, -1),
    }
    for message, args in bad.items():
        with pytest.raises(ValueError, match=message):
            hold_unchanged(*args)
