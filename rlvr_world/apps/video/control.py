"""Phase 5 of the video run (the control): MLE continued from the start's checkpoint for the
wall time the RLVR phase took, at ``baseline.lr`` with a constant schedule, on the same train
sequences; its loss log and checkpoint go under the seed's folder. ``VideoRun.baseline`` records
the outcome; this module does not evaluate.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from rlvr_world.apps.video.config import VideoPipelineConfig
from rlvr_world.devices import module_device

if TYPE_CHECKING:
    from rlvr_world.apps.video.setup import VideoSetup
    from rlvr_world.video.train_mle import MLEResult


def continue_mle(
    cfg: VideoPipelineConfig,
    s: VideoSetup,
    mle_dir: Path,
    *,
    seconds: float,
    seed: int,
    out_dir: Path,
) -> tuple[Path, MLEResult, str]:
    """Continue MLE from ``mle_dir`` for ``seconds`` (seeded by ``seed``) on ``run.device``; the
    checkpoint in ``out_dir/model/mle_continued``, the training result and the device it
    trained on."""
    import torch

    from rlvr_world.video.train_mle import MLEConfig, save_checkpoint, train_mle
    from rlvr_world.video.world_model import load_world_model

    torch.set_num_threads(cfg.mle.torch_threads)
    model, spec = load_world_model(mle_dir, device=cfg.run.device)
    mle = MLEConfig(
        steps=cfg.mle.steps + 10_000_000,
        time_budget_s=seconds,
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
    )
    path = save_checkpoint(out_dir / "model" / "mle_continued", model, spec, result)
    return path, result, module_device(model)
