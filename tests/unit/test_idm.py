"""The inverse-dynamics model (rlvr_world.video.idm): shapes and action units, batching, the
folder round trip, every bad frame, folder and action, the reward of a predicted clip, and a
fit that learns a mapping it can see."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
import torch

from rlvr_world.rewards.action import score_actions
from rlvr_world.rewards.types import InvalidInput, Status
from rlvr_world.video.idm import (
    IdmConfig,
    InverseDynamicsModel,
    fit_idm,
    load_idm,
    score_with_idm,
)

SMALL = {"channels": (8, 16, 16), "hidden": 32}


def pusht_config(**overrides: object) -> IdmConfig:
    """configs/video/pusht_skip.yaml's action space at a small size."""
    values: dict[str, object] = {
        "image_size": (32, 32),
        "action_dims": 2,
        "action_ranges": ((-128.0, 128.0), (-128.0, 128.0)),
        "action_form": "agent_relative",
        "frame_skip": 4,
        **SMALL,
        **overrides,
    }
    return IdmConfig.model_validate(values)


@pytest.fixture(scope="module")
def idm() -> InverseDynamicsModel:
    torch.manual_seed(0)
    return InverseDynamicsModel(pusht_config()).eval()


def frames(n: int, side: int = 32, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (n, side, side, 3), dtype=np.uint8)


def test_predict_gives_actions_in_the_space_whatever_the_batch(idm: InverseDynamicsModel) -> None:
    prev, nxt = frames(7), frames(7, seed=1)
    whole = idm.predict(prev, nxt)
    assert whole.shape == (7, 2) and whole.dtype == np.float64
    assert (np.abs(whole) <= 128.0).all()
    np.testing.assert_allclose(idm.predict(prev, nxt, batch_size=2), whole, atol=1e-4)
    as_float = idm.predict(prev.astype(np.float32) / 255, nxt.astype(np.float64) / 255)
    np.testing.assert_allclose(as_float, whole, atol=1e-4)
    one = idm.predict(prev[3], nxt[3])
    np.testing.assert_allclose(one, whole[3:4], atol=1e-4)
    assert not idm.training  # predict leaves the mode as it found it


def test_scaling_round_trips_and_clips(idm: InverseDynamicsModel) -> None:
    acts = torch.tensor([[-128.0, 0.0], [64.0, 300.0]])
    scaled = idm.scale(acts)
    np.testing.assert_allclose(scaled.numpy(), [[-1.0, 0.0], [0.5, 1.0]])
    np.testing.assert_allclose(idm.unscale(scaled).numpy(), [[-128.0, 0.0], [64.0, 128.0]])


def test_save_and_load_give_the_same_model(idm: InverseDynamicsModel, tmp_path: Path) -> None:
    idm.save(tmp_path / "idm")
    meta = json.loads((tmp_path / "idm" / "config.json").read_text())
    assert meta["kind"] == "inverse_dynamics" and meta["format_version"] == 1
    cfg = meta["config"]
    assert cfg["image_size"] == [32, 32] and cfg["frame_skip"] == 4 and cfg["action_dims"] == 2
    assert cfg["action_form"] == "agent_relative" and cfg["source"] == "pusht"
    assert cfg["action_ranges"] == [[-128.0, 128.0], [-128.0, 128.0]]
    loaded = load_idm(tmp_path / "idm", device="cpu")
    assert loaded.config == idm.config
    prev, nxt = frames(3), frames(3, seed=2)
    np.testing.assert_allclose(loaded.predict(prev, nxt), idm.predict(prev, nxt), atol=1e-6)
    assert loaded.config.reward_config().ranges == ((-128.0, 128.0), (-128.0, 128.0))


BAD_FRAMES = [
    (frames(2, side=64), frames(2, side=64), r"frames of 64x64, this IDM reads 32x32"),
    (frames(2), frames(3), r"2 previous frames but 3 next frames"),
    (frames(2)[..., :1], frames(2)[..., :1], r"expected RGB frames"),
    (frames(2).astype(np.int16), frames(2), r"unsupported dtype int16"),
    (np.full((1, 32, 32, 3), np.nan), frames(1), r"NaN"),
    ([[0]], frames(1), r"expected a numpy array of frames, got list"),
    (np.zeros((0, 32, 32, 3), np.uint8), frames(1), r"expected RGB frames"),
]


