"""Phase 2 of the video run and what every later phase shares.

``tokenizer_dir`` trains the video tokenizer (per-frame FSQ, or the compressive one on the train
clips) on the train episodes (or returns ``tokenizer.path``); ``build_setup`` loads it and builds
the frozen ``VideoSetup``: the layout vocabulary, the action quantizer, the train, validation
and held-out clips and their token sequences, the simulator states of each clip's predicted
frames where the episodes have them (PushT: ``clip_states``), and the perceptual scorer of the
evaluations. The
held-out clips depend on the data alone (``data.seed``), never on ``run.seed`` or the sampling
seed, so every seed of a run and every run of a data set is scored on the same clips.

It does not train the world model and does not evaluate.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from rlvr_world.apps.video.config import VideoPipelineConfig
from rlvr_world.apps.video.episodes import action_ranges, clip_pairs, spread
from rlvr_world.apps.video.idm_phase import load_reader
from rlvr_world.video.layout import LayoutVocab, MultiStepVocab, SingleStepVocab

if TYPE_CHECKING:
    from rlvr_world.rewards.video import PerceptualScorer
    from rlvr_world.rewards.video_action import ActionReader
    from rlvr_world.video.actions import ActionQuantizer
    from rlvr_world.video.codec import VideoTokenizer
    from rlvr_world.video.data import ClipArrays, Episode, States
    from rlvr_world.video.layout import TokenSequence
    from rlvr_world.video.tokenizer import FrameTokenizer


@dataclass(frozen=True)
class EvalSet:
    """Clips a model is evaluated on: the clips, their token sequences and their predicted
    frames' states (None without states)."""

    clips: list[ClipArrays]
    sequences: list[TokenSequence]
    states: list[States] | None


@dataclass(frozen=True)
class VideoSetup:
    """What the phases after the tokenizer share, built once by ``build_setup``."""

    tokenizer_dir: Path
    #: Either video tokenizer (``rlvr_world.video.codec``); ``per_frame`` for single-step code.
    frame_tokenizer: VideoTokenizer
    vocab: LayoutVocab
    quantizer: ActionQuantizer
    train_clips: list[ClipArrays]
    #: The held-out clips every model is evaluated on (``eval.clips`` of them, seeded).
    test_clips: list[ClipArrays]
    #: Clips of the validation episodes the sampling is tuned on (empty without them).
    val_clips: list[ClipArrays]
    train_sequences: list[TokenSequence]
    test_sequences: list[TokenSequence]
    val_sequences: list[TokenSequence]
    #: The perceptual scorer of the evaluations (``eval.perceptual``): the same for every model.
    perceptual: PerceptualScorer
    #: Per clip, the simulator state ``(T, 5)`` after each predicted frame (``clip_states``),
    #: in the order of the clips above; None where the episodes have no states (not PushT).
    train_states: list[States] | None = None
    test_states: list[States] | None = None
    val_states: list[States] | None = None
    #: The run's inverse-dynamics model (``idm`` section): its folder and the loaded reader the
    #: evaluations read the predicted frames' actions with; None without one.
    idm_dir: Path | None = None
    reader: ActionReader | None = None

    @property
    def tokens_per_frame(self) -> int:
        """Tokens of one predicted frame (the compressive tokenizer's dynamics tokens)."""
        from rlvr_world.video.codec import dynamics_tokens_per_frame

        return dynamics_tokens_per_frame(self.frame_tokenizer)

    @property
    def token_counts(self) -> dict[str, Any]:
        """The tokenizer's kind, tokens per predicted frame and tokens of the context frame."""
        from rlvr_world.video.compressive import CompressiveTokenizer

        tok = self.frame_tokenizer
        ctx = (
            tok.context_tokens_per_frame
            if isinstance(tok, CompressiveTokenizer)
            else tok.tokens_per_frame
        )
        return {
            "tokenizer": "compressive" if self.compressive else "frame",
            "tokens_per_frame": self.tokens_per_frame,
            "context_tokens": int(ctx),
        }

    @property
    def compressive(self) -> bool:
        """Predicted frames decode against the context frame's tokens."""
        from rlvr_world.video.compressive import CompressiveTokenizer

        return isinstance(self.frame_tokenizer, CompressiveTokenizer)

    @property
    def context_vocab(self) -> MultiStepVocab | None:
        """The multi-step vocabulary when predicted frames decode against the context frame's
        tokens (the compressive tokenizer: RL items then carry them), else ``None``."""
        return self.vocab if self.compressive and isinstance(self.vocab, MultiStepVocab) else None

    @property
    def per_frame(self) -> FrameTokenizer:
        """The per-frame tokenizer (what the single-step code decodes with)."""
        from rlvr_world.video.codec import per_frame

        return per_frame(self.frame_tokenizer, "the single-step layout")


