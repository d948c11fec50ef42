"""The runtime configs built with ``Section.to`` equal the field-by-field copies they replaced
(issue #40), for every shipped config and for sections with every value off its default."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from rlvr_world.apps.collect.browser import BrowserSettings
from rlvr_world.apps.mpc.config import (
    PlannerSection,
    PolicySpec,
    load_mpc_config,
    load_policy_eval_config,
)
from rlvr_world.apps.mpc.run import _settings
from rlvr_world.apps.mpc.web_config import WebBrowserSection, load_web_mpc_config
from rlvr_world.apps.pipeline.config import TextRl, load_pipeline_config
from rlvr_world.apps.run.grpo import orchestrator_config
from rlvr_world.apps.video.config import VideoTokenizerSection, load_video_config
from rlvr_world.apps.video.sections import VideoIdm, VideoRl
from rlvr_world.mpc.planner import PlannerConfig
from rlvr_world.mpc.policy_eval import PolicyDef
from rlvr_world.mpc.space import ActionSpace
from rlvr_world.runlog import JsonlLog

REPO = Path(__file__).resolve().parents[2]


def configs(folder: str, task: str) -> list[Path]:
    paths = sorted((REPO / "configs" / folder).glob("*.yaml"))
    return [p for p in paths if yaml.safe_load(p.read_text()).get("task") == task]


# --- apps.mpc.run ---------------------------------------------------------------------------


def old_planner(p: PlannerSection, space: ActionSpace) -> PlannerConfig:
    return PlannerConfig(
        kind=p.kind,
        candidates=p.candidates,
        horizon=p.horizon,
        iterations=p.iterations,
        elites=p.elites,
        init_std=p.init_std,
        min_std=p.min_std,
        temperature=p.temperature,
        low=space.low,
        high=space.high,
    )


@pytest.mark.parametrize("path", configs("mpc", "mpc"), ids=lambda p: p.name)
@pytest.mark.parametrize("space", [ActionSpace(), ActionSpace(frame_skip=4)], ids=repr)
def test_mpc_planner_config_is_the_old_copy(path: Path, space: ActionSpace) -> None:
    cfg = load_mpc_config(path)
    assert _settings(cfg, space).planner == old_planner(cfg.planner, space)
    odd = PlannerSection(
        kind="mppi",
        candidates=7,
        horizon=5,
        iterations=3,
        elites=2,
        init_std=11.0,
        min_std=1.5,
        temperature=0.5,
        execute=4,
        replans=3,
    )
    odd_cfg = cfg.model_copy(update={"planner": odd})
    assert _settings(odd_cfg, space).planner == old_planner(odd, space)


@pytest.mark.parametrize("path", configs("mpc", "policy_eval"), ids=lambda p: p.name)
def test_policy_defs_are_the_old_copy(path: Path) -> None:
    specs = [
        *load_policy_eval_config(path).policies,
        PolicySpec(name="x", kind="random", noise=3.0, towards_goal_p=0.2, keep_direction_p=0.7),
    ]
    for p in specs:
        assert p.to(PolicyDef) == PolicyDef(
            p.name, p.kind, p.noise, p.towards_goal_p, p.keep_direction_p
        )


# --- apps.mpc.web ---------------------------------------------------------------------------


@pytest.mark.parametrize("path", configs("mpc", "web_mpc"), ids=lambda p: p.name)
def test_browser_settings_are_the_old_copy(path: Path) -> None:
    odd = WebBrowserSection(
        executable=Path("/opt/chrome"), step_ms=5, settle_s=0.7, call_timeout_s=9.0
    )
    for b in (load_web_mpc_config(path).browser, odd):
        assert b.to(BrowserSettings) == BrowserSettings(
            executable=b.executable,
            step_ms=b.step_ms,
            settle_s=b.settle_s,
            call_timeout_s=b.call_timeout_s,
        )


# --- apps.video.setup and the IDM phase ------------------------------------------------------


def tokenizer_sections(path: Path) -> list[VideoTokenizerSection]:
    odd = VideoTokenizerSection(
        channels=(8, 16),
        downsample=4,
        levels=(5, 5),
        input_patch=1,
        steps=17,
        batch_size=3,
        lr=0.01,
        perceptual_weight=0.5,
        foreground_weight=2.0,
        perceptual_frames=2,
    )
    return [load_video_config(path).tokenizer, odd]


@pytest.mark.parametrize("path", sorted((REPO / "configs" / "video").glob("*.yaml")), ids=str)
def test_tokenizer_settings_and_shape_are_the_old_copy(path: Path) -> None:
    from rlvr_world.video.tokenizer import TokenizerConfig
    from rlvr_world.video.train_tokenizer import TrainSettings

    cfg = load_video_config(path)
    for t in tokenizer_sections(path):
        assert t.to(TrainSettings, seed=cfg.run.seed) == TrainSettings(
            steps=t.steps,
            batch_size=t.batch_size,
            lr=t.lr,
            perceptual_weight=t.perceptual_weight,
            perceptual_frames=t.perceptual_frames,
            foreground_weight=t.foreground_weight,
            seed=cfg.run.seed,
        )
        assert t.to(TokenizerConfig, image_size=cfg.data.image_size) == TokenizerConfig(
            image_size=cfg.data.image_size,
            channels=t.channels,
            downsample=t.downsample,
            levels=t.levels,
            input_patch=t.input_patch,
        )


@pytest.mark.parametrize(
    "i",
    [
        VideoIdm(),
        VideoIdm(train=True, steps=9, batch_size=5, lr=0.3, every_offset=False, time_limit_s=2.5),
    ],
    ids=["default", "odd"],
)
def test_idm_train_settings_are_the_old_copy(i: VideoIdm) -> None:
    from rlvr_world.apps.video import idm_train

    assert i.to(idm_train.TrainSettings, seed=4, device="cpu") == idm_train.TrainSettings(
        steps=i.steps,
        batch_size=i.batch_size,
        lr=i.lr,
        seed=4,
        device="cpu",
        every_offset=i.every_offset,
        time_limit_s=i.time_limit_s,
    )


# --- apps.run.grpo --------------------------------------------------------------------------


def old_orchestrator(rl: Any, *, seed: int, **task: Any) -> Any:
    from rlvr_world.apps.orchestrator.config import OrchestratorConfig

    return OrchestratorConfig(
        group_size=rl.group_size,
        temperature=rl.temperature,
        max_inflight=rl.max_inflight,
        max_staleness=rl.max_staleness,
        drain_s=rl.drain_s,
        seed=seed,
        **task,
    )


@pytest.mark.parametrize("path", sorted((REPO / "configs" / "pipeline").glob("*.yaml")), ids=str)
def test_text_orchestrator_config_is_the_old_copy(path: Path) -> None:
    rl = load_pipeline_config(path).rl
    odd = TextRl(
        group_size=3, temperature=0.3, max_inflight=7, max_staleness=2, drain_s=1.5, max_tokens=77
    )
    for section in (rl, odd):
        task: dict[str, Any] = {
            "max_tokens": section.max_tokens,
            "variant": section.reward_variant,
            "reward_type": section.reward_type or "",
        }
        assert orchestrator_config(section, seed=5, **task) == old_orchestrator(
            section, seed=5, **task
        )
        # TextRl's max_tokens and reward_type are the caller's to pass, not taken from it
        bare = orchestrator_config(section, seed=5)
        assert bare == old_orchestrator(section, seed=5)
        assert bare.max_tokens == 128 and bare.reward_type is None


def test_video_orchestrator_config_is_the_old_copy() -> None:
    rl = VideoRl(group_size=3, temperature=0.3, max_inflight=7, max_staleness=2, drain_s=1.5)
    task = {"max_tokens": 16, "ignore_eos": True, "allowed_tokens": (0, 9)}
    assert orchestrator_config(rl, seed=2, **task) == old_orchestrator(rl, seed=2, **task)


# --- apps.pipeline.sft_phase -----------------------------------------------------------------


@pytest.mark.parametrize(
    "budget",
    [{}, {"epochs": 1, "lr": 0.1, "schedule": "cosine", "max_steps": 5, "warmup_steps": 0}],
    ids=["warm-up", "control"],
)
@pytest.mark.parametrize("path", sorted((REPO / "configs" / "pipeline").glob("*.yaml")), ids=str)
def test_sft_phase_config_and_log_are_the_old_copy(
    path: Path, budget: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import trainer.sft
    from rlvr_world.apps.pipeline.sft_phase import run_sft_phase
    from rlvr_world.apps.pipeline.tasks import task_of
    from rlvr_world.devices import Placement
    from trainer.sft import SftConfig, SftResult

    cfg = load_pipeline_config(path)
    placement = Placement("cpu", "fp32")
    seen: list[SftConfig] = []
    result = SftResult(tmp_path, 3, 1.5, [2.0, 1.0], [2.5], 1, "cpu", "fp32")

    def fake_run_sft(model: Path, pairs: Any, out: Path, sft_cfg: SftConfig, **_: Any) -> Any:
        seen.append(sft_cfg)
        return result

    monkeypatch.setattr(trainer.sft, "run_sft", fake_run_sft)
    log = JsonlLog(tmp_path / "log.jsonl")
    run_sft_phase(cfg, placement, tmp_path, ([], []), tmp_path / "sft", log=log, **dict(budget))
    log.close()

    s, old_budget = cfg.sft, dict(budget)
    old_budget.setdefault("max_length", task_of(cfg).sft_max_length(cfg))
    assert seen == [
        SftConfig(
            epochs=old_budget.pop("epochs", s.epochs),
            lr=old_budget.pop("lr", s.lr),
            batch_size=s.batch_size,
            torch_threads=s.torch_threads,
            share_prompts=s.share_prompts,
            group_rows=s.group_rows,
            seed=cfg.run.seed,
            schedule=old_budget.pop("schedule", s.schedule),
            device=placement.device,
            precision=placement.precision,
            **old_budget,
        )
    ]
    (line,) = (tmp_path / "log.jsonl").read_text().splitlines()
    written = json.loads(line)
    del written["time"]
    old_fields = {
        "steps": result.steps,
        "seconds": result.seconds,
        "losses": result.losses,
        "heldout_losses": result.heldout_losses,
        "heldout_left_out": result.heldout_left_out,
        "device": result.device,
        "precision": result.precision,
    }
    assert list(written.items()) == list({"event": "sft", **old_fields}.items())  # order too
