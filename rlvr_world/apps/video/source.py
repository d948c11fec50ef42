"""The finished ``task: video`` run an analysis reads (``task: video_best_of_k``,
``task: video_sweep``): where it is and how its config is rebuilt.

A video run writes its resolved config (overrides applied) to ``<run_dir>/config.json``; runs
written before that need ``source.config`` (the YAML) and any ``source.overrides`` they were
given. Either way ``run.run_dir`` becomes the source folder, so the run's recorded episodes,
tokenizer and models are found there.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import Field

from rlvr_world.apps.run.configfile import Section
from rlvr_world.apps.video.config import VideoPipelineConfig, load_video_config


class SourceSection(Section):
    """The finished ``task: video`` run an analysis reads."""

    run_dir: Path = Field(description="the run's folder (run.run_dir of its config)")
    config: Path | None = Field(
        default=None,
        description="the run's YAML, for runs without config.json (its run.run_dir is replaced "
        "by run_dir; other overrides the run was given must be repeated in overrides)",
    )
    overrides: dict[str, Any] = Field(
        default_factory=dict, description="section.field overrides of config (no config.json)"
    )
    seed: int = Field(default=0, ge=0, description="whose RLVR checkpoint: seed<seed>/trainer")


def source_config(src: SourceSection) -> VideoPipelineConfig:
    """The source run's resolved config: its ``config.json``, else ``source.config`` with
    ``source.overrides``; ``run.run_dir`` set to the source folder. ``FileNotFoundError`` names
    what is missing; ``ValueError`` when both a ``config.json`` and ``source.config`` are there."""
    if not src.run_dir.is_dir():
        raise FileNotFoundError(
            f"source.run_dir {src.run_dir}: no such folder; run the video config first "
            "(rlvr-world run configs/video/...) or point source.run_dir at a finished run"
        )
    saved = src.run_dir / "config.json"
    if saved.is_file():
        if src.config is not None or src.overrides:
            raise ValueError(
                f"source.config: {saved} holds the run's resolved config; leave source.config "
                "and source.overrides unset"
            )
        video = VideoPipelineConfig.model_validate_json(saved.read_text())
    elif src.config is None:
        raise FileNotFoundError(
            f"{saved}: missing (a run written before runs saved their config); set "
            "source.config to the YAML the run used"
        )
    else:
        video = load_video_config(src.config, src.overrides)
    update = {"run": video.run.model_copy(update={"run_dir": src.run_dir})}
    return video.model_copy(update=update)
