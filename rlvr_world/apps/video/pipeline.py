"""``rlvr-world run CONFIG`` with ``task: video``: the video world model from data to RLVR.

Order (each phase logged to ``pipeline_log.jsonl`` with its seconds):

1. **data**: record PushT episodes with ``gym-pusht`` (or read ``.npz`` episodes), resize, split
   by episode into train and held-out;
2. **tokenizer**: train the per-frame FSQ tokenizer on the train frames (L1 + ST-LPIPS) or load
   ``tokenizer.path``; reconstructions PNG and held-out PSNR in ``tokenizer/``;
3. **MLE**: a LLaMA-style transformer over ``[f0 a0]..[f_{C-1} a_{C-1}] BOS f_C EOS`` sequences
   (single-step layout, actions quantised into bins from the train ranges), saved to
   ``model/mle``, evaluated on held-out clips (``eval/mle``);
4. **RLVR**: embedded Redis, the reward service, the decoder (with the frame tokenizer) and the
   rollout service (the MLE model) as supervised processes; the queue-fed trainer starts from the
   MLE weights; the orchestrator samples ``group_size`` next frames per train clip restricted to
   the visual ids, decodes them, scores ``-(sum weight * loss)`` against the true frame and
   pushes the groups; evaluated on the same held-out clips (``eval/rlvr``);
5. **baseline**: continue MLE from ``model/mle`` for the wall time the RLVR phase took (same
   machine, nothing else running), evaluated the same way (``eval/mle_continued``);
6. **report**: ``report.md``, ``summary.json``, ``compare.png`` (context | MLE | continued MLE |
   RLVR | true per held-out clip) and ``curves.png`` (MLE loss, GRPO reward).

Held-out evaluation samples like the reference evaluation (temperature 1, top-k 100 by default)
with a fixed seed, so the three models see the same random numbers.

``model.layout: multi_step`` (``rlvr_world.video.multistep``) swaps the sequences for
``ctx [d1 a1] .. [dS aS]`` over clips of ``S + 2`` frames: MLE trains on ``d2..dS``; RLVR items
generate the ``S - 1`` frames interleaved with the true actions (rollout ``inserts``), score them
with the mean over frames and train with the actions masked out; evaluation rolls out the same
way in-process and averages the metrics over frames; ``compare.png`` shows the last predicted
frame ``dS`` after the context ``ctx, d1``.

``VideoRun`` runs the phases in order and keeps the summary. What every phase after the tokenizer
shares (the frame tokenizer, the vocabulary, the action quantizer, the train and held-out clips
and their token sequences, the perceptual scorer of the evaluations) is built once, right after
phase 2, into a frozen ``VideoSetup`` that is handed to each phase; no phase adds state to the
run. The episodes and clips of phase 1 are ``episodes``, the services, trainer and orchestrator of
phase 4 are ``rl``, the pictures and ``report.md`` of phase 6 are ``report``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict

import numpy as np

from rlvr_world.apps.video import rl as rl_phase
from rlvr_world.apps.video.config import VideoPipelineConfig
from rlvr_world.apps.video.episodes import PUSHT_ACTION_RANGES, clip_pairs, run_episodes, spread
from rlvr_world.runlog import JsonlLog
from rlvr_world.video.layout import LayoutVocab, MultiStepVocab, SingleStepVocab

if TYPE_CHECKING:
    from rlvr_world.rewards.video import PerceptualScorer
    from rlvr_world.video.actions import ActionQuantizer
    from rlvr_world.video.data import ClipArrays, Episode
    from rlvr_world.video.layout import TokenSequence
    from rlvr_world.video.tokenizer import FrameTokenizer

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class VideoSetup:
    """What the phases after the tokenizer share, built once by ``VideoRun.setup``."""

    tokenizer_dir: Path
    frame_tokenizer: FrameTokenizer
    vocab: LayoutVocab
    quantizer: ActionQuantizer
    train_clips: list[ClipArrays]
    #: The held-out clips every model is evaluated on (``eval.clips`` of them, seeded).
    test_clips: list[ClipArrays]
    train_sequences: list[TokenSequence]
    test_sequences: list[TokenSequence]
    #: ST-LPIPS (VGG) of the evaluations: the same scorer for every model.
    perceptual: PerceptualScorer

    @property
    def tokens_per_frame(self) -> int:
        return self.frame_tokenizer.tokens_per_frame


class _EvalInputs(TypedDict):
    """The keyword arguments both held-out evaluations take from the setup."""

    quantizer: ActionQuantizer
    perceptual: PerceptualScorer
    out_dir: Path
    sequences: list[TokenSequence]


def encode(
    clips: Sequence[ClipArrays],
    frame_tokenizer: FrameTokenizer,
    quantizer: ActionQuantizer,
    vocab: LayoutVocab,
    segment_frames: int,
) -> list[TokenSequence]:
    """The clips' token sequences in the layout of ``vocab`` (``segment_frames``: multi-step)."""
    if isinstance(vocab, MultiStepVocab):
        from rlvr_world.video.multistep import encode_multistep_clips

        return encode_multistep_clips(clips, frame_tokenizer, quantizer, vocab, segment_frames)
    from rlvr_world.video.train_mle import encode_clips

    return encode_clips(clips, frame_tokenizer, quantizer, vocab)