def encode(
    clips: Sequence[ClipArrays],
    frame_tokenizer: VideoTokenizer,
    quantizer: ActionQuantizer,
    vocab: LayoutVocab,
    segment_frames: int,
    *,
    hold_below: int | None = None,
) -> list[TokenSequence]:
    """The clips' token sequences in the layout of ``vocab`` (``segment_frames``: multi-step;
    ``hold_below``: single-step, ``train_mle.encode_clips``)."""
    if not clips:
        return []
    if isinstance(vocab, MultiStepVocab):
        from rlvr_world.video.multistep import encode_multistep_clips

        return encode_multistep_clips(clips, frame_tokenizer, quantizer, vocab, segment_frames)
    from rlvr_world.video.codec import per_frame
    from rlvr_world.video.train_mle import encode_clips

    tokenizer = per_frame(frame_tokenizer, "the single-step layout")
    return encode_clips(clips, tokenizer, quantizer, vocab, hold_below=hold_below)


def tokenizer_dir(
    cfg: VideoPipelineConfig, run_dir: Path, train: Sequence[Episode], test: Sequence[Episode]
) -> tuple[Path, dict[str, float]]:
    """``tokenizer.path``, or a tokenizer trained into ``run_dir/tokenizer`` (seeded by
    ``run.seed``) and its held-out metrics."""
    t = cfg.tokenizer
    if t.path is not None:
        return t.path, {}
    from rlvr_world.video.tokenizer import TokenizerConfig
    from rlvr_world.video.train_tokenizer import TrainSettings, train_compressive, train_tokenizer

    out = run_dir / "tokenizer"
    settings = t.to(TrainSettings, seed=cfg.run.seed)
    if t.kind == "compressive":  # trained on the run's own multi-step clips (context + frames)
        from rlvr_world.apps.video.config import compressive_config

        def stacked(episodes: Sequence[Episode], seed: int) -> np.ndarray:
            return np.stack([frames for frames, _ in run_clips(cfg, episodes, seed)])

        metrics = train_compressive(
            stacked(train, cfg.data.seed),
            compressive_config(cfg),
            t.steps,
            out,
            eval_clips=stacked(test, cfg.data.seed + 1),
            settings=settings,
            device=cfg.run.device,
        )
        return out, {k: float(v) for k, v in metrics.items() if isinstance(v, int | float)}
    shape = t.to(TokenizerConfig, image_size=cfg.data.image_size)
    metrics = train_tokenizer(
        np.concatenate([e.frames for e in train]),
        shape,
        t.steps,
        out,
        eval_frames=np.concatenate([e.frames for e in test]),
        settings=settings,
        device=cfg.run.device,
    )
    return out, {k: float(v) for k, v in metrics.items() if isinstance(v, int | float)}


def run_clips(cfg: VideoPipelineConfig, episodes: Sequence[Episode], seed: int) -> list[ClipArrays]:
    """Every window of ``model.clip_frames`` frames, or with ``model.context_range`` the
    multi-step clips whose context frame is drawn at random (``context_clip_pairs``)."""
    m = cfg.model
    if m.context_range is None:
        return clip_pairs(episodes, m.clip_frames)
    from rlvr_world.video.multistep import context_clip_pairs

    return context_clip_pairs(episodes, m.segment_frames, m.context_range, seed)


def predicted_rows(cfg: VideoPipelineConfig) -> tuple[slice, slice]:
    """Which rows of a clip the model predicts: ``(frames, actions)`` slices. Single-step: the
    last frame and the action leading to it; multi-step: frames ``2..S`` (``d2..dS``) and
    actions ``1..S-1``, each leading to one of them. The frame before the first predicted one
    is ``frames[rows.start - 1]``."""
    if cfg.model.layout == "multi_step":
        steps = cfg.model.segment_frames
        return slice(2, steps + 1), slice(1, steps)
    last = cfg.model.clip_frames - 1
    return slice(last, last + 1), slice(last - 1, last)


