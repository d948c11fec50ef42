"""Configuration of ``rlvr-world run CONFIG`` for ``task: web_mpc`` (``rlvr_world.apps.mpc.web``).

``models``: the language world models of ``rlvr-world run configs/pipeline/web_miniwob.yaml``:
``base`` is a model folder with its tokenizer (the run's SFT start, ``model/base``), ``rlvr`` a
model folder or a trainer checkpoint (``trainer/checkpoints/latest``), whose weights are loaded
into the base's architecture and tokenizer. ``models.build_tiny`` (smoke configs) builds two
tiny random language models there when they are missing: plumbing only.
``tasks``: MiniWoB++ task names and how many seeds (episodes) each. ``planners``: a subset of
``greedy`` (no world model: the current page's element text), ``random``, ``base``, ``rlvr``.
Every field has bounds; unknown fields are refused.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar, Literal, Self

from pydantic import Field, model_validator

from rlvr_world.apps.mpc.config import PlannerRun
from rlvr_world.apps.run.configfile import Section, read_config
from rlvr_world.devices import DeviceName, TorchThreads

WEB_PLANNERS = ("greedy", "random", "base", "rlvr")


class WebModelsSection(Section):
    base: Path = Field(description="the base (SFT) language world model folder, with tokenizer")
    rlvr: Path = Field(description="the RLVR model folder or a trainer's checkpoints/latest")
    max_tokens: int = Field(default=160, ge=1, le=4096, description="tokens per prediction")
    torch_threads: TorchThreads = 1
    build_tiny: bool = Field(default=False, description="smoke: build tiny random models if absent")
    device: DeviceName = Field(
        default="auto",
        description="the language world models' device (rlvr_world.devices): auto (CUDA where "
        "torch sees a GPU), cpu, cuda or cuda:N",
    )


class WebTasksSection(Section):
    names: tuple[str, ...] = Field(min_length=1, description="MiniWoB++ task names")
    seeds: int = Field(default=20, ge=1, le=10_000, description="episodes per task")
    seed: int = Field(default=5000, ge=0, description="page seeds are '<seed>+i/<task>'")
    max_steps: int = Field(default=4, ge=1, le=50, description="actions per episode")
    max_tree_chars: int = Field(default=4000, ge=100, le=1_000_000)
    html_root: Path | None = Field(default=None, description="None: the miniwob package's pages")

    @model_validator(mode="after")
    def _unique(self) -> Self:
        if len(set(self.names)) != len(self.names):
            raise ValueError(f"tasks.names: names must be unique, got {list(self.names)}")
        return self


class WebPlannerSection(Section):
    candidates: int = Field(default=8, ge=1, le=256, description="actions predicted per step")


class WebBrowserSection(Section):
    executable: Path = Path("/usr/bin/chromium")
    step_ms: int = Field(default=1000, ge=0, le=60_000, description="page time after an action")
    settle_s: float = Field(default=0.1, ge=0.0, le=10.0)
    call_timeout_s: float = Field(default=30.0, gt=0.0, le=600.0)


class WebRunSection(PlannerRun):
    """``run`` of web MPC (planners: greedy, random, base, rlvr)."""

    KNOWN: ClassVar[tuple[str, ...]] = WEB_PLANNERS

    planners: tuple[str, ...] = Field(default=WEB_PLANNERS, description="a subset of KNOWN")


class WebMpcConfig(Section):
    task: Literal["web_mpc"]
    models: WebModelsSection
    tasks: WebTasksSection
    planner: WebPlannerSection = WebPlannerSection()
    browser: WebBrowserSection = WebBrowserSection()
    run: WebRunSection


def load_web_mpc_config(path: Path, overrides: dict[str, Any] | None = None) -> WebMpcConfig:
    """Read ``path`` (YAML), apply ``section.field`` overrides, validate."""
    return WebMpcConfig.model_validate(read_config(path, overrides))
