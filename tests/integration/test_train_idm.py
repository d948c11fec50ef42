"""``rlvr-world video train-idm``: the real command trains an IDM on fresh PushT recordings that
beats the mean action on held-out true frames; a finished run's recordings are read with the
run's own split; every bad input gets exit code 2 and a message saying what is wrong."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("gym_pusht", reason="gym-pusht is in the video extra")

from rlvr_world.apps.cli import main
from rlvr_world.video.idm import load_idm

pytestmark = pytest.mark.integration
ENV = {**os.environ, "OMP_NUM_THREADS": "1"}
CLI = [sys.executable, "-m", "rlvr_world.apps.cli", "--log-level", "WARNING"]


def make_run(folder: Path, episodes: int = 6, **data: object) -> Path:
    """A finished video run's folder as ``rlvr-world run`` leaves it: recordings in
    ``data/pusht`` and the resolved config in ``config.json``."""
    from rlvr_world.video.pusht import record_pusht

    section = {
        "episodes": episodes,
        "steps": 12,
        "held_out": 2,
        "validation": 1,
        "image_size": 16,
        "actions": "agent_relative",
        "relative_range": 128.0,
        "frame_skip": 4,
        **data,
    }
    record_pusht(episodes, 12, 0, folder / "data" / "pusht")
    (folder / "config.json").write_text(json.dumps({"task": "video", "data": section}))
    return folder


@pytest.mark.slow
def test_train_idm_beats_the_mean_action_on_held_out_true_frames(tmp_path: Path) -> None:
    out = tmp_path / "idm"
    args = ["video", "train-idm", "--out", str(out), "--episodes", "48", "--steps", "40"]
    args += ["--held-out", "4", "--image-size", "32", "--train-steps", "1000"]
    args += ["--batch-size", "32", "--lr", "1e-3", "--device", "cpu"]
    done = subprocess.run(CLI + args, env=ENV, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    assert "idm" in done.stdout and "mean_action" in done.stdout
    report = json.loads((out / "report.json").read_text())
    d = report["data"]
    assert d["kind"] == "recorded" and d["image_size"] == [32, 32] and d["frame_skip"] == 4
    assert d["train_episodes"] == 44 and d["held_out_episodes"] == 4
    assert d["held_out_pairs"] == 4 * 10  # 40 steps / frame_skip 4, the run's own spans
    assert d["train_pairs"] == 44 * 37  # every start offset: 40 - 4 + 1 spans
    assert report["training"]["steps"] == 1000 and not report["training"]["stopped_early"]
    assert report["tolerance"]["action_units"] == [16.0, 16.0]
    held = report["held_out"]
    for axis in (0, 1):
        assert held["idm"]["mae"][axis] < 0.8 * held["mean_action"]["mae"][axis], held
        assert held["idm"]["r2"][axis] > 0.2, held
    assert held["idm"]["within_tolerance"] > held["mean_action"]["within_tolerance"]
    # the copied frame reads as (almost) no move: no better than the mean
    assert held["copy"]["mae"][0] > held["idm"]["mae"][0]
    idm = load_idm(out)
    assert idm.config.action_form == "agent_relative" and idm.config.frame_skip == 4


def test_a_runs_recordings_are_read_with_its_split(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = make_run(tmp_path / "run")
    out = tmp_path / "idm"
    args = ["video", "train-idm", "--out", str(out), "--run-dir", str(run)]
    code = main([*args, "--train-steps", "3", "--batch-size", "4", "--device", "cpu"])
    assert code == 0, capsys.readouterr().err
    report = json.loads((out / "report.json").read_text())
    d = report["data"]
    assert d["kind"] == "run" and d["run_dir"] == str(run)
    assert d["image_size"] == [16, 16] and d["frame_skip"] == 4
    # the run's 2 test episodes are held out; its train and validation episodes train the IDM
    assert (d["train_episodes"], d["held_out_episodes"]) == (4, 2)
    assert d["held_out_pairs"] == 2 * 3 and d["train_pairs"] == 4 * 9
    from rlvr_world.apps.video.config import VideoData
    from rlvr_world.apps.video.episodes import split_data
    from rlvr_world.video.data import load_episodes

    data = VideoData.model_validate(json.loads((run / "config.json").read_text())["data"])
    episodes = load_episodes(sorted((run / "data" / "pusht").glob("ep*.npz")))
    _, _, test = split_data(data, episodes)
    assert len(test) == d["held_out_episodes"]
    assert load_idm(out).config.image_size == (16, 16)
    printed = capsys.readouterr().out
    assert "mean_action" in printed and "report.json" in printed


def run_bad(args: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    code = main(["video", "train-idm", *args])
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.startswith("rlvr-world video train-idm: ")
    return err


def test_bad_runs_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = ["--out", str(tmp_path / "idm")]
    assert "not a folder" in run_bad([*out, "--run-dir", str(tmp_path / "nowhere")], capsys)
    (tmp_path / "bare").mkdir()
    err = run_bad([*out, "--run-dir", str(tmp_path / "bare")], capsys)
    assert "no config.json or config.yaml" in err
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "config.json").write_text(json.dumps({"task": "video", "data": {"episodes": 20}}))
    err = run_bad([*out, "--run-dir", str(empty)], capsys)
    assert "no recordings in" in err and "ep*.npz" in err
    npz = tmp_path / "npz"
    npz.mkdir()
    (npz / "config.yaml").write_text("task: video\ndata: {source: npz, dir: /data/bair}\n")
    err = run_bad([*out, "--run-dir", str(npz)], capsys)
    assert "data.source is 'npz'" in err and "PushT" in err
    text = tmp_path / "text"
    text.mkdir()
    (text / "config.json").write_text(json.dumps({"task": "text_game"}))
    assert "train-idm reads video runs" in run_bad([*out, "--run-dir", str(text)], capsys)
    run = make_run(tmp_path / "run")
    cfg = json.loads((run / "config.json").read_text())
    cfg["data"]["episodes"] = 9
    (run / "config.json").write_text(json.dumps(cfg))
    err = run_bad([*out, "--run-dir", str(run)], capsys)
    assert "6 recordings" in err and "data.episodes = 9" in err
    err = run_bad([*out, "--run-dir", str(run), "--episodes", "4", "--seed", "1"], capsys)
    assert "drop --episodes, --seed" in err
    # an --out that holds something else's config.json (here the run itself) is not overwritten
    before = (run / "config.json").read_text()
    err = run_bad(["--out", str(run), "--episodes", "4"], capsys)
    assert "not an IDM's" in err
    assert (run / "config.json").read_text() == before


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--episodes", "1"], "episodes: Input should be greater than or equal to 2"),
        (["--steps", "0"], "steps: Input should be greater than or equal to 2"),
        (["--image-size", "3"], r"data.image_size: sides must lie in \[8, 1024\]"),
        (["--frame-skip", "0"], "frame_skip: Input should be greater than or equal to 1"),
        (["--frame-skip", "50", "--steps", "40"], "--frame-skip 50: longer than an episode"),
        (["--episodes", "10", "--held-out", "10"], "must be fewer than data.episodes"),
        (["--relative-range", "-5"], "relative_range: Input should be greater than 0"),
        (["--train-steps", "0"], "--train-steps: must be >= 1"),
        (["--batch-size", "0"], "--batch-size: must be >= 1"),
        (["--lr", "0"], "--lr: must be > 0"),
        (["--time-limit-s", "-1"], "--time-limit-s: must be > 0"),
        (["--device", "gpu"], "device 'gpu': expected auto, cpu, cuda or cuda:N"),
    ],
)
def test_nonsense_settings_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    err = run_bad(["--out", str(tmp_path / "idm"), *args], capsys)
    assert re.search(message, err), err
    assert not (tmp_path / "idm").exists()
