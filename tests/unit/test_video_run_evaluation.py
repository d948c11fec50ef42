"""The video run's evaluation helpers: metric resolution, sampling choice, ablation, headlines."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from rlvr_world.apps.video.config import SamplingChoice, VideoEval, VideoRl
from rlvr_world.apps.video.evaluation import (
    best_sampling,
    candidates_of,
    headlines,
    mean_report,
    reward_weights,
    shuffle_actions,
    write_tuning,
)
from rlvr_world.rewards.perceptual import BACKBONE_ENV


def test_auto_perceptual_is_lpips_only_where_its_backbone_is_on_disk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "hub"))  # an empty hub cache
    monkeypatch.delenv(BACKBONE_ENV, raising=False)
    assert VideoEval(perceptual="auto", net="alex").perceptual_metric() == "stlpips"
    weights = tmp_path / "alexnet.pth"
    weights.write_bytes(b"not checked here")
    monkeypatch.setenv(BACKBONE_ENV, str(weights))
    assert VideoEval(perceptual="auto", net="alex").perceptual_metric() == "lpips"
    assert VideoEval(perceptual="stlpips").perceptual_metric() == "stlpips"


def test_reward_weights_resolve_the_perceptual_key() -> None:
    rl = VideoRl(weights={"l1": 5.0, "perceptual": 1.0})
    assert reward_weights(rl, "lpips") == {"l1": 5.0, "lpips": 1.0}
    assert reward_weights(VideoRl(), "lpips") == {"l1": 1.0, "stlpips": 1.0}


@pytest.mark.parametrize(
    ("weights", "message"),
    [
        ({"l2": 1.0}, "unknown metric"),
        ({"l1": 0.0}, "at least one weight must be positive"),
        ({"l1": -1.0}, "must lie in"),
        ({"lpips": 1.0, "perceptual": 1.0}, "one perceptual metric"),
    ],
)
def test_bad_reward_weights_are_refused(weights: dict[str, float], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        VideoRl(weights=weights)


def test_the_best_candidate_wins_and_ties_go_to_the_first(tmp_path: Path) -> None:
    greedy, warm = SamplingChoice(temperature=0.0, top_k=0), SamplingChoice(temperature=1.0)
    results = [(warm, {"reward": -0.2, "l1": 0.1}), (greedy, {"reward": -0.1, "l1": 0.05})]
    assert best_sampling(results) == greedy
    assert best_sampling([(warm, {"reward": -0.1}), (greedy, {"reward": -0.1})]) == warm
    write_tuning(tmp_path / "v.json", results)
    saved = json.loads((tmp_path / "v.json").read_text())
    assert saved["chosen"] == {"temperature": 0.0, "top_k": 0}
    assert saved["candidates"][0] == {"temperature": 1.0, "top_k": 100, "reward": -0.2, "l1": 0.1}
    with pytest.raises(ValueError, match="no candidate"):
        best_sampling([])


def test_without_candidates_the_configured_sampling_is_used() -> None:
    assert candidates_of(VideoEval(temperature=0.5, top_k=7)) == (
        SamplingChoice(temperature=0.5, top_k=7),
    )


def test_shuffled_actions_keep_the_frames_and_permute_the_actions() -> None:
    clips = [(np.full((2, 4, 4, 3), i, np.uint8), np.full((1, 2), i, np.float32)) for i in range(6)]
    out = shuffle_actions(clips, seed=0)
    assert [int(f[0, 0, 0, 0]) for f, _ in out] == list(range(6))
    moved = [int(a[0, 0]) for _, a in out]
    assert sorted(moved) == list(range(6)) and moved != list(range(6))
    assert shuffle_actions(clips, seed=0)[2][1] is out[2][1]


def report(values: list[float], copy: list[float] | None = None) -> dict[str, object]:
    keys = ("reward", "l1", "mse", "psnr", "ssim", "stlpips")
    out: dict[str, object] = {"per_clip": {k: list(values) for k in keys}, "l1": np.mean(values)}
    if copy is not None:
        out["per_clip_copy"] = {k: list(copy) for k in keys}
    return out


def test_headlines_pair_rlvr_with_the_control_over_clips_and_seeds() -> None:
    start = report([0.0, 0.0, 0.0], copy=[-1.0, -1.0, -1.0])
    control = [report([1.0, 2.0, 3.0]), report([3.0, 4.0, 5.0])]
    rlvr = [report([2.0, 3.0, 4.0]), report([4.0, 5.0, 6.0])]
    head, terms = headlines(start, control, rlvr, seeds=[0, 1], perceptual="stlpips")
    assert head["metric"] == "reward -(L1 + stlpips)" and head["n"] == 3
    assert head["seeds"] == [0, 1] and head["copy_last_frame"] == -1.0
    assert "copy_last_frame_pixels" not in head["baselines"]  # the report had no raw_copy_*
    with_pixels = {**start, "raw_copy_reward": 9.0}
    head_px, _ = headlines(with_pixels, control, rlvr, seeds=[0, 1], perceptual="stlpips")
    assert head_px["baselines"] == {"copy_last_frame": -1.0, "copy_last_frame_pixels": 9.0}
    assert head["control"] == pytest.approx(3.0) and head["rlvr"] == pytest.approx(4.0)
    assert head["ci95"] == pytest.approx([1.0, 1.0])
    assert set(terms) == {"stlpips", "l1", "mse", "psnr", "ssim"}
    # every interval is of RLVR - control; a term where lower is better says so
    assert terms["l1"]["ci95"] == pytest.approx([1.0, 1.0])
    assert terms["l1"]["higher_is_better"] is False and terms["psnr"]["higher_is_better"]
    assert terms["psnr"]["ci95"] == pytest.approx([1.0, 1.0])
    with pytest.raises(ValueError, match="per_clip_copy"):
        headlines(report([0.0] * 3), control, rlvr, seeds=[0, 1], perceptual="stlpips")
    with pytest.raises(ValueError, match="for 3"):
        headlines(start, control, rlvr, seeds=[0, 1, 2], perceptual="stlpips")


def test_mean_report_averages_numbers_and_clips() -> None:
    a = {"l1": 1.0, "n_clips": 2, "perceptual": "stlpips", "per_clip": {"l1": [1.0, 3.0]}}
    b = {"l1": 3.0, "n_clips": 2, "perceptual": "stlpips", "per_clip": {"l1": [3.0, 5.0]}}
    out = mean_report([a, b])
    assert out["l1"] == 2.0 and out["n_clips"] == 2.0 and out["perceptual"] == "stlpips"
    assert out["per_clip"] == {"l1": [2.0, 4.0]} and out["seeds"] == 2
    # a share with nothing to count in one seed (None, change_stats) is left out of its mean
    c = {"changed_precision": 0.5, "changed_recall": None, "changed_exact": None}
    d = {"changed_precision": None, "changed_recall": 0.25, "changed_exact": None}
    shares = mean_report([c, d])
    assert shares["changed_precision"] == 0.5 and shares["changed_recall"] == 0.25
    assert shares["changed_exact"] is None
