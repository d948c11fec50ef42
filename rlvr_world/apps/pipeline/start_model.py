"""``rlvr-world model start CONFIG OUT``: the start model of a language run, as a folder.

A deployment (docker compose, Kubernetes) serves and trains the policy in ``models/policy``. For
a run config this writes the model ``rlvr-world run`` would start GRPO from: the config's items
(``run.seed``), its tiny model built from them (or ``model.path``), and SFT as its ``sft``
section says, saved with its tokenizer as the folder the rollout and decoder services and the
trainer load. The folder is written beside ``OUT`` and moved into place when complete; an
``OUT`` that exists and is not empty is refused unless ``force``. Work files (items, logs) go to
a temporary run directory that is removed afterwards.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from rlvr_world.apps.pipeline.config import PipelineConfig
from rlvr_world.apps.pipeline.runner import PipelineRun


class StartModelRefused(ValueError):
    """``OUT`` is not free to write."""


def write_start_model(cfg: PipelineConfig, out: Path, *, force: bool = False) -> Path:
    """The config's start model (module docstring) in ``out``; returns ``out``."""
    out = out.resolve()
    if out.exists() and (not out.is_dir() or any(out.iterdir())) and not force:
        raise StartModelRefused(f"{out} exists and is not an empty folder (--force replaces it)")
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".start-", dir=out.parent) as work:
        run_dir = Path(work) / "run"
        run = PipelineRun(
            cfg.model_copy(update={"run": cfg.run.model_copy(update={"run_dir": run_dir})})
        )
        try:
            _, _, model = run.prepare()
        finally:
            run.log.close()
        staged = Path(work) / "model"
        shutil.copytree(model, staged)
        if out.exists():
            shutil.rmtree(out) if out.is_dir() else out.unlink()
        staged.rename(out)
    return out
