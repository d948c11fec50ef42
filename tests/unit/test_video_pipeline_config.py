"""Video items, the video run configuration and its generated service configs, the report table."""

from __future__ import annotations

import base64
import math
from pathlib import Path

import numpy as np
import pytest
from pydantic import ValidationError

from rlvr_world.apps.video.config import VideoPipelineConfig, load_video_config
from rlvr_world.apps.video.episodes import spread
from rlvr_world.apps.video.report import metrics_table
from rlvr_world.apps.video.rl import orchestrator_config, write_trainer_yaml
from rlvr_world.items import VideoPayload, load_items, save_items, video_frames, video_item

REPO = Path(__file__).resolve().parents[2]


def frame(value: int, size: int = 8) -> np.ndarray:
    rng = np.random.default_rng(value)
    return rng.integers(0, 256, size=(size, size, 3), dtype=np.uint8)


def test_video_items_round_trip_with_their_frames(tmp_path: Path) -> None:
    item = video_item("c1", [5, 6, 7], frame(1), frame(2), target_tokens=[3, 4])
    assert item.task == "video" and item.rollout_prompt == [5, 6, 7] and item.target == "3 4"
    save_items([item], tmp_path / "items.jsonl")
    (back,) = load_items(tmp_path / "items.jsonl")
    assert back == item
    target, previous = video_frames(back)
    np.testing.assert_array_equal(target, frame(1))
    np.testing.assert_array_equal(previous, frame(2))


def test_video_items_refuse_bad_frames_by_name() -> None:
    with pytest.raises(ValueError, match="target_frame: need a uint8"):
        video_item("c", [1], frame(1).astype(np.float32), frame(2))
    with pytest.raises(ValueError, match="previous_frame: need a uint8"):
        video_item("c", [1], frame(1), frame(2)[..., :2])
    item = video_item("c", [1], frame(1), frame(2))
    assert item.video is not None
    cut = base64.b64encode(b"\x00" * 10).decode()
    broken = item.video.to_json() | {"target": {"b64": cut, "shape": [8, 8, 3]}}
    with pytest.raises(ValueError, match=r"video\.target: 10 bytes do not fill"):
        VideoPayload.from_json(broken)
    missing = {k: v for k, v in item.video.to_json().items() if k != "previous"}
    with pytest.raises(ValueError, match=r"video\.previous: missing"):
        VideoPayload.from_json(missing)
    with pytest.raises(ValueError, match=r"has no video payload"):
        video_frames(type(item)(**{**item.__dict__, "video": None}))


@pytest.mark.parametrize("path", sorted((REPO / "configs" / "video").glob("*.yaml")), ids=str)
def test_every_shipped_video_config_parses(path: Path) -> None:
    cfg = load_video_config(path)
    assert cfg.task == "video"


