"""RLVR arms of a video run (``rlvr_world.apps.video.sweep``): what each arm's config becomes, the
comparison, and what a bad sweep config gets. The arms themselves run in
tests/integration/test_video_pipeline.py on the smoke run."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from pydantic import ValidationError

from rlvr_world.apps.video.config import VideoIdm, VideoPipelineConfig
from rlvr_world.apps.video.sweep import SweepConfig, arm_config, compare, load_sweep_config
from rlvr_world.apps.video.sweep_control import with_shared_control

REPO = Path(__file__).resolve().parents[2]
ARMS = {"a": {"rl.group_size": 2}, "b": {"rl.group_size": 4}}


def _source(tmp_path: Path, summary: dict[str, object] | None = None) -> VideoPipelineConfig:
    """A finished-looking source run: config.json, tokenizer and MLE model folders."""
    video = VideoPipelineConfig.model_validate(
        {"eval": {"temperature": 0.7, "top_k": 5}, "rl": {"steps": 9}}
    )
    (tmp_path / "config.json").write_text(video.model_dump_json(exclude_unset=True))
    for folder in ("tokenizer", "model/mle"):
        (tmp_path / folder).mkdir(parents=True)
        (tmp_path / folder / "config.json").write_text("{}")
    if summary is not None:
        (tmp_path / "summary.json").write_text(json.dumps(summary))
    return video


def _cfg(tmp_path: Path, **extra: object) -> SweepConfig:
    data = {"source": {"run_dir": str(tmp_path)}, "arms": ARMS, "run": {"run_dir": "/out"}}
    return SweepConfig.model_validate({**data, **extra})


def test_an_arm_starts_from_the_source_runs_tokenizer_and_mle_model(tmp_path: Path) -> None:
    video = _source(tmp_path, {"sampling": {"used": {"temperature": 0.0, "top_k": 0}}})
    cfg = _cfg(tmp_path, common={"rl.steps": 3, "rl.group_size": 16})
    arm = arm_config(cfg, "b", video)
    assert arm.tokenizer.path == tmp_path / "tokenizer"
    assert arm.mle.path == tmp_path / "model" / "mle"
    assert arm.run.run_dir == Path("/out/b") and arm.run.seeds == 1
    assert arm.rl.steps == 3  # common
    assert arm.rl.group_size == 4  # the arm's own override wins over common
    # the sampling the source run used, not re-tuned; no ablation, no control by default
    assert (arm.eval.temperature, arm.eval.top_k, arm.eval.candidates) == (0.0, 0, ())
    assert not arm.eval.shuffled_actions and not arm.baseline.enabled
    assert arm.eval.clips == video.eval.clips  # the same held-out clips


def test_an_arm_reads_with_the_source_runs_idm(tmp_path: Path) -> None:
    plain = _source(tmp_path)
    video = plain.model_copy(update={"idm": VideoIdm(train=True)})
    with pytest.raises(FileNotFoundError, match="the source run's IDM is not there"):
        arm_config(_cfg(tmp_path), "a", video)
    (tmp_path / "idm").mkdir()
    (tmp_path / "idm" / "config.json").write_text("{}")
    arm = arm_config(_cfg(tmp_path), "a", video)
    assert arm.idm.path == tmp_path / "idm" and not arm.idm.train  # read, not trained again
    assert arm_config(_cfg(tmp_path), "a", plain).idm.path is None  # the source trained none


def test_a_shared_control_runs_with_the_first_arm_on_a_budget_every_arm_shares(
    tmp_path: Path,
) -> None:
    video = _source(tmp_path)
    cfg = _cfg(tmp_path, common={"baseline.budget": "samples"}, arms={"a": {}, "b": {}})
    arms = with_shared_control({n: arm_config(cfg, n, video) for n in cfg.arms})
    assert arms["a"].baseline.enabled and not arms["b"].baseline.enabled
    wall = _cfg(tmp_path, arms={"a": {}, "b": {}})
    with pytest.raises(ValueError, match=r"set common baseline\.budget to samples or steps"):
        with_shared_control({n: arm_config(wall, n, video) for n in wall.arms})
    sizes = _cfg(tmp_path, common={"baseline.budget": "steps"})  # ARMS differ in group size
    with pytest.raises(ValueError, match=r"the arms differ in rl\.steps, rl\.groups_per_step"):
        with_shared_control({n: arm_config(sizes, n, video) for n in sizes.arms})


def test_without_a_source_summary_the_configs_sampling_is_used(tmp_path: Path) -> None:
    video = _source(tmp_path)
    arm = arm_config(_cfg(tmp_path), "a", video)
    assert (arm.eval.temperature, arm.eval.top_k) == (0.7, 5)


def test_a_source_without_its_mle_model_is_named(tmp_path: Path) -> None:
    video = _source(tmp_path)
    (tmp_path / "model" / "mle" / "config.json").unlink()
    with pytest.raises(FileNotFoundError, match="MLE model is not there"):
        arm_config(_cfg(tmp_path), "a", video)


def test_a_bad_arm_override_is_refused_by_the_video_config(tmp_path: Path) -> None:
    video = _source(tmp_path)
    cfg = _cfg(tmp_path, arms={"a": {"rl.weights": {"fid": 1.0}}, "b": {}})
    with pytest.raises(ValidationError, match="unknown metric"):
        arm_config(cfg, "a", video)


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"arms": {"a": {}}}, "at least 2 arms"),
        ({"arms": {"a": {}, "b c": {}}}, "not a folder name"),
        ({"arms": {"a": {}, "../up": {}}}, "not a folder name"),
        ({"arms": {"a": {"mle.path": "/x"}, "b": {}}}, r"arms\.a: mle\.path is fixed"),
        ({"arms": {"a": {"data.episodes": 3}, "b": {}}}, r"data\.episodes is fixed"),
        ({"common": {"tokenizer.path": "/x"}}, r"common: tokenizer\.path is fixed"),
        ({"common": {"run.run_dir": "/x"}}, r"run\.run_dir is fixed"),
        ({"extra": 1}, "Extra inputs are not permitted"),
    ],
)
def test_bad_sweep_configs_are_refused(
    tmp_path: Path, extra: dict[str, object], message: str
) -> None:
    with pytest.raises(ValidationError, match=message):
        _cfg(tmp_path, **extra)


def test_the_shipped_sweeps_load() -> None:
    group = load_sweep_config(REPO / "configs" / "experiments" / "video_group_size.yaml")
    assert [a["rl.group_size"] for a in group.arms.values()] == [2, 4, 8, 16]
    metric = load_sweep_config(REPO / "configs" / "experiments" / "video_metric_rewards.yaml")
    assert {next(iter(a["rl.weights"])) for a in metric.arms.values()} == {
        "mse",
        "psnr",
        "ssim",
        "perceptual",
        "l1",
    }
    repetition = load_sweep_config(REPO / "configs" / "experiments" / "video_repetition.yaml")
    assert repetition.arms == {"plain": {}, "penalty": {"rl.repetition_penalty": 1.0}}
    for name in ("video_action_reward", "smoke_video_action_reward"):
        action = load_sweep_config(REPO / "configs" / "experiments" / f"{name}.yaml")
        assert list(action.arms) == ["pixel", "state", "idm"] and action.control
        assert action.common["baseline.budget"] == "samples"
        for arm in ("state", "idm"):
            assert action.arms[arm]["rl.weights"][arm] == 1.0
            assert action.arms[arm]["rl.balance_mode"] == "action_terms"
    # an override of one arm from the command line
    again = load_sweep_config(
        REPO / "configs" / "experiments" / "video_group_size.yaml", {"arms.G2": {"rl.steps": 5}}
    )
    assert again.arms["G2"] == {"rl.steps": 5}


def test_compare_pairs_clips_and_keeps_each_metrics_direction() -> None:
    start = {"reward": np.array([-0.2, -0.1, -0.3]), "l1": np.array([0.1, 0.2, 0.3])}
    arms = {"x": {"reward": start["reward"] + 0.01, "l1": start["l1"] - 0.02}}
    out = compare(start, arms, ["reward", "l1"], resamples=200, seed=0)
    assert out["x"]["reward"]["minus_start"] == pytest.approx(0.01)
    assert out["x"]["reward"]["ci95"] == pytest.approx([0.01, 0.01])
    assert out["x"]["l1"]["minus_start"] == pytest.approx(-0.02)
    assert out["x"]["reward"]["higher_is_better"] and not out["x"]["l1"]["higher_is_better"]
