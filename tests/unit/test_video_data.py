"""Episode loaders on the real samples, resizing, clips, splits, and the errors for bad files."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from rlvr_world.video.data import (
    Episode,
    all_actions,
    clips,
    load_bair,
    load_episodes,
    load_metaworld,
    load_npz,
    load_pusht,
    load_rt1,
    resize_frames,
    split_episodes,
    stack_clips,
)


def _video(shared: Path) -> Path:
    return shared / "data" / "video"


def _episode(t: int = 6, d: int = 2, size: int = 8, seed: int = 0) -> Episode:
    rng = np.random.default_rng(seed)
    frames = rng.integers(0, 256, size=(t + 1, size, size, 3), dtype=np.uint8)
    return Episode(frames, rng.normal(size=(t, d)).astype(np.float32), f"synthetic:{seed}")


def test_load_pusht_sample(shared: Path) -> None:
    path = _video(shared) / "pusht" / "ep0000.npz"
    ep = load_pusht(path)
    raw = np.load(path)
    assert ep.frames.shape == (101, 96, 96, 3)
    assert ep.actions.shape == (100, 2)
    assert ep.actions.dtype == np.float32
    np.testing.assert_array_equal(ep.frames, raw["frames"])
    assert ep.actions.min() >= 0.0
    assert ep.actions.max() <= 512.0


def test_load_bair_drops_last_action(shared: Path) -> None:
    path = _video(shared) / "bair_sample.npz"
    ep = load_bair(path)
    raw = np.load(path)
    assert ep.frames.shape == (30, 64, 64, 3)
    assert ep.frames.dtype == np.uint8
    np.testing.assert_array_equal(ep.frames, raw["image"])
    np.testing.assert_array_equal(ep.actions, raw["action"][:-1].astype(np.float32))


def test_load_metaworld_alignment(shared: Path) -> None:
    path = sorted((_video(shared) / "metaworld" / "hammer").glob("*.npz"))[0]
    ep = load_metaworld(path)
    raw = np.load(path)
    assert ep.frames.shape == (101, 64, 64, 3)
    assert ep.actions.shape == (100, 4)
    # frame t is the last three channels of observation t
    np.testing.assert_array_equal(ep.frames[7], raw["observation"][7, 6:9].transpose(1, 2, 0))
    # action[0] is the dummy; the action moving frame t to t+1 is action[t+1]
    assert not raw["action"][0].any()
    np.testing.assert_array_equal(ep.actions, raw["action"][1:])
    assert ep.source.startswith("metaworld:hammer/")


def test_load_rt1_has_no_actions(shared: Path) -> None:
    ep = load_rt1(_video(shared) / "rt1_fractal_sample.npz")
    assert ep.frames.shape == (22, 256, 320, 3)
    assert ep.actions.shape == (21, 0)
    assert ep.action_dims == 0


def test_load_episodes_folder_dispatches(shared: Path) -> None:
    eps = load_episodes(_video(shared) / "pusht")
    assert len(eps) == 20
    assert all(e.source.startswith("pusht:") for e in eps)
    assert load_npz(_video(shared) / "bair_sample.npz").source.startswith("bair:")
    mw = load_episodes(sorted((_video(shared) / "metaworld").rglob("*.npz"))[:2])
    assert [e.action_dims for e in mw] == [4, 4]


def test_resize_frames_shapes_and_smoothness() -> None:
    frames = np.zeros((2, 96, 96, 3), dtype=np.uint8)
    frames[:, :, ::2] = 255  # one-pixel stripes: antialiasing must blend them
    small = resize_frames(frames, 64)
    assert small.shape == (2, 64, 64, 3)
    assert small.dtype == np.uint8
    assert 100 < small.mean() < 155
    assert resize_frames(frames, (48, 32)).shape == (2, 48, 32, 3)
    assert resize_frames(frames, 96) is frames


def test_resize_constant_frame_stays_constant() -> None:
    frames = np.full((1, 30, 40, 3), 77, dtype=np.uint8)
    np.testing.assert_array_equal(resize_frames(frames, 16), 77)


@pytest.mark.parametrize(
    ("frames", "size"),
    [
        (np.zeros((2, 8, 8, 3), dtype=np.float32), 4),
        (np.zeros((2, 8, 8), dtype=np.uint8), 4),
        (np.zeros((2, 8, 8, 4), dtype=np.uint8), 4),
        (np.zeros((2, 8, 8, 3), dtype=np.uint8), 0),
    ],
)
def test_resize_rejects(frames: np.ndarray, size: int) -> None:
    with pytest.raises(ValueError, match=r"frames|size"):
        resize_frames(frames, size)


def test_clips_windows_and_alignment() -> None:
    ep = _episode(t=6)
    got = list(clips([ep, _episode(t=3, seed=1)], length=3, stride=2))
    # episode 0: 7 frames -> starts 0, 2, 4; episode 1: 4 frames -> start 0
    assert [(c.episode, c.start) for c in got] == [(0, 0), (0, 2), (0, 4), (1, 0)]
    np.testing.assert_array_equal(got[1].frames, ep.frames[2:5])
    np.testing.assert_array_equal(got[1].actions, ep.actions[2:4])
    frames, actions = stack_clips(got)
    assert frames.shape == (4, 3, 8, 8, 3)
    assert actions.shape == (4, 2, 2)


def test_clips_reject_bad_arguments() -> None:
    with pytest.raises(ValueError, match="length"):
        list(clips([_episode()], length=1))
    with pytest.raises(ValueError, match="stride"):
        list(clips([_episode()], length=2, stride=0))
    with pytest.raises(ValueError, match="clips"):
        stack_clips(clips([_episode(t=2)], length=5))


def test_split_is_by_episode_and_seeded() -> None:
    eps = [_episode(seed=i) for i in range(10)]
    train, held = split_episodes(eps, 0.2, seed=3)
    assert len(train) == 8
    assert len(held) == 2
    assert {e.source for e in train}.isdisjoint({e.source for e in held})
    again = split_episodes(eps, 0.2, seed=3)
    assert [e.source for e in again[1]] == [e.source for e in held]
    assert len(split_episodes(eps, 3)[1]) == 3
    with pytest.raises(ValueError, match="held_out"):
        split_episodes(eps, 10)
    with pytest.raises(ValueError, match="held_out"):
        split_episodes(eps, 1.5)
    with pytest.raises(ValueError, match="episodes"):
        split_episodes(eps[:1], 0.5)


def test_all_actions_concatenates() -> None:
    eps = [_episode(t=3), _episode(t=4, seed=1)]
    assert all_actions(eps).shape == (7, 2)
    with pytest.raises(ValueError, match="episodes"):
        all_actions([_episode(d=2), _episode(d=3)])


def test_episode_validation() -> None:
    good = _episode()
    with pytest.raises(ValueError, match="frames"):
        Episode(good.frames.astype(np.float32), good.actions, "x")
    with pytest.raises(ValueError, match="frames"):
        Episode(good.frames[..., :2], good.actions, "x")
    with pytest.raises(ValueError, match="actions"):
        Episode(good.frames, good.actions[:-1], "x")
    with pytest.raises(ValueError, match="actions"):
        Episode(good.frames, good.actions.astype(np.float64), "x")
    bad = good.actions.copy()
    bad[2, 1] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        Episode(good.frames, bad, "x")


def _save(path: Path, **arrays: np.ndarray) -> Path:
    np.savez(path, **arrays)  # type: ignore[arg-type]
    return path


def test_loaders_reject_bad_files(tmp_path: Path) -> None:
    frames = np.zeros((4, 8, 8, 3), dtype=np.uint8)
    nan_actions = np.zeros((3, 2), dtype=np.float32)
    nan_actions[1, 0] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        load_pusht(_save(tmp_path / "a.npz", frames=frames, actions=nan_actions))
    with pytest.raises(ValueError, match="missing"):
        load_pusht(_save(tmp_path / "b.npz", frames=frames))
    with pytest.raises(ValueError, match="frames"):
        load_pusht(_save(tmp_path / "c.npz", frames=frames.astype(np.float32), actions=nan_actions))
    with pytest.raises(ValueError, match="actions"):
        load_pusht(_save(tmp_path / "d.npz", frames=frames, actions=np.zeros((5, 2))))
    with pytest.raises(ValueError, match="image"):
        load_bair(
            _save(tmp_path / "e.npz", image=np.full((4, 8, 8, 3), 300), action=np.zeros((4, 4)))
        )
    with pytest.raises(ValueError, match="action"):
        load_bair(_save(tmp_path / "f.npz", image=frames, action=np.zeros((3, 4))))
    with pytest.raises(ValueError, match="observation"):
        load_metaworld(_save(tmp_path / "g.npz", observation=frames, action=np.zeros((4, 4))))
    with pytest.raises(ValueError, match="unknown episode format"):
        load_npz(_save(tmp_path / "h.npz", something=frames))
    with pytest.raises(ValueError, match="does not exist"):
        load_episodes(tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match=r"no \.npz"):
        load_episodes(tmp_path / "empty")