def test_video_config_refuses_bad_values_and_unknown_fields(tmp_path: Path) -> None:
    bad = {
        "data: {source: npz}": "data.dir: required",
        "data: {episodes: 4, held_out: 4}": "held_out \\+ data.validation: must be fewer",
        "data: {episodes: 4, held_out: 2, validation: 2}": "must be fewer",
        "eval: {candidates: [{temperature: 0}]}": "needs validation episodes",
        "eval: {perceptual: vgg}": "perceptual",
        "rl: {weights: {l2: 1}}": "unknown metric",
        "run: {seeds: 0}": "seeds",
        "data: {image_size: 4}": "sides must lie in",
        "rl: {group_size: 1}": "group_size",
        "mle: {stepz: 3}": "stepz",
        "task: text_game": "task",
        "model: {anchor_dilate: -1}": "anchor_dilate",
        "model: {layout: multi_step, anchor_dilate: 1}": "single-step only",
        "rl: {weights: {l1: 1.0, idm: 0.0}}": "idm reads the actions .* set idm.path",
        "rl: {weights: {l1: 1.0, mse: 1.0, state: 0.5}}\ndata: {source: npz, dir: /nonexistent}": (
            "state compares .* no .npz episodes in /nonexistent"
        ),
        "data: {source: npz, dir: x}\nidm: {train: true}": "idm.train: trains on PushT",
        "idm: {train: true, path: x}": "either idm.path",
        "idm: {train: true, steps: 0}": "idm.steps",
        "rl: {weights: {l1: 1.0, state: 1.0}, balance_mode: action_terms}": (
            "needs rl.balance_prompts > 0"
        ),
        "rl: {weights: {state: 1.0}, balance_mode: action_terms, balance_prompts: 2}": (
            "a positive pixel weight"
        ),
        "data: {source: npz, dir: x, actions: agent_relative}": "only PushT recordings",
        "data: {actions: relative}": "actions",
        "tokenizer: {hold_below: 8}\nmodel: {layout: multi_step}": "single-step only",
        "tokenizer: {hold_below: 256}": "hold_below",
        "data: {actions: agent_relative, relative_range: 0}": "relative_range",
        "data: {source: npz, dir: x, frame_skip: 2}": "data.frame_skip: only PushT recordings",
        "data: {frame_skip: 0}": "frame_skip",
        "data: {steps: 3, frame_skip: 4}\nmodel: {context_length: 1}": (
            "episodes of 3 steps have 1 at data.frame_skip 4"
        ),
    }
    for text, message in bad.items():
        path = tmp_path / "c.yaml"
        path.write_text(text + "\n")
        with pytest.raises(ValidationError, match=message):
            load_video_config(path)


def test_generated_trainer_and_orchestrator_configs_validate(tmp_path: Path) -> None:
    from rlvr_world.video.layout import SingleStepVocab
    from trainer.config import load_config

    cfg = load_video_config(
        REPO / "configs" / "video" / "smoke.yaml", {"run.run_dir": str(tmp_path)}
    )
    vocab = SingleStepVocab(visual_codes=16, action_bins=cfg.model.action_bins)
    yaml_path = write_trainer_yaml(cfg, tmp_path / "model", "redis://127.0.0.1:1/0", tmp_path)
    tcfg = load_config(yaml_path)
    assert tcfg.run.total_steps == cfg.rl.steps and tcfg.model.temperature == cfg.rl.temperature
    orch = orchestrator_config(cfg, 64, vocab)
    assert orch.allowed_tokens == (0, 16) and orch.ignore_eos and orch.max_tokens == 64
    assert orch.video_weights == {"l1": 1.0, "stlpips": 1.0, "idm": 0.0, "state": 0.0}
    assert orch.seed == 0 and orch.video_repetition_penalty == 0.0
    assert orch.video_anchor_dilate is None
    anchored = cfg.model_copy(update={"model": cfg.model.model_copy(update={"anchor_dilate": 1})})
    assert orchestrator_config(anchored, 64, vocab).video_anchor_dilate == 1


def test_a_run_seed_reaches_the_trainer_and_the_sampler(tmp_path: Path) -> None:
    from rlvr_world.video.layout import SingleStepVocab
    from trainer.config import load_config

    overrides = {
        "run.run_dir": str(tmp_path),
        "rl.weights": {"l1": 4.0, "perceptual": 1.0},
        "rl.repetition_penalty": 0.5,
        "eval.net": "alex",
    }
    cfg = load_video_config(REPO / "configs" / "video" / "smoke.yaml", overrides)
    path = write_trainer_yaml(cfg, tmp_path / "model", "redis://127.0.0.1:1/0", tmp_path, seed=3)
    assert load_config(path).run.seed == 3
    vocab = SingleStepVocab(visual_codes=16, action_bins=cfg.model.action_bins)
    one, two = (orchestrator_config(cfg, 64, vocab, metric="lpips", seed=n) for n in (1, 2))
    assert one.seed != two.seed and abs(one.seed - two.seed) > 100_000  # disjoint request seeds
    assert one.video_weights == {"l1": 4.0, "lpips": 1.0} and one.video_lpips_net == "alex"
    assert one.video_repetition_penalty == 0.5
    no_perceptual = cfg.model_copy(update={"rl": cfg.rl.model_copy(update={"weights": {"l1": 1}})})
    assert orchestrator_config(no_perceptual, 64, vocab).video_lpips_net == ""