@pytest.mark.parametrize(("prev", "nxt", "message"), BAD_FRAMES)
def test_frames_it_cannot_take_raise_invalid_input(
    idm: InverseDynamicsModel, prev: object, nxt: object, message: str
) -> None:
    with pytest.raises(InvalidInput, match=message):
        idm.predict(prev, nxt)


def test_predict_refuses_a_zero_batch(idm: InverseDynamicsModel) -> None:
    with pytest.raises(InvalidInput, match="batch_size"):
        idm.predict(frames(1), frames(1), batch_size=0)


def _write(folder: Path, meta: object) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(meta if isinstance(meta, str) else json.dumps(meta))
    return folder


def test_folders_that_are_not_idms_raise_invalid_input(
    idm: InverseDynamicsModel, tmp_path: Path
) -> None:
    good = json.loads(idm.save(tmp_path / "good").joinpath("config.json").read_text())
    file = tmp_path / "file"
    file.write_text("x")
    cases = [
        (tmp_path / "nowhere", r"does not exist \(train one: rlvr-world video train-idm\)"),
        (file, "is not a folder"),
        (_write(tmp_path / "empty", "{}"), "holds kind None"),
        (_write(tmp_path / "tok", {"kind": "frame_tokenizer"}), "holds kind 'frame_tokenizer'"),
        (_write(tmp_path / "broken", "{not json"), "is not valid JSON"),
        (_write(tmp_path / "future", {**good, "format_version": 9}), "format_version 9"),
        (
            _write(tmp_path / "badcfg", {**good, "config": {**good["config"], "frame_skip": 0}}),
            r"does not validate: frame_skip",
        ),
        (_write(tmp_path / "noweights", good), "has no model.safetensors"),
    ]
    (tmp_path / "bare").mkdir()
    cases.append((tmp_path / "bare", r"is not an IDM folder: it has no config.json"))
    for folder, message in cases:
        with pytest.raises(InvalidInput, match=message):
            load_idm(folder)


def test_weights_that_do_not_fit_the_config_raise(
    idm: InverseDynamicsModel, tmp_path: Path
) -> None:
    idm.save(tmp_path / "idm")
    other = InverseDynamicsModel(pusht_config(channels=(8, 16, 32)))
    other.save(tmp_path / "other")
    (tmp_path / "idm" / "model.safetensors").write_bytes(
        (tmp_path / "other" / "model.safetensors").read_bytes()
    )
    with pytest.raises(InvalidInput, match="does not fit the config"):
        load_idm(tmp_path / "idm")
    (tmp_path / "idm" / "model.safetensors").write_bytes(b"garbage")
    with pytest.raises(InvalidInput, match="is not a safetensors file"):
        load_idm(tmp_path / "idm")


BAD_CONFIGS = [
    ({"image_size": (4, 32)}, r"sides must lie in \[8, 1024\]"),
    ({"action_ranges": ()}, "at least 1 item"),
    ({"action_dims": 3}, r"2 \(low, high\) pairs for action_dims 3"),
    ({"action_ranges": ((1.0, 0.0),)}, "expected finite low < high"),
    ({"frame_skip": 0}, "greater than or equal to 1"),
    ({"action_form": "relative"}, "absolute"),
    ({"channels": (0, 8)}, r"each must lie in \[1, 1024\]"),
    ({"tolerance": 0.0}, "greater than 0"),
    ({"extra": 1}, "Extra inputs are not permitted"),
]


