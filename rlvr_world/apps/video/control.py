"""Phase 5 of the video run (the control): MLE continued from the start's checkpoint for the
RLVR phase's budget (``baseline.budget``: its wall time, the sequences GRPO trained, or its
optimizer steps; ``control_budget`` reads the last two from the trainer's log), at
``baseline.lr`` with a constant schedule, on the same train sequences; its loss log and
checkpoint go under the seed's folder. ``VideoRun.baseline`` records the outcome; this module
does not evaluate.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from rlvr_world.apps.video.config import VideoPipelineConfig
from rlvr_world.devices import module_device

if TYPE_CHECKING:
    from rlvr_world.apps.video.setup import VideoSetup
    from rlvr_world.video.train_mle import MLEResult


def control_budget(cfg: VideoPipelineConfig, trainer_log: Path, seconds: float) -> dict[str, Any]:
    """The control's budget: ``kind`` (``baseline.budget``), the RL phase's ``budget_s``,
    ``grpo_steps`` and ``trained_sequences`` (from ``trainer_log``), and ``max_steps`` (MLE
    steps: GRPO's steps, or its sequences over ``mle.batch_size``; None for ``wall_time``)."""
    from rlvr_world.apps.run.grpo import train_steps

    steps = train_steps(trainer_log)
    trained = int(sum(s.get("samples_trained", 0) for s in steps))
    kind = cfg.baseline.budget
    max_steps = None
    if kind == "steps":
        max_steps = max(1, len(steps))
    elif kind == "samples":
        max_steps = max(1, -(-trained // cfg.mle.batch_size))
    return {
        "kind": kind,
        "budget_s": seconds,
        "grpo_steps": len(steps),
        "trained_sequences": trained,
        "max_steps": max_steps,
    }


def continue_mle(
    cfg: VideoPipelineConfig,
    s: VideoSetup,
    mle_dir: Path,
    *,
    budget: dict[str, Any],
    seed: int,
    out_dir: Path,
) -> tuple[Path, MLEResult, str]:
    """Continue MLE from ``mle_dir`` for ``budget`` (``control_budget``: its ``max_steps``, or
    its ``budget_s`` seconds for ``wall_time``), seeded by ``seed``, on ``run.device``; the
    checkpoint in ``out_dir/model/mle_continued``, the training result and the device it
    trained on."""
    import torch

    from rlvr_world.video.train_mle import MLEConfig, save_checkpoint, train_mle
    from rlvr_world.video.world_model import load_world_model

    torch.set_num_threads(cfg.mle.torch_threads)
    model, spec = load_world_model(mle_dir, device=cfg.run.device)
    mle = MLEConfig(
        steps=cfg.mle.steps + 10_000_000,
        time_budget_s=budget["budget_s"] if budget["max_steps"] is None else None,
        batch_size=cfg.mle.batch_size,
        lr=cfg.baseline.lr,
        schedule="constant",
        warmup_steps=0,
        seed=seed + 1,
        log_every=100,
    )
    result = train_mle(
        model,
        s.train_sequences,
        mle,
        pad_id=s.vocab.pad,
        log_path=out_dir / "mle_continued_log.jsonl",
        resume=mle_dir,
        max_new_steps=budget["max_steps"],
    )
    path = save_checkpoint(out_dir / "model" / "mle_continued", model, spec, result)
    return path, result, module_device(model)