def test_agent_relative_actions_are_the_moves_asked_for(tmp_path: Path) -> None:
    from rlvr_world.apps.video.config import VideoData
    from rlvr_world.apps.video.episodes import action_ranges, agent_relative, run_episodes
    from rlvr_world.video.data import Episode

    frames = np.zeros((3, 8, 8, 3), dtype=np.uint8)
    actions = np.array([[100.0, 200.0], [300.0, 50.0]], dtype=np.float32)
    pos = np.array([[90.0, 210.0], [120.0, 190.0], [280.0, 60.0]])
    moves = agent_relative(Episode(frames, actions, "t"), pos)
    np.testing.assert_allclose(moves.actions, [[10.0, -10.0], [180.0, -140.0]])
    assert moves.actions.dtype == np.float32 and moves.frames is frames
    with pytest.raises(ValueError, match=r"agent_pos: expected shape \(3, 2\) for t, got \(2, 2\)"):
        agent_relative(Episode(frames, actions, "t"), pos[:2])
    rel = VideoData(actions="agent_relative", relative_range=64.0)
    np.testing.assert_allclose(action_ranges(rel), [[-64.0, 64.0], [-64.0, 64.0]])  # type: ignore[arg-type]
    np.testing.assert_allclose(action_ranges(VideoData()), [[0.0, 512.0], [0.0, 512.0]])  # type: ignore[arg-type]
    assert action_ranges(VideoData(source="npz", dir=tmp_path)) is None
    # A recording without agent_pos is refused by name, not read as absolute actions.
    folder = tmp_path / "run" / "data" / "pusht"
    folder.mkdir(parents=True)
    for i in range(2):
        blank = np.zeros((3, 96, 96, 3), np.uint8)
        np.savez(folder / f"ep{i:04d}.npz", frames=blank, actions=actions)
    data = VideoData(episodes=2, held_out=1, actions="agent_relative", image_size=16)
    with pytest.raises(ValueError, match="need the recorded agent_pos, the file has"):
        run_episodes(data, tmp_path / "run")


def test_frame_skip_spans_steps_with_the_last_target_as_action(tmp_path: Path) -> None:
    from rlvr_world.apps.video.config import VideoData
    from rlvr_world.apps.video.episodes import run_episodes, skip_steps
    from rlvr_world.video.data import Episode

    frames = np.arange(8, dtype=np.uint8)[:, None, None, None] * np.ones((1, 4, 4, 3), np.uint8)
    actions = np.arange(14, dtype=np.float32).reshape(7, 2)
    pos = np.arange(16, dtype=np.float64).reshape(8, 2) * 10.0
    skipped, spos = skip_steps(Episode(frames, actions, "t"), pos, 3)
    # 7 steps make two spans of 3 (steps 0-2 and 3-5); the seventh step is cut.
    assert [int(f[0, 0, 0]) for f in skipped.frames] == [0, 3, 6]
    np.testing.assert_array_equal(skipped.actions, [[4.0, 5.0], [10.0, 11.0]])
    np.testing.assert_array_equal(spos, [[0.0, 10.0], [60.0, 70.0], [120.0, 130.0]])
    with pytest.raises(ValueError, match="frame_skip: 8 leaves no whole span in t"):
        skip_steps(Episode(frames, actions, "t"), pos, 8)
    with pytest.raises(ValueError, match="frame_skip: 0 leaves no whole span in t"):
        skip_steps(Episode(frames, actions, "t"), pos, 0)
    with pytest.raises(ValueError, match="agent_pos: expected 8 rows for t"):
        skip_steps(Episode(frames, actions, "t"), pos[:5], 2)
    # Through run_episodes: relative to the agent's position at each span's start.
    folder = tmp_path / "run" / "data" / "pusht"
    folder.mkdir(parents=True)
    for i in range(2):
        np.savez(
            folder / f"ep{i:04d}.npz",
            frames=np.repeat(frames[:, :1, :1], 16, 1).repeat(16, 2),
            actions=actions,
            agent_pos=pos,
        )
    data = VideoData(
        episodes=2, steps=7, held_out=1, image_size=16, actions="agent_relative", frame_skip=3
    )
    episodes = run_episodes(data, tmp_path / "run")
    assert [e.length for e in episodes] == [2, 2]
    np.testing.assert_allclose(episodes[0].actions, [[4.0, -5.0], [-50.0, -59.0]])
    absolute = run_episodes(data.model_copy(update={"actions": "absolute"}), tmp_path / "run")
    np.testing.assert_allclose(absolute[0].actions, [[4.0, 5.0], [10.0, 11.0]])


