"""Tiny random world models for the smoke configs (``models.build_tiny``): plumbing only.

``ensure_tiny_models`` writes, where the configured folders are missing, a random 64x64 frame
tokenizer (8x8 tokens, 9 codes), a random one-layer world model in the MLE folder layout
(``video.json`` naming the tokenizer) and a second one in the trainer's checkpoint layout
(``checkpoints/step_*`` + ``latest`` pointer, no ``video.json``), so a smoke run loads both
exactly as it loads the real models. Untrained: they predict nothing useful and the smoke
numbers measure nothing; the full configs name the trained models.
"""

from __future__ import annotations

import logging

from rlvr_world.apps.mpc.config import ModelsSection

logger = logging.getLogger(__name__)

#: 64x64 frames, 8x8 tokens, 9 codes.
TINY_TOKENIZER = {"image_size": 64, "channels": (8, 16, 16), "downsample": 8, "levels": (3, 3)}
TINY_MODEL = {"hidden": 32, "layers": 1, "heads": 2, "max_len": 160}


def ensure_tiny_models(m: ModelsSection) -> None:
    """Build the tiny models at ``m.base`` / ``m.rlvr`` (+ ``m.tokenizer``) where absent."""
    from rlvr_world.mpc.dynamics import resolve_checkpoint
    from rlvr_world.video.actions import ActionQuantizer
    from rlvr_world.video.layout import SingleStepVocab
    from rlvr_world.video.tokenizer import FrameTokenizer, TokenizerConfig
    from rlvr_world.video.world_model import build_world_model, save_world_model

    if m.base.exists() and resolve_checkpoint(m.rlvr).exists():
        return
    tok_dir = m.tokenizer or m.base.parent / "tokenizer"
    tok = FrameTokenizer(TokenizerConfig.model_validate(TINY_TOKENIZER))
    if not (tok_dir / "config.json").is_file():
        tok.save(tok_dir)
    vocab = SingleStepVocab(visual_codes=tok.codebook_size, action_bins=256)
    quantizer = ActionQuantizer([[0.0, 512.0], [0.0, 512.0]], 256).to_dict()
    base = build_world_model(vocab, seed=0, **TINY_MODEL)
    save_world_model(
        base,
        vocab,
        m.base,
        tokens_per_frame=tok.tokens_per_frame,
        context_length=1,
        action_quantizer=quantizer,
        extra={"frame_tokenizer": str(tok_dir), "layout": "single_step"},
    )
    rlvr = build_world_model(vocab, seed=1, **TINY_MODEL)
    if m.rlvr.name == "latest":
        step = m.rlvr.parent / "step_00000001"
        rlvr.save_pretrained(step, safe_serialization=True)
        m.rlvr.write_text(step.name + "\n")
    else:
        rlvr.save_pretrained(m.rlvr, safe_serialization=True)
    logger.info("built tiny random models at %s and %s", m.base, m.rlvr)
