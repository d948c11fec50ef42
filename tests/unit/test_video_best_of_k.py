"""Best-of-k of a video run (``rlvr_world.apps.video.best_of_k``): the curves, the headline, the
config and what a bad config or a missing run gets. The sampling through real models runs in
tests/integration/test_video_pipeline.py on the smoke run."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from pydantic import ValidationError

from rlvr_world.apps.video.best_of_k import (
    BestOfKConfig,
    best_of_k,
    curves,
    headline,
    k_to_match,
    load_best_of_k_config,
    model_paths,
)
from rlvr_world.apps.video.config import VideoPipelineConfig
from rlvr_world.apps.video.source import source_config

REPO = Path(__file__).resolve().parents[2]
VIDEO = VideoPipelineConfig()


def _cfg(tmp_path: Path, **extra: object) -> BestOfKConfig:
    return BestOfKConfig.model_validate({"source": {"run_dir": str(tmp_path)}, **extra})


def test_best_of_k_takes_the_best_of_the_first_k_samples_per_clip() -> None:
    samples = np.array([[0.5, 0.1], [0.2, 0.4], [0.9, 0.0], [0.3, 0.3]])
    high = best_of_k(samples, [1, 2, 4], higher=True)
    np.testing.assert_allclose(high, [[0.5, 0.1], [0.5, 0.4], [0.9, 0.4]])
    low = best_of_k(samples, [1, 3], higher=False)
    np.testing.assert_allclose(low, [[0.5, 0.1], [0.2, 0.0]])


def test_best_of_k_curves_are_monotone_in_k() -> None:
    rng = np.random.default_rng(0)
    samples = rng.normal(size=(50, 30))
    ks = [1, 5, 20, 50]
    means_high = best_of_k(samples, ks, higher=True).mean(axis=1)
    means_low = best_of_k(samples, ks, higher=False).mean(axis=1)
    assert np.all(np.diff(means_high) >= 0)
    assert np.all(np.diff(means_low) <= 0)


@pytest.mark.parametrize(
    ("shape", "ks", "message"),
    [
        ((3, 2), [1, 4], r"each must be in \[1, 3\]"),
        ((3, 2), [0], r"each must be in"),
        ((3,), [1], "expected \\(samples, clips\\)"),
        ((0, 2), [1], "expected \\(samples, clips\\)"),
    ],
)
def test_best_of_k_refuses_ks_beyond_the_samples_and_bad_shapes(
    shape: tuple[int, ...], ks: list[int], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        best_of_k(np.zeros(shape), ks, higher=True)


def test_curves_pair_the_models_per_clip_and_know_each_metrics_direction() -> None:
    rng = np.random.default_rng(1)
    base = {"reward": rng.normal(-0.1, 0.01, (8, 40)), "l1": rng.uniform(0, 1, (8, 40))}
    rlvr = {"reward": base["reward"] + 0.01, "l1": base["l1"] - 0.05}
    out = curves({"base": base, "rlvr": rlvr}, [1, 2, 8], resamples=500, seed=0)
    assert out["reward"]["higher_is_better"] and not out["l1"]["higher_is_better"]
    np.testing.assert_allclose(out["reward"]["rlvr_minus_base"], [0.01] * 3, atol=1e-12)
    np.testing.assert_allclose(out["l1"]["rlvr_minus_base"], [-0.05] * 3, atol=1e-12)
    for metric in out.values():
        for diff, (lo, hi) in zip(metric["rlvr_minus_base"], metric["ci95"], strict=True):
            assert lo <= diff <= hi
    assert out["reward"]["base"][0] == pytest.approx(base["reward"][0].mean())
    assert out["reward"]["base"][2] == pytest.approx(base["reward"].max(axis=0).mean())


def test_k_to_match_is_the_first_k_where_the_base_reaches_rlvrs_single_sample() -> None:
    assert k_to_match([-0.3, -0.2, -0.1], -0.2, [1, 5, 20], higher=True) == 5
    assert k_to_match([-0.3, -0.25], -0.2, [1, 5], higher=True) is None
    assert k_to_match([0.3, 0.1], 0.2, [1, 5], higher=False) == 5


def test_headline_states_the_curves_the_interval_and_the_matching_k() -> None:
    c = {
        "reward": {
            "higher_is_better": True,
            "base": [-0.30, -0.20, -0.15],
            "rlvr": [-0.25, -0.19, -0.16],
            "rlvr_minus_base": [0.05, 0.01, -0.01],
            "ci95": [[0.02, 0.08], [-0.01, 0.03], [-0.03, 0.01]],
        }
    }
    head = headline(c, [1, 5, 20], n=16, seed=3, metric="reward")
    assert head["seeds"] == [3] and head["n"] == 16 and head["ks"] == [1, 5, 20]
    assert head["base_k_to_match_rlvr_1"] == 5
    assert head["ci95"][0] == [0.02, 0.08]
    assert "best of 5 reaches RLVR's single sample" in head["text"]
    assert "(includes 0)" not in head["text"].split(";")[0]


def test_the_shipped_config_loads(tmp_path: Path) -> None:
    cfg = load_best_of_k_config(REPO / "configs" / "experiments" / "video_best_of_k.yaml")
    assert cfg.best_of_k.ks == (1, 5, 20, 100)
    assert cfg.best_of_k.sampling.temperature == 1.0


@pytest.mark.parametrize(
    ("best", "message"),
    [
        ({"ks": [2, 5]}, "must start at 1"),
        ({"ks": [1, 5, 5]}, "strictly increase"),
        ({"ks": [1, 20, 5]}, "strictly increase"),
        ({"ks": []}, "must start at 1"),
        ({"ks": [1, 20_000]}, "at most 10000"),
        ({"temperature": 0.0}, "greater than 0"),
        ({"clips": 0}, "greater than or equal to 1"),
        ({"samples": 3}, "Extra inputs are not permitted"),
    ],
)
def test_bad_best_of_k_settings_are_refused(
    tmp_path: Path, best: dict[str, object], message: str
) -> None:
    with pytest.raises(ValidationError, match=message):
        _cfg(tmp_path, best_of_k=best)


def test_overrides_must_name_a_section(tmp_path: Path) -> None:
    path = REPO / "configs" / "experiments" / "video_best_of_k.yaml"
    with pytest.raises(ValueError, match=r"section\.field"):
        load_best_of_k_config(path, {"ks": [1, 2]})


def test_a_missing_source_run_is_named(tmp_path: Path) -> None:
    cfg = _cfg(tmp_path / "nowhere")
    with pytest.raises(FileNotFoundError, match="run the video config first"):
        source_config(cfg.source)


def test_a_run_without_config_json_needs_source_config(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"set source\.config"):
        source_config(_cfg(tmp_path).source)
    cfg = _cfg(
        tmp_path,
        source={"run_dir": str(tmp_path), "config": str(REPO / "configs/video/smoke.yaml")},
    )
    video = source_config(cfg.source)
    assert video.run.run_dir == tmp_path  # the YAML's run_dir is replaced by the source folder
    assert video.data.episodes == 6


def test_a_saved_config_json_is_used_and_a_second_config_refused(tmp_path: Path) -> None:
    video = VideoPipelineConfig.model_validate({"data": {"episodes": 9}})
    (tmp_path / "config.json").write_text(video.model_dump_json(exclude_unset=True))
    assert source_config(_cfg(tmp_path).source).data.episodes == 9
    cfg = _cfg(
        tmp_path,
        source={"run_dir": str(tmp_path), "config": str(REPO / "configs/video/smoke.yaml")},
    )
    with pytest.raises(ValueError, match=r"leave source\.config"):
        source_config(cfg.source)


def test_missing_models_are_named(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="no GRPO run of seed 2"):
        model_paths(_cfg(tmp_path, source={"run_dir": str(tmp_path), "seed": 2}), VIDEO)
    rlvr = tmp_path / "rlvr"
    rlvr.mkdir()
    (rlvr / "config.json").write_text(json.dumps({}))
    with pytest.raises(FileNotFoundError, match=r"models\.base .*no saved model"):
        model_paths(_cfg(tmp_path, models={"rlvr": str(rlvr)}), VIDEO)
    # a source run that started from a saved MLE model (mle.path): that one is the base
    video = VideoPipelineConfig.model_validate({"mle": {"path": str(rlvr)}})
    paths = model_paths(_cfg(tmp_path, models={"rlvr": str(rlvr)}), video)
    assert paths == {"base": rlvr, "rlvr": rlvr}