class VideoRun:
    """One run; ``run_async()`` does everything and returns the summary."""

    def __init__(self, cfg: VideoPipelineConfig, config_path: str = "") -> None:
        self.cfg, self.config_path = cfg, config_path
        self.run_dir = cfg.run.run_dir
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.log = JsonlLog(self.run_dir / "pipeline_log.jsonl")
        #: The JSON document of ``summary.json``: each phase adds its section.
        self.summary: dict[str, Any] = {"config": config_path, "phases_s": {}}

    def _phase(self, name: str, seconds: float, fields: Mapping[str, object] | None = None) -> None:
        self.summary["phases_s"][name] = seconds
        self.log.write(name, **{**(fields or {}), "seconds": seconds})
        logger.info("%s done in %.1f s", name, seconds)

    @property
    def multi_step(self) -> bool:
        return self.cfg.model.layout == "multi_step"

    # ------------------------------------------------------------ 1. data

    def data(self) -> tuple[list[Episode], list[Episode]]:
        from rlvr_world.video.data import split_episodes

        d = self.cfg.data
        t0 = time.perf_counter()
        episodes = run_episodes(d, self.run_dir)
        train, test = split_episodes(episodes, d.held_out, seed=d.seed)
        self._phase(
            "data",
            time.perf_counter() - t0,
            {
                "train_episodes": len(train),
                "test_episodes": len(test),
                "transitions": sum(e.length for e in episodes),
            },
        )
        return train, test

    def clips(self, episodes: Sequence[Episode], length: int, seed: int) -> list[ClipArrays]:
        """Training or evaluation clips: every window, or with ``model.context_range`` the
        multi-step clips whose context frame is drawn at random (``context_clip_pairs``)."""
        m = self.cfg.model
        if m.context_range is None:
            return clip_pairs(episodes, length)
        from rlvr_world.video.multistep import context_clip_pairs

        return context_clip_pairs(episodes, m.segment_frames, m.context_range, seed)

    # ------------------------------------------------------------ 2. tokenizer

    def tokenizer(self, train: Sequence[Episode], test: Sequence[Episode]) -> Path:
        t = self.cfg.tokenizer
        if t.path is not None:
            self.summary["tokenizer"] = {"path": str(t.path), "trained": False}
            return t.path
        from rlvr_world.video.tokenizer import TokenizerConfig
        from rlvr_world.video.train_tokenizer import TrainSettings, train_tokenizer

        out = self.run_dir / "tokenizer"
        t0 = time.perf_counter()
        frames = np.concatenate([e.frames for e in train])
        held = np.concatenate([e.frames for e in test])
        cfg = TokenizerConfig(
            image_size=self.cfg.data.image_size,
            channels=t.channels,
            downsample=t.downsample,
            levels=t.levels,
            input_patch=t.input_patch,
        )
        settings = TrainSettings(
            steps=t.steps,
            batch_size=t.batch_size,
            lr=t.lr,
            perceptual_weight=t.perceptual_weight,
            perceptual_frames=t.perceptual_frames,
            foreground_weight=t.foreground_weight,
            seed=self.cfg.data.seed,
        )
        metrics = train_tokenizer(
            frames,
            cfg,
            t.steps,
            out,
            eval_frames=held,
            settings=settings,
            device=self.cfg.run.device,
        )
        self.summary["tokenizer"] = {"path": str(out), "trained": True, **_floats(metrics)}
        self._phase("tokenizer", time.perf_counter() - t0, _floats(metrics))
        return out

    # ------------------------------------------------------------ the shared setup

    def setup(
        self, train: Sequence[Episode], test: Sequence[Episode], tokenizer_dir: Path
    ) -> VideoSetup:
        """The frame tokenizer, vocabulary and action quantizer, the train and held-out clips
        encoded into token sequences, and the evaluations' perceptual scorer."""
        from rlvr_world.rewards.perceptual import make_perceptual
        from rlvr_world.video.actions import ActionQuantizer
        from rlvr_world.video.data import all_actions
        from rlvr_world.video.multistep import multistep_vocab
        from rlvr_world.video.tokenizer import FrameTokenizer

        c = self.cfg
        t0 = time.perf_counter()
        frame_tokenizer = FrameTokenizer.load(tokenizer_dir, device=c.run.device)
        codes = frame_tokenizer.codebook_size
        vocab: LayoutVocab = (
            multistep_vocab(codes, c.model.action_bins)
            if self.multi_step
            else SingleStepVocab(visual_codes=codes, action_bins=c.model.action_bins)
        )
        if c.data.source == "pusht":  # the action space's own bounds, as RT-1's dataset ranges
            quantizer = ActionQuantizer(PUSHT_ACTION_RANGES, c.model.action_bins)
        else:
            quantizer = ActionQuantizer.from_actions(all_actions(train), c.model.action_bins)
        length = c.model.clip_frames
        self.summary["model"] = {
            "layout": c.model.layout,
            "tokens_per_frame": frame_tokenizer.tokens_per_frame,
            "action_dims": quantizer.dims,
            "vocab_size": vocab.size,
            "clip_frames": length,
        }
        train_clips = self.clips(train, length, c.data.seed)
        test_clips = spread(self.clips(test, length, c.data.seed + 1), c.eval.clips, c.eval.seed)
        segments = c.model.segment_frames
        setup = VideoSetup(
            tokenizer_dir=tokenizer_dir,
            frame_tokenizer=frame_tokenizer,
            vocab=vocab,
            quantizer=quantizer,
            train_clips=train_clips,
            test_clips=test_clips,
            train_sequences=encode(train_clips, frame_tokenizer, quantizer, vocab, segments),
            test_sequences=encode(test_clips, frame_tokenizer, quantizer, vocab, segments),
            perceptual=make_perceptual("stlpips", "vgg", device=c.run.device),
        )
        fields = {"clips": len(train_clips), "test_clips": len(test_clips)}
        self._phase("setup", time.perf_counter() - t0, fields)
        return setup

    # ------------------------------------------------------------ 3. MLE

    def mle(self, s: VideoSetup) -> Path:
        import torch

        from rlvr_world.video.train_mle import MLEConfig, save_checkpoint, train_mle
        from rlvr_world.video.world_model import WorldModelSpec, build_world_model

        m, c = self.cfg.mle, self.cfg.model
        torch.set_num_threads(m.torch_threads)
        length = len(s.train_sequences[0].input_ids)
        model = build_world_model(
            s.vocab, hidden=c.hidden, layers=c.layers, heads=c.heads, max_len=length + 8
        )
        model.to(self.cfg.run.device)  # type: ignore[arg-type]
        mcfg = MLEConfig(steps=m.steps, batch_size=m.batch_size, lr=m.lr, log_every=100)
        t0 = time.perf_counter()
        result = train_mle(
            model,
            s.train_sequences,
            mcfg,
            pad_id=s.vocab.pad,
            log_path=self.run_dir / "mle_log.jsonl",
        )
        spec = WorldModelSpec(
            vocab=s.vocab,
            tokens_per_frame=s.tokens_per_frame,
            context_length=1 if self.multi_step else c.context_length,
            action_quantizer=s.quantizer.to_dict(),
            extra={
                "frame_tokenizer": str(s.tokenizer_dir),
                "layout": c.layout,
                **({"segment_frames": c.segment_frames} if self.multi_step else {}),
            },
        )
        path = save_checkpoint(self.run_dir / "model" / "mle", model, spec, result)
        self.summary["mle"] = result.summary()
        self._phase("mle", time.perf_counter() - t0, result.summary())
        return path

    # ------------------------------------------------------------ 4. RLVR

    async def rl(self, s: VideoSetup, model: Path) -> tuple[Path, float]:
        """GRPO from ``model`` through the services; the trainer's last checkpoint and the
        phase's seconds (from the trainer's start to its exit)."""
        items = rl_phase.rl_items(
            s.train_clips, s.train_sequences, s.tokens_per_frame, self.multi_step
        )
        out = await rl_phase.run_rl(
            self.cfg,
            self.run_dir,
            self.log,
            model=model,
            tokenizer_dir=s.tokenizer_dir,
            items=items,
            max_tokens=rl_phase.rollout_max_tokens(self.cfg, s.tokens_per_frame, s.quantizer.dims),
            orchestrator=rl_phase.orchestrator_config(self.cfg, s.tokens_per_frame, s.vocab),
        )
        code, stats, seconds = out.trainer_exit, out.stats, out.seconds
        final = rl_phase.final_checkpoint(self.run_dir / "trainer")
        fields = {
            "trainer_exit": code,
            "pushed": stats.pushed,
            "failed": stats.failed,
            "samples": stats.samples,
            "samples_per_s": stats.samples / max(seconds, 1e-9),
            "checkpoint": str(final),
        }
        self.summary["rl"] = {"seconds": seconds, **fields}
        self._phase("rl", seconds, fields)
        if code != 0:
            raise RuntimeError(f"trainer exited with {code}; see {self.run_dir}/logs/trainer.log")
        return final, seconds

    # ------------------------------------------------------------ 5. baseline

    def baseline(self, s: VideoSetup, mle_dir: Path, seconds: float) -> Path:
        import torch

        from rlvr_world.video.train_mle import MLEConfig, save_checkpoint, train_mle
        from rlvr_world.video.world_model import load_world_model

        torch.set_num_threads(self.cfg.mle.torch_threads)
        model, spec = load_world_model(mle_dir, device=self.cfg.run.device)
        start = self.cfg.mle.steps
        cfg = MLEConfig(
            steps=start + 10_000_000,
            time_budget_s=seconds,
            batch_size=self.cfg.mle.batch_size,
            lr=self.cfg.baseline.lr,
            schedule="constant",
            warmup_steps=0,
            seed=self.cfg.data.seed + 1,
            log_every=100,
        )
        result = train_mle(
            model,
            s.train_sequences,
            cfg,
            pad_id=s.vocab.pad,
            log_path=self.run_dir / "mle_continued_log.jsonl",
            resume=mle_dir,
        )
        path = save_checkpoint(self.run_dir / "model" / "mle_continued", model, spec, result)
        self.summary["baseline"] = {"budget_s": seconds, **result.summary()}
        self._phase("baseline", result.seconds, {"budget_s": seconds, **result.summary()})
        return path

    # ------------------------------------------------------------ evaluation

    def evaluate(
        self, s: VideoSetup, name: str, weights: Path, *, baselines: bool
    ) -> dict[str, Any]:
        """The held-out report of the model in ``weights`` (``eval/<name>/``); ``baselines``
        also scores the tokenizer ceiling and the copy-last-frame baseline."""
        import torch
        from transformers import AutoModelForCausalLM

        from rlvr_world.video.evaluate import EvalConfig, evaluate
        from rlvr_world.video.multistep import evaluate_multistep

        e = self.cfg.eval
        torch.set_num_threads(self.cfg.mle.torch_threads)
        model = AutoModelForCausalLM.from_pretrained(str(weights), dtype=torch.float32)
        model.to(self.cfg.run.device)  # type: ignore[arg-type]
        model.eval()  # type: ignore[no-untyped-call]
        cfg = EvalConfig(
            temperature=e.temperature, top_k=e.top_k, seed=e.seed, grid_rows=0, baselines=baselines
        )
        shared: _EvalInputs = {
            "quantizer": s.quantizer,
            "perceptual": s.perceptual,
            "out_dir": self.run_dir / "eval" / name,
            "sequences": s.test_sequences,
        }
        t0 = time.perf_counter()
        if isinstance(s.vocab, MultiStepVocab):
            segments = self.cfg.model.segment_frames
            report = evaluate_multistep(
                model,
                s.frame_tokenizer,
                s.test_clips,
                cfg,
                vocab=s.vocab,
                segment_frames=segments,
                **shared,
            )
        else:
            report = evaluate(model, s.frame_tokenizer, s.test_clips, cfg, vocab=s.vocab, **shared)
        self.summary.setdefault("eval", {})[name] = report
        self._phase(f"eval_{name}", time.perf_counter() - t0)
        return report

    # ------------------------------------------------------------ 6. report

    def report(self, s: VideoSetup, models: Mapping[str, Path]) -> Path:
        """``report.md`` with ``compare.png`` of the ``models`` (name -> weights) and the curves."""
        from rlvr_world.apps.video.report import (
            write_compare,
            write_curves,
            write_video_report,
        )

        rows = list(s.test_clips[: self.cfg.eval.grid_rows])
        if self.multi_step:  # compare the last predicted frame dS after ctx, d1
            steps = self.cfg.model.segment_frames
            rows = [(np.stack([f[0], f[1], f[steps]]), a) for f, a in rows]
        preds = {name: self._predicted(s, path, rows) for name, path in models.items()}
        extras = [write_compare(self.run_dir / "compare.png", rows, preds)]
        curves = write_curves(self.run_dir)
        if curves is not None:
            extras.append(curves)
        recon = s.tokenizer_dir / "recon.png"
        if recon.is_file():
            extras.append(recon)
        return write_video_report(self.run_dir, self.summary, [str(e) for e in extras])

    def _predicted(self, s: VideoSetup, weights: Path, rows: Sequence[ClipArrays]) -> np.ndarray:
        """Sampled frames of the grid rows (the first held-out clips): the next frame, or the
        last of a multi-step rollout."""
        from rlvr_world.apps.video.report import predicted_frames

        if isinstance(s.vocab, SingleStepVocab):
            return predicted_frames(
                weights,
                rows,
                s.frame_tokenizer,
                vocab=s.vocab,
                quantizer=s.quantizer,
                cfg=self.cfg.eval,
            )
        import torch
        from transformers import AutoModelForCausalLM

        from rlvr_world.video.evaluate import EvalConfig
        from rlvr_world.video.multistep import predicted_multistep

        e = self.cfg.eval
        model = AutoModelForCausalLM.from_pretrained(str(weights), dtype=torch.float32)
        ecfg = EvalConfig(temperature=e.temperature, top_k=e.top_k, seed=e.seed)
        seqs = s.test_sequences[: len(rows)]
        _, frames = predicted_multistep(model, s.frame_tokenizer, seqs, s.vocab, ecfg)
        return np.asarray(frames[:, -1])

    # ------------------------------------------------------------ all

    async def run_async(self) -> dict[str, Any]:
        import torch

        t0 = time.perf_counter()
        c = self.cfg
        torch.set_num_threads(c.mle.torch_threads)  # the tokenizer's training too
        train, test = self.data()
        s = self.setup(train, test, self.tokenizer(train, test))
        models = {"mle": self.mle(s)}
        self.evaluate(s, "mle", models["mle"], baselines=True)
        models["rlvr"], rl_seconds = await self.rl(s, models["mle"])
        self.evaluate(s, "rlvr", models["rlvr"], baselines=False)
        if c.baseline.enabled:
            models["mle_continued"] = self.baseline(s, models["mle"], rl_seconds)
            self.evaluate(s, "mle_continued", models["mle_continued"], baselines=False)
        self.summary["wall_s"] = time.perf_counter() - t0
        self.report(s, models)
        (self.run_dir / "summary.json").write_text(json.dumps(self.summary, indent=2, default=str))
        self.log.write("end", wall_s=self.summary["wall_s"])
        self.log.close()
        return self.summary


def _floats(d: Mapping[str, object]) -> dict[str, float]:
    return {k: float(v) for k, v in d.items() if isinstance(v, int | float)}


def run_video_pipeline(cfg: VideoPipelineConfig, config_path: str = "") -> dict[str, Any]:
    """Run the video pipeline (module docstring); returns the summary (also ``summary.json``)."""
    return asyncio.run(VideoRun(cfg, config_path).run_async())