def clip_states(cfg: VideoPipelineConfig, episodes: Sequence[Episode]) -> list[States] | None:
    """The simulator state after each predicted frame ``(T, 5)`` of every clip ``run_clips``
    cuts from ``episodes``, in the same order; None when an episode has no states. (The
    multi-step clips of ``model.context_range`` draw their context frame at random, but their
    predicted frames are those of the contiguous window with the same start: the same rows.)"""
    from rlvr_world.video.data import clips

    if not episodes or any(e.states is None for e in episodes):
        return None
    rows, _ = predicted_rows(cfg)
    out = []
    for clip in clips(episodes, cfg.model.clip_frames):
        assert clip.states is not None  # every episode has states
        out.append(np.ascontiguousarray(clip.states[rows]))
    return out


def build_setup(
    cfg: VideoPipelineConfig,
    train: Sequence[Episode],
    val: Sequence[Episode],
    test: Sequence[Episode],
    tokenizer: Path,
    *,
    idm: Path | None = None,
) -> VideoSetup:
    """The video tokenizer in ``tokenizer`` (of ``tokenizer.kind``), the vocabulary and action
    quantizer, the clips encoded into token sequences and their states, the evaluations'
    perceptual scorer, and the IDM in ``idm`` (loaded on ``run.device``)."""
    from rlvr_world.rewards.perceptual import make_perceptual
    from rlvr_world.video.actions import ActionQuantizer
    from rlvr_world.video.codec import codebook_sizes, load_video_tokenizer
    from rlvr_world.video.data import all_actions
    from rlvr_world.video.multistep import multistep_vocab

    frame_tokenizer = load_video_tokenizer(
        tokenizer, device=cfg.run.device, expect=cfg.tokenizer.kind
    )
    vocab: LayoutVocab = (
        multistep_vocab(frame_tokenizer, cfg.model.action_bins)
        if cfg.model.layout == "multi_step"
        else SingleStepVocab(
            visual_codes=codebook_sizes(frame_tokenizer)[0], action_bins=cfg.model.action_bins
        )
    )
    ranges = action_ranges(cfg.data)
    if ranges is not None:  # the action space's own bounds, as RT-1's dataset ranges
        quantizer = ActionQuantizer(ranges, cfg.model.action_bins)
    else:
        quantizer = ActionQuantizer.from_actions(all_actions(train), cfg.model.action_bins)
    d, e = cfg.data, cfg.eval
    train_clips = run_clips(cfg, train, d.seed)
    test_clips = spread(run_clips(cfg, test, d.seed + 1), e.clips, d.seed)
    val_clips = spread(run_clips(cfg, val, d.seed + 2), e.validation_clips, d.seed) if val else []
    # the states are cut in run_clips' order and drawn by the same spread (same count and seed)
    train_states, test_states = clip_states(cfg, train), clip_states(cfg, test)
    val_states = clip_states(cfg, val) if val else None
    segments = cfg.model.segment_frames

    def enc(clips: Sequence[ClipArrays]) -> list[TokenSequence]:
        return encode(
            clips, frame_tokenizer, quantizer, vocab, segments, hold_below=cfg.tokenizer.hold_below
        )

    return VideoSetup(
        tokenizer_dir=tokenizer,
        frame_tokenizer=frame_tokenizer,
        vocab=vocab,
        quantizer=quantizer,
        train_clips=train_clips,
        test_clips=test_clips,
        val_clips=val_clips,
        train_sequences=enc(train_clips),
        test_sequences=enc(test_clips),
        val_sequences=enc(val_clips),
        perceptual=make_perceptual(e.perceptual_metric(), e.net, device=cfg.run.device),
        train_states=train_states,
        test_states=None if test_states is None else spread(test_states, e.clips, d.seed),
        val_states=None if val_states is None else spread(val_states, e.validation_clips, d.seed),
        idm_dir=idm,
        reader=None if idm is None else load_reader(idm, cfg.run.device),
    )
