"""Phase 3 of the video run (the start): MLE pre-training of the world model, or a saved one.

``train_start`` builds the LLaMA-style transformer over the run's vocabulary, trains it with
teacher forcing on the train sequences (``rlvr_world.video.train_mle``) and saves it to
``<run_dir>/model/mle`` with its ``video.json`` (vocabulary, tokens per frame, context, action
quantizer, and what the planners and analyses read back: the frame tokenizer, the layout, the
action form and ``frame_skip``). ``check_saved`` checks a given ``mle.path`` against the run.
``VideoRun.mle`` records the outcome; this module does not evaluate.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from rlvr_world.apps.video.config import VideoPipelineConfig

if TYPE_CHECKING:
    from torch import nn

    from rlvr_world.apps.video.setup import VideoSetup
    from rlvr_world.video.train_mle import MLEResult


def train_start(
    cfg: VideoPipelineConfig, s: VideoSetup, run_dir: Path
) -> tuple[Path, MLEResult, nn.Module]:
    """Train the start model (module docstring); its folder, the training result and the
    model (on ``run.device``)."""
    import torch

    from rlvr_world.video.train_mle import MLEConfig, save_checkpoint, train_mle
    from rlvr_world.video.world_model import WorldModelSpec, build_world_model

    m, c, seed = cfg.mle, cfg.model, cfg.run.seed
    multi = c.layout == "multi_step"
    torch.set_num_threads(m.torch_threads)
    length = len(s.train_sequences[0].input_ids)
    model = build_world_model(
        s.vocab,
        hidden=c.hidden,
        layers=c.layers,
        heads=c.heads,
        max_len=length + 8,
        seed=c.seed + seed,
    )
    model.to(cfg.run.device)  # type: ignore[arg-type]
    mcfg = MLEConfig(steps=m.steps, batch_size=m.batch_size, lr=m.lr, log_every=100, seed=seed)
    result = train_mle(
        model, s.train_sequences, mcfg, pad_id=s.vocab.pad, log_path=run_dir / "mle_log.jsonl"
    )
    spec = WorldModelSpec(
        vocab=s.vocab,
        tokens_per_frame=s.tokens_per_frame,
        context_length=1 if multi else c.context_length,
        action_quantizer=s.quantizer.to_dict(),
        extra={
            "frame_tokenizer": str(s.tokenizer_dir),
            "layout": c.layout,
            "actions": cfg.data.actions,
            "frame_skip": cfg.data.frame_skip,
            **({"segment_frames": c.segment_frames} if multi else {}),
        },
    )
    return save_checkpoint(run_dir / "model" / "mle", model, spec, result), result, model


def check_saved(cfg: VideoPipelineConfig, s: VideoSetup, path: Path) -> None:
    """``ValueError`` when the world model in ``mle.path`` does not fit this run's vocabulary,
    frame size, context, action form or frame skip."""
    from rlvr_world.video.world_model import read_spec

    spec = read_spec(path)
    context = 1 if cfg.model.layout == "multi_step" else cfg.model.context_length
    if (spec.vocab, spec.tokens_per_frame, spec.context_length) != (
        s.vocab,
        s.tokens_per_frame,
        context,
    ):
        raise ValueError(
            f"mle.path {path}: its vocabulary, {spec.tokens_per_frame} tokens per frame or "
            f"{spec.context_length} context frames do not match this run's tokenizer and "
            f"model settings ({s.tokens_per_frame} tokens per frame, {context} context frames)"
        )
    actions = spec.extra.get("actions", "absolute")
    if actions != cfg.data.actions:
        raise ValueError(
            f"mle.path {path}: the model reads {actions} actions, this run's data.actions is "
            f"{cfg.data.actions}"
        )
    skip = spec.extra.get("frame_skip")
    if skip is not None and skip != cfg.data.frame_skip:
        raise ValueError(
            f"mle.path {path}: the model steps {skip} simulator steps at a time, this run's "
            f"data.frame_skip is {cfg.data.frame_skip}"
        )