def test_spread_is_a_seeded_subset_in_order() -> None:
    picked = spread(list(range(100)), 10, seed=3)
    assert len(picked) == 10 and picked == sorted(picked) and picked == spread(range(100), 10, 3)
    assert spread([1, 2], 5, 0) == [1, 2]


def test_metrics_table_marks_the_best_per_direction() -> None:
    evals = {
        "mle": {"reward": -0.5, "l1": 0.2, "psnr": 20.0, "recon_l1": 0.1, "copy_l1": 0.3},
        "rlvr": {"reward": -0.4, "l1": 0.25, "psnr": 21.0},
    }
    rows = {line.split("|")[1].strip(): line for line in metrics_table(evals)[2:]}
    assert "**-0.4000**" in rows["reward -(L1 + ST-LPIPS) (higher is better)"]
    assert (
        "**0.2000**" in rows["L1 (lower is better)"]
        and "0.1000 | 0.3000" in rows["L1 (lower is better)"]
    )
    assert "**21.0000**" in rows["PSNR (dB) (higher is better)"]
    assert not any("SSIM" in r for r in rows)


def test_default_config_is_the_cpu_demo_size() -> None:
    cfg = VideoPipelineConfig()
    assert cfg.data.image_size == 64 and cfg.rl.weights == {"l1": 1.0, "stlpips": 1.0}
    assert math.isclose(cfg.baseline.lr, 1e-4)


def test_a_saved_mle_model_is_used_as_it_is_or_refused_when_it_does_not_fit(
    tmp_path: Path,
) -> None:
    import json
    from types import SimpleNamespace

    from rlvr_world.apps.video.pipeline import VideoRun
    from rlvr_world.video.layout import SingleStepVocab
    from rlvr_world.video.world_model import VIDEO_JSON, WorldModelSpec

    vocab = SingleStepVocab(visual_codes=16, action_bins=8)
    saved = tmp_path / "mle"
    saved.mkdir()
    spec = WorldModelSpec(vocab=vocab, tokens_per_frame=4, context_length=1)
    (saved / VIDEO_JSON).write_text(json.dumps(spec.to_dict()))
    cfg = load_video_config(
        REPO / "configs" / "video" / "smoke.yaml",
        {"run.run_dir": str(tmp_path / "run"), "mle.path": str(saved), "model.context_length": 1},
    )
    run = VideoRun(cfg)
    fits = SimpleNamespace(vocab=vocab, tokens_per_frame=4)
    assert run.mle(fits) == saved  # type: ignore[arg-type]
    assert run.summary["mle"] == {"path": str(saved), "trained": False}
    other = SimpleNamespace(
        vocab=SingleStepVocab(visual_codes=32, action_bins=8), tokens_per_frame=4
    )
    with pytest.raises(ValueError, match="do not match this run's tokenizer"):
        run.mle(other)  # type: ignore[arg-type]
    relative = cfg.model_copy(
        update={"data": cfg.data.model_copy(update={"actions": "agent_relative"})}
    )
    with pytest.raises(ValueError, match=r"reads absolute actions, this run's data\.actions is"):
        VideoRun(relative).mle(fits)  # type: ignore[arg-type]
    with pytest.raises(FileNotFoundError, match="not a world-model directory"):
        VideoRun(cfg.model_copy(update={"mle": cfg.mle.model_copy(update={"path": tmp_path})})).mle(
            fits  # type: ignore[arg-type]
        )
