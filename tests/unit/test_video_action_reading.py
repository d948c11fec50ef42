"""The truth of the action-following terms through the video run, and the action-reading measures.

PushT episodes keep their simulator states through loading, resizing, frame skip and clipping;
a video item carries the true actions and states of its target frames (checked, round-tripped);
the clips' states line up with the clips after the held-out draw; the evaluations' measures of
predicted frames equal the reward service's own ``idm`` and ``state`` terms; the headline's
shuffle gaps and RLVR - control differences are the by-hand ones; the action terms' weights are
scaled as documented.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from rlvr_world.apps.video.balance import balanced_action_weights
from rlvr_world.apps.video.config import VideoIdm, VideoPipelineConfig, load_video_config
from rlvr_world.apps.video.episodes import agent_relative, skip_steps, spread
from rlvr_world.apps.video.reading import (
    action_reading,
    frame_scores,
    model_reading,
    true_frame_scores,
)
from rlvr_world.apps.video.rl import clip_truth, rl_items
from rlvr_world.apps.video.setup import clip_states, predicted_rows, run_clips
from rlvr_world.items import VideoPayload, load_items, save_items, video_item
from rlvr_world.video.data import Episode, clips, load_episodes, resize_episode

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """Three recorded PushT episodes of 12 steps (gym-pusht)."""
    from rlvr_world.video.pusht import record_pusht

    return record_pusht(3, 12, seed=5, out_dir=tmp_path_factory.mktemp("pusht"))


def counting_episode(steps: int, source: str = "count") -> Episode:
    """Frame t is filled with t, state t is (t, t, t, t, t): which row went where is readable."""
    frames = np.repeat(np.arange(steps + 1, dtype=np.uint8), 4 * 4 * 3).reshape(-1, 4, 4, 3)
    actions = np.arange(steps * 2, dtype=np.float32).reshape(steps, 2)
    states = np.repeat(np.arange(steps + 1, dtype=np.float64)[:, None], 5, axis=1)
    return Episode(frames, actions, source, states)


# --------------------------------------------------------------------------- episodes


def test_pusht_episodes_keep_their_states_through_the_runs_steps(recorded: list[Path]) -> None:
    episodes = load_episodes(recorded)
    with np.load(recorded[0]) as npz:
        truth = np.concatenate([npz["agent_pos"], npz["block_pose"]], axis=1)
        pos = np.asarray(npz["agent_pos"])
    ep = episodes[0]
    assert ep.states is not None and ep.states.shape == (13, 5)
    np.testing.assert_array_equal(ep.states, truth)
    small = resize_episode(ep, 32)
    assert small.frames.shape[1:3] == (32, 32)
    np.testing.assert_array_equal(small.states, truth)
    skipped, _ = skip_steps(small, pos, 4)
    np.testing.assert_array_equal(skipped.states, truth[[0, 4, 8, 12]])
    moved = agent_relative(skipped, pos[[0, 4, 8, 12]])
    np.testing.assert_array_equal(moved.states, truth[[0, 4, 8, 12]])
    clip = next(clips([moved], 2))
    np.testing.assert_array_equal(clip.states, truth[[0, 4]])


def test_episode_states_are_checked_by_name() -> None:
    ok = counting_episode(3)
    with pytest.raises(ValueError, match=r"states: expected shape \(4, 5\).*got \(3, 5\)"):
        Episode(ok.frames, ok.actions, "x", np.zeros((3, 5)))
    bad = np.zeros((4, 5))
    bad[1, 2] = np.nan
    with pytest.raises(ValueError, match="states: contains NaN or inf"):
        Episode(ok.frames, ok.actions, "x", bad)
    assert Episode(ok.frames, ok.actions, "bair").states is None


def test_a_pusht_file_whose_states_do_not_fit_is_refused(tmp_path: Path) -> None:
    frames = np.zeros((4, 8, 8, 3), np.uint8)
    path = tmp_path / "ep.npz"
    np.savez(path, frames=frames, actions=np.zeros((3, 2)), agent_pos=np.zeros((4, 2)),
             block_pose=np.zeros((3, 3)))  # fmt: skip
    with pytest.raises(ValueError, match=r"agent_pos \(4, 2\) and block_pose \(3, 3\)"):
        load_episodes(path)
    np.savez(path, frames=frames, actions=np.zeros((3, 2)))
    assert load_episodes(path)[0].states is None  # a file without them has none


# --------------------------------------------------------------------------- items


def frame(value: int, size: int = 8) -> np.ndarray:
    return np.random.default_rng(value).integers(0, 256, size=(size, size, 3), dtype=np.uint8)


def test_video_items_carry_true_actions_and_states_and_round_trip(tmp_path: Path) -> None:
    acts, states = np.array([[12.5, -3.25]]), np.array([[1.0, 2.0, 3.0, 4.0, 0.5]])
    item = video_item("c", [1, 2], frame(1), frame(2), actions=acts, states=states)
    assert item.video is not None
    assert item.video.actions is not None and item.video.actions.dtype == np.float64
    save_items([item], tmp_path / "items.jsonl")
    (back,) = load_items(tmp_path / "items.jsonl")
    assert back == item
    assert back.video is not None and back.video.states is not None
    np.testing.assert_array_equal(back.video.states, states)
    other = video_item("c", [1, 2], frame(1), frame(2), actions=acts, states=states + 1)
    assert other != item
    plain = video_item("c", [1, 2], frame(1), frame(2))
    assert plain.video is not None and plain.video.actions is None and plain.video.states is None
    # multi-step: one row per target frame
    multi = VideoPayload(
        np.stack([frame(1), frame(3)]),
        frame(2),
        inserts=((7,), (8,)),
        segment_tokens=2,
        actions=np.zeros((2, 2)),
        states=np.zeros((2, 5)),
    )
    assert VideoPayload.from_json(multi.to_json()) == multi


@pytest.mark.parametrize(
    ("actions", "states", "message"),
    [
        (np.zeros((2, 2)), None, r"actions: expected shape \(1, A >= 1\).*got \(2, 2\)"),
        (np.zeros((1, 0)), None, r"actions: expected shape \(1, A >= 1\)"),
        (None, np.zeros((1, 4)), r"states: expected shape \(1, 5\).*got \(1, 4\)"),
        (np.array([[np.nan, 0.0]]), None, "actions: contains NaN"),
        (None, [["a", "b", "c", "d", "e"]], "states: expected rows of numbers"),
    ],
)
def test_video_items_refuse_truth_that_does_not_fit(
    actions: Any, states: Any, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        video_item("c", [1], frame(1), frame(2), actions=actions, states=states)


def test_rl_items_carry_each_clips_truth() -> None:
    from rlvr_world.video.layout import SingleStepVocab, single_step

    vocab = SingleStepVocab(visual_codes=4, action_bins=8)
    ep = counting_episode(5)
    pairs = [(c.frames, c.actions) for c in clips([ep], 3)]
    seqs = [single_step(np.zeros((3, 4), int), np.zeros((2, 2), int), vocab) for _ in pairs]
    states = [c.states[-1:] for c in clips([ep], 3) if c.states is not None]
    truth = clip_truth(pairs, slice(1, 2), states)
    items = rl_items(pairs, seqs, 4, multi_step=False, truth=truth)
    for i, item in enumerate(items):
        assert item.video is not None and item.video.actions is not None
        np.testing.assert_array_equal(item.video.actions, [ep.actions[i + 1]])  # leads to i + 2
        np.testing.assert_array_equal(item.video.states, [[i + 2.0] * 5])
    with pytest.raises(ValueError, match="states: 1 for 4 clips"):
        clip_truth(pairs, slice(1, 2), states[:1])


# --------------------------------------------------------------------------- clips and states


@pytest.mark.parametrize(
    "model",
    [
        {"context_length": 2},
        {"layout": "multi_step", "segment_frames": 3},
        {"layout": "multi_step", "segment_frames": 3, "context_range": 4},
    ],
)
def test_clip_states_are_the_states_of_the_predicted_frames(model: dict[str, Any]) -> None:
    cfg = VideoPipelineConfig.model_validate({"model": model})
    episodes = [counting_episode(9, "a"), counting_episode(7, "b")]
    pairs = run_clips(cfg, episodes, seed=3)
    states = clip_states(cfg, episodes)
    assert states is not None and len(states) == len(pairs)
    frame_rows, action_rows = predicted_rows(cfg)
    drawn = spread(list(zip(pairs, states, strict=True)), 5, seed=1)
    assert [p for p, _ in drawn] == spread(pairs, 5, seed=1)
    for (frames, acts), st in drawn:
        shown = frames[frame_rows, 0, 0, 0].astype(float)  # frame t shows t
        np.testing.assert_array_equal(st[:, 0], shown)
        # the action of each predicted frame leads from the frame before it
        np.testing.assert_array_equal(acts[action_rows, 0], 2 * (shown - 1))
    assert clip_states(cfg, [Episode(episodes[0].frames, episodes[0].actions, "bair")]) is None


# --------------------------------------------------------------------------- measures


@pytest.fixture(scope="module")
def pusht_clips(recorded: list[Path]) -> tuple[list[Any], list[np.ndarray]]:
    """Single-step clips (context 1) of the recordings at 64x64 and the states of both frames."""
    episodes = [resize_episode(e, 64) for e in load_episodes(recorded)]
    cut = list(clips(episodes, 2))
    return [(c.frames, c.actions) for c in cut], [c.states for c in cut if c.states is not None]


def test_frame_scores_equal_the_reward_services_idm_and_state_terms(
    pusht_clips: tuple[list[Any], list[np.ndarray]],
) -> None:
    import torch

    from rlvr_world.rewards.video import VideoRewardConfig, score_video
    from rlvr_world.video.idm import IdmConfig, InverseDynamicsModel

    pairs, both = pusht_clips
    states = [s[1:] for s in both]
    torch.manual_seed(0)
    idm = InverseDynamicsModel(
        IdmConfig(
            image_size=(64, 64),
            action_dims=2,
            action_ranges=((0.0, 512.0), (0.0, 512.0)),
            action_form="absolute",
            frame_skip=1,
        )
    ).eval()
    measure = frame_scores(pairs, (slice(1, 2), slice(0, 1)), states, idm)
    assert measure is not None
    # predictions: every third clip's true next frame, the others copy the context frame
    pred = np.stack([f[1] if i % 3 == 0 else f[0] for i, (f, _) in enumerate(pairs)]) / 255.0
    got = measure(pred)
    config = VideoRewardConfig(weights={"l1": 1.0, "idm": 0.0, "state": 0.0})
    for i, ((frames, acts), st) in enumerate(zip(pairs, states, strict=True)):
        one = score_video(
            pred[i : i + 1], frames[1:], config, previous_frame=frames[0], actions=acts,
            states=st, idm=idm,
        )  # fmt: skip
        assert one.status.value == "ok", one.message
        # float32 convolutions batched differently: equal to 1e-4
        assert got["idm_error"][i] == pytest.approx(one.metrics["idm_error"], rel=1e-4)
        assert got["idm_mae"][i] == pytest.approx(one.metrics["idm_mae"], rel=1e-4)
        assert got["state_error"][i] == pytest.approx(one.metrics["state_error"], rel=1e-9)
        assert got["agent_error_px"][i] == pytest.approx(one.metrics["agent_error_px"])
    floor = true_frame_scores(pairs, (slice(1, 2), slice(0, 1)), measure)
    assert floor["agent_error_px"] < 6.0 and floor["agent_missing"] == 0.0
    copies = np.array([i % 3 != 0 for i in range(len(pairs))])
    moved = np.array([np.hypot(*(s[1, :2] - s[0, :2])) for s in both])  # the agent's move
    far = copies & (moved > 24.0)
    assert far.any() and (got["agent_error_px"][far] > 8.0).all()  # a copy misplaces the agent
    assert frame_scores(pairs, (slice(1, 2), slice(0, 1)), None, None) is None


def test_a_wrong_number_of_frames_is_named(pusht_clips: tuple[list[Any], list[np.ndarray]]) -> None:
    pairs, both = pusht_clips
    measure = frame_scores(pairs, (slice(1, 2), slice(0, 1)), [s[1:] for s in both], None)
    assert measure is not None
    with pytest.raises(ValueError, match=r"frames: 2 for 36 clips of 1 predicted frames"):
        measure(np.zeros((2, 64, 64, 3)))


# --------------------------------------------------------------------------- the headline


def report(reward: list[float], agent: list[float]) -> dict[str, Any]:
    return {"per_clip": {"reward": reward, "agent_error_px": agent}}


def test_action_reading_gaps_and_differences_by_hand() -> None:
    start = ([report([-0.5, -0.3, -0.4], [40.0, 30.0, 50.0])], None)
    control = (
        [report([-0.4, -0.3, -0.2], [20.0, 20.0, 20.0]), report([-0.2, -0.3, -0.4], [30.0] * 3)],
        [report([-0.5, -0.4, -0.3], [40.0] * 3), report([-0.3, -0.3, -0.5], [40.0] * 3)],
    )
    rlvr = (
        [report([-0.2, -0.1, -0.3], [10.0] * 3), report([-0.2, -0.1, -0.1], [10.0] * 3)],
        [report([-0.4, -0.4, -0.4], [50.0] * 3), report([-0.4, -0.2, -0.4], [60.0] * 3)],
    )
    found = action_reading(
        {"start": start, "control": control, "rlvr": rlvr},
        seeds=[0, 1],
        baselines={"copy_last_frame": {"reward": -0.45}},
        resamples=2000,
    )
    assert found["n"] == 3 and found["seeds"] == [0, 1]
    models = found["models"]
    assert models["start"]["reward"]["mean"] == pytest.approx(-0.4)
    assert "reward_shuffle_gap" not in models["start"]  # no shuffled evaluation
    # control: true per clip (-0.3, -0.3, -0.3), shuffled (-0.4, -0.35, -0.4): gap 0.0833
    gap = models["control"]["reward_shuffle_gap"]
    assert gap["mean"] == pytest.approx((0.1 + 0.05 + 0.1) / 3)
    assert gap["ci95"][0] <= gap["mean"] <= gap["ci95"][1]
    # agent: shuffled minus true: control 40 - 25 = 15, RLVR 55 - 10 = 45
    assert models["control"]["agent_error_px_shuffle_gap"]["mean"] == pytest.approx(15.0)
    assert models["rlvr"]["agent_error_px_shuffle_gap"]["mean"] == pytest.approx(45.0)
    diff = found["rlvr_minus_control"]
    assert diff["agent_error_px"]["mean"] == pytest.approx(10.0 - 25.0)
    assert diff["agent_error_px"]["higher_is_better"] is False
    assert diff["agent_error_px_shuffle_gap"]["mean"] == pytest.approx(30.0)
    assert diff["agent_error_px_shuffle_gap"]["ci95_excludes_zero"] is True
    # RLVR's reward gap per clip: (-0.2 + 0.4, -0.1 + 0.3, -0.2 + 0.4) = 0.2; control's above
    assert diff["reward_shuffle_gap"]["mean"] == pytest.approx(0.2 - gap["mean"])
    assert found["baselines"] == {"copy_last_frame": {"reward": -0.45}}


def test_model_reading_refuses_a_seed_count_that_differs() -> None:
    with pytest.raises(ValueError, match="1 shuffled-action reports for 2 seeds"):
        model_reading([report([0.0], [0.0])] * 2, [report([0.0], [0.0])])
    with pytest.raises(ValueError, match="models: no evaluation"):
        action_reading({}, seeds=[0], baselines={})


# --------------------------------------------------------------------------- weights


def test_action_terms_are_scaled_to_the_pixel_terms_spread_by_hand() -> None:
    weights = {"l1": 1.0, "stlpips": 2.0, "state": 1.0, "idm": 0.0}
    spread_ = {"l1": 0.002, "stlpips": 0.004, "state": 0.02}
    out = balanced_action_weights(weights, spread_)
    pixel = (1.0 * 0.002 + 2.0 * 0.004) / 2  # 0.005
    assert out == {"l1": 1.0, "stlpips": 2.0, "state": pytest.approx(pixel / 0.02), "idm": 0.0}
    assert out["state"] * spread_["state"] == pytest.approx(pixel)
    # a term that never varied keeps its weight; a missing measurement is named
    assert balanced_action_weights(weights, {**spread_, "state": 0.0})["state"] == 1.0
    with pytest.raises(ValueError, match="no measurement for state"):
        balanced_action_weights(weights, {"l1": 0.1, "stlpips": 0.1})
    with pytest.raises(ValueError, match="no positive pixel term"):
        balanced_action_weights({"state": 1.0}, {"state": 0.1})


# --------------------------------------------------------------------------- the run's IDM


def test_an_idm_that_does_not_read_the_runs_steps_is_refused_by_name(tmp_path: Path) -> None:
    from rlvr_world.apps.video.idm_phase import check_idm_fits, prepare_idm
    from rlvr_world.video.idm import IdmConfig

    cfg = load_video_config(REPO / "configs" / "video" / "pusht_skip.yaml")
    fits = IdmConfig(
        image_size=(64, 64),
        action_dims=2,
        action_ranges=((-128.0, 128.0), (-128.0, 128.0)),
        action_form="agent_relative",
        frame_skip=4,
    )
    check_idm_fits(fits, cfg, tmp_path)  # the IDM train-idm writes for pusht_skip
    wrong = fits.model_copy(update={"image_size": (32, 32), "frame_skip": 1})
    with pytest.raises(
        ValueError, match=r"frames of \(32, 32\), the run's are \(64, 64\); frame_skip 1"
    ):
        check_idm_fits(wrong, cfg, tmp_path)
    absolute = fits.model_copy(update={"action_form": "absolute"})
    with pytest.raises(ValueError, match="absolute actions, the run's are agent_relative"):
        check_idm_fits(absolute, cfg, tmp_path)
    missing = cfg.model_copy(
        update={"idm": cfg.idm.model_copy(update={"path": tmp_path / "x", "train": False})}
    )
    with pytest.raises(ValueError, match=r"does not exist \(train one: rlvr-world video"):
        prepare_idm(missing, tmp_path)
    assert prepare_idm(cfg.model_copy(update={"idm": VideoIdm()}), tmp_path) == (None, {})