@pytest.mark.parametrize(("override", "message"), BAD_CONFIGS)
def test_bad_configs_are_refused(override: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        pusht_config(**override)


def test_score_with_idm_reads_each_step_of_a_clip(idm: InverseDynamicsModel) -> None:
    first, clip = frames(1)[0], frames(3, seed=5)
    actions = np.array([[10.0, 0.0], [0.0, -10.0], [50.0, 50.0]])
    result = score_with_idm(idm, first, clip, actions)
    read = idm.predict(np.stack([first, clip[0], clip[1]]), clip)
    expected = score_actions(read, actions, idm.config.reward_config())
    assert result.ok
    assert result.reward == pytest.approx(expected.reward)
    assert result.metrics == pytest.approx(dict(expected.metrics))
    # a float clip after a uint8 previous frame is the same clip
    mixed = score_with_idm(idm, first, clip.astype(np.float32) / 255, actions)
    assert mixed.reward == pytest.approx(result.reward, abs=1e-6)


@pytest.mark.parametrize(
    ("first", "clip", "actions", "message"),
    [
        (frames(1)[0], frames(2), np.zeros((2, 3)), r"^actions: expected actions of dimension 2"),
        (frames(1)[0], frames(2), np.zeros((3, 2)), "2 steps read from the frames but 3"),
        (frames(1)[0], frames(2, side=16), np.zeros((2, 2)), "prediction: frames of 16x16"),
        (frames(2), frames(2), np.zeros((2, 2)), r"previous_frame: expected one frame"),
        (None, frames(2), np.zeros((2, 2)), r"previous_frame: expected one frame"),
    ],
)
def test_score_with_idm_bad_input_is_invalid_input(
    idm: InverseDynamicsModel, first: object, clip: object, actions: object, message: str
) -> None:
    result = score_with_idm(idm, first, clip, actions)
    assert result.status is Status.INVALID_INPUT
    assert re.search(message, result.message), result.message


def _square_pairs(n: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Next frames with a white 4x4 square; the action is its top-left corner (absolute)."""
    rng = np.random.default_rng(seed)
    prev = np.zeros((n, 16, 16, 3), dtype=np.uint8)
    nxt = np.zeros_like(prev)
    corner = rng.integers(0, 13, (n, 2))
    for i, (x, y) in enumerate(corner):
        nxt[i, y : y + 4, x : x + 4] = 255
    return prev, nxt, corner.astype(np.float32)


def test_fit_learns_a_mapping_it_can_see() -> None:
    cfg = IdmConfig(
        image_size=(16, 16),
        action_dims=2,
        action_ranges=((0.0, 12.0), (0.0, 12.0)),
        action_form="absolute",
        frame_skip=1,
        **SMALL,
    )
    torch.manual_seed(0)
    model = InverseDynamicsModel(cfg)
    prev, nxt, corner = _square_pairs(256, seed=0)
    stats = fit_idm(model, prev, nxt, corner, steps=250, batch_size=32, lr=3e-3, seed=0)
    assert stats.steps == 250 and not stats.stopped_early
    assert not model.training
    tp, tn, tc = _square_pairs(64, seed=1)
    mae = np.abs(model.predict(tp, tn) - tc).mean()
    baseline = np.abs(tc - corner.mean(axis=0)).mean()  # the best constant: ~3 pixels
    assert mae < baseline / 3, (mae, baseline)


def test_fit_refuses_data_that_does_not_fit(idm: InverseDynamicsModel) -> None:
    prev, nxt = frames(4), frames(4, seed=1)
    with pytest.raises(InvalidInput, match="must be uint8"):
        fit_idm(idm, prev.astype(np.float32), nxt, np.zeros((4, 2)), steps=1)
    with pytest.raises(InvalidInput, match=r"expected 4 finite rows of 2"):
        fit_idm(idm, prev, nxt, np.zeros((4, 3)), steps=1)
    with pytest.raises(InvalidInput, match="must be positive"):
        fit_idm(idm, prev, nxt, np.zeros((4, 2)), steps=0)
    with pytest.raises(InvalidInput, match="frames of 64x64"):
        fit_idm(idm, frames(4, side=64), frames(4, side=64), np.zeros((4, 2)), steps=1)


def test_a_time_limit_stops_the_fit() -> None:
    model = InverseDynamicsModel(pusht_config())
    prev, nxt = frames(8), frames(8, seed=1)
    stats = fit_idm(model, prev, nxt, np.zeros((8, 2)), steps=10_000, time_limit_s=1e-9)
    assert stats.stopped_early and stats.steps < 10_000


@pytest.mark.gpu
def test_predict_on_cuda_matches_the_cpu(idm: InverseDynamicsModel, tmp_path: Path) -> None:
    idm.save(tmp_path / "idm")
    on_gpu = load_idm(tmp_path / "idm", device="cuda")
    assert on_gpu.device.type == "cuda"
    prev, nxt = frames(300), frames(300, seed=3)
    np.testing.assert_allclose(on_gpu.predict(prev, nxt), idm.predict(prev, nxt), atol=1e-2)
