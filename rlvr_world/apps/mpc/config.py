"""Configuration of ``rlvr-world run CONFIG`` for ``task: mpc`` and ``task: policy_eval``.

Both read the two world models from ``models`` (paths are config values: the MLE model, the
RLVR checkpoint, the ``video.json`` to use for checkpoints that have none, the frame tokenizer).
``models.build_tiny`` makes the smoke configs self-contained: when the model folders are
missing it builds a tiny random tokenizer and two tiny random world models there
(``rlvr_world.apps.mpc.tiny``), which checks the plumbing and measures nothing.
Every field has bounds; unknown fields are refused.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar, Literal, Self

from pydantic import Field, model_validator

from rlvr_world.apps.run.configfile import Section, read_config
from rlvr_world.devices import DeviceName, TorchThreads
from rlvr_world.video.actions import FrameSkip
from rlvr_world.video.anchor import AnchorDilate

#: The planners of PushT MPC.
PLANNERS = ("oracle", "random", "base", "rlvr")


class PlannerRun(Section):
    """``run`` of a planning comparison (PushT MPC and policy evaluation here, web MPC in
    ``web_config``): where it writes, its seed, the bootstrap, which planners run (a non-empty
    subset of the class's ``KNOWN``) and ``summarize_only``."""

    KNOWN: ClassVar[tuple[str, ...]] = PLANNERS

    run_dir: Path = Field(description="where summary.json, report.md and episodes.jsonl go")
    seed: int = Field(default=0, ge=0, description="the run's seed (the random planner's too)")
    resamples: int = Field(default=10_000, ge=100, le=1_000_000, description="bootstrap")
    planners: tuple[str, ...] = Field(default=PLANNERS, description="a subset of KNOWN")
    summarize_only: bool = Field(
        default=False, description="no planning: summarise run_dir/episodes.jsonl"
    )

    @model_validator(mode="after")
    def _planners(self) -> Self:
        unknown = sorted(set(self.planners) - set(self.KNOWN))
        if unknown or not self.planners:
            raise ValueError(f"run.planners: expected a subset of {self.KNOWN}, got {unknown}")
        return self


class ModelsSection(Section):
    """The base (MLE) and RLVR world models and how they are run."""

    base: Path = Field(description="the MLE world model folder")
    rlvr: Path = Field(description="the RLVR model folder or a trainer's checkpoints/latest")
    spec: Path | None = Field(default=None, description="folder whose video.json to use")
    tokenizer: Path | None = Field(default=None, description="frame tokenizer folder")
    anchor_dilate: AnchorDilate = 0
    batch_size: int = Field(default=32, ge=1, le=4096, description="candidates decoded together")
    device: DeviceName = Field(
        default="auto",
        description="the world models' device (rlvr_world.devices): auto (CUDA where torch "
        "sees a GPU), cpu, cuda or cuda:N",
    )
    torch_threads: TorchThreads = 1
    frame_skip: FrameSkip | None = Field(
        default=None,
        description="simulator steps per model step (one planner or policy step); None: the "
        "models' video.json (1 where it records none: models saved before it did; a pusht_skip "
        "model of such a run needs 4 here)",
    )
    build_tiny: bool = Field(default=False, description="smoke: build tiny random models if absent")


class TasksSection(Section):
    """Start/goal pairs (``rlvr_world.mpc.episode.make_tasks``)."""

    episodes: int = Field(default=50, ge=1, le=100_000)
    goal_steps: int = Field(default=6, ge=1, le=1000, description="steps from start to goal")
    min_move: float = Field(default=20.0, ge=0.0, le=512.0, description="block motion, pixels")
    record_steps: int = Field(default=40, ge=2, le=10_000, description="steps per recording")
    seed: int = Field(default=1000, ge=0, description="recording seed (held out from training)")
    start: int = Field(
        default=0, ge=0, description="run tasks start..episodes-1 only (to split a run in shards)"
    )

    @model_validator(mode="after")
    def _window(self) -> Self:
        if self.goal_steps >= self.record_steps:
            raise ValueError("tasks.goal_steps: must be below tasks.record_steps")
        if self.start >= self.episodes:
            raise ValueError("tasks.start: must be below tasks.episodes")
        return self


class PlannerSection(Section):
    """Planner sizes (``rlvr_world.mpc.planner.PlannerConfig``) and the receding horizon."""

    kind: Literal["cem", "mppi"] = "cem"
    candidates: int = Field(default=12, ge=1, le=4096)
    horizon: int = Field(default=3, ge=1, le=100)
    iterations: int = Field(default=2, ge=1, le=100)
    elites: int = Field(default=3, ge=1, le=4096)
    init_std: float = Field(default=60.0, gt=0.0, le=512.0)
    min_std: float = Field(default=5.0, ge=0.0, le=512.0)
    temperature: float = Field(default=0.02, gt=0.0, le=100.0, description="MPPI")
    execute: int = Field(default=3, ge=1, le=100, description="actions executed per plan")
    replans: int = Field(default=2, ge=1, le=1000, description="plans per episode")

    @model_validator(mode="after")
    def _sizes(self) -> Self:
        if self.elites > self.candidates:
            raise ValueError("planner.elites: must not exceed planner.candidates")
        if self.execute > self.horizon:
            raise ValueError("planner.execute: must not exceed planner.horizon")
        return self


class SuccessSection(Section):
    position: float = Field(default=15.0, gt=0.0, le=512.0, description="pixels")
    angle: float = Field(default=0.3, gt=0.0, le=3.1416, description="radians")


class RunSection(PlannerRun):
    """``run`` of PushT MPC and policy evaluation (planners: oracle, random, base, rlvr)."""

    trajectory_planner: str = Field(default="rlvr", description="whose episode the PNG shows")


class MpcConfig(Section):
    task: Literal["mpc"]
    models: ModelsSection
    tasks: TasksSection = TasksSection()
    planner: PlannerSection = PlannerSection()
    success: SuccessSection = SuccessSection()
    run: RunSection


class PolicySpec(Section):
    """A PushT policy (``rlvr_world.video.pusht.make_policy``)."""

    name: str = Field(min_length=1, max_length=64)
    kind: Literal["noisy-scripted", "random"] = "noisy-scripted"
    noise: float = Field(default=8.0, ge=0.0, le=512.0, description="action noise, pixels")
    towards_goal_p: float = Field(default=1.0, ge=0.0, le=1.0)
    keep_direction_p: float = Field(default=0.0, ge=0.0, le=1.0)


class PolicyEvalSection(Section):
    """Closed-loop rollouts: ``episodes`` per policy of ``steps`` steps each."""

    episodes: int = Field(default=12, ge=1, le=100_000)
    steps: int = Field(default=30, ge=1, le=10_000)
    goal_radius: float = Field(default=60.0, gt=0.0, le=512.0, description="block centroid")
    start_distance: float = Field(
        default=100.0, ge=0.0, le=512.0, description="least start distance from the goal point"
    )
    seed: int = Field(default=2000, ge=0)


class PolicyEvalConfig(Section):
    task: Literal["policy_eval"]
    models: ModelsSection
    policies: tuple[PolicySpec, ...] = Field(min_length=2)
    eval: PolicyEvalSection = PolicyEvalSection()
    run: RunSection

    @model_validator(mode="after")
    def _names(self) -> Self:
        names = [p.name for p in self.policies]
        if len(set(names)) != len(names):
            raise ValueError(f"policies: names must be unique, got {names}")
        return self


def _load(path: Path, overrides: dict[str, Any] | None) -> dict[str, Any]:
    return read_config(path, overrides)


def load_mpc_config(path: Path, overrides: dict[str, Any] | None = None) -> MpcConfig:
    """Read ``path`` (YAML), apply ``section.field`` overrides, validate."""
    return MpcConfig.model_validate(_load(path, overrides))


def load_policy_eval_config(
    path: Path, overrides: dict[str, Any] | None = None
) -> PolicyEvalConfig:
    """Read ``path`` (YAML), apply ``section.field`` overrides, validate."""
    return PolicyEvalConfig.model_validate(_load(path, overrides))
