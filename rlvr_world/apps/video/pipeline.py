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

``VideoRun`` runs the phases in order and keeps the summary; the episodes and clips of phase 1 are
``episodes``, the services, trainer and orchestrator of phase 4 are ``rl``, the pictures and
``report.md`` of phase 6 are ``report``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from rlvr_world.apps.orchestrator.worker import OrchestratorConfig
from rlvr_world.apps.video import rl as rl_phase
from rlvr_world.apps.video.config import VideoPipelineConfig
from rlvr_world.apps.video.episodes import (
    PUSHT_ACTION_RANGES,
    Clip,
    clip_pairs,
    run_episodes,
    spread,
)
from rlvr_world.items import PromptItem
from rlvr_world.runlog import JsonlLog

logger = logging.getLogger(__name__)


class VideoRun:
    """One run; ``run()`` does everything and returns the summary."""

    def __init__(self, cfg: VideoPipelineConfig, config_path: str = "") -> None:
        self.cfg, self.config_path = cfg, config_path
        self.run_dir = cfg.run.run_dir
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.log = JsonlLog(self.run_dir / "pipeline_log.jsonl")
        self.summary: dict[str, Any] = {"config": config_path, "phases_s": {}}

    def _phase(self, name: str, seconds: float, fields: dict[str, Any] | None = None) -> None:
        self.summary["phases_s"][name] = seconds
        self.log.write(name, **{**(fields or {}), "seconds": seconds})
        logger.info("%s done in %.1f s", name, seconds)

    # ------------------------------------------------------------ 1. data

    def data(self) -> tuple[list[Any], list[Any]]:
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

    def clips(self, episodes: Sequence[Any], length: int, seed: int) -> list[Clip]:
        """Training or evaluation clips: every window, or with ``model.context_range`` the
        multi-step clips whose context frame is drawn at random (``context_clip_pairs``)."""
        m = self.cfg.model
        if m.context_range is None:
            return clip_pairs(episodes, length)
        from rlvr_world.video.multistep import context_clip_pairs

        return context_clip_pairs(episodes, m.segment_frames, m.context_range, seed)

    # ------------------------------------------------------------ 2. tokenizer

    def tokenizer(self, train: Sequence[Any], test: Sequence[Any]) -> Path:
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

    # ------------------------------------------------------------ 3. MLE

    @property
    def multi_step(self) -> bool:
        return self.cfg.model.layout == "multi_step"

    def sequences(self, clips: Sequence[Clip], frame_tokenizer: Any, quantizer: Any) -> list[Any]:
        if self.multi_step:
            from rlvr_world.video.multistep import encode_multistep_clips

            return encode_multistep_clips(
                clips, frame_tokenizer, quantizer, self.vocab, self.cfg.model.segment_frames
            )
        from rlvr_world.video.train_mle import encode_clips

        return list(encode_clips(clips, frame_tokenizer, quantizer, self.vocab))

    def mle(self, sequences: Sequence[Any], quantizer: Any, tokenizer_dir: Path) -> Path:
        import torch

        from rlvr_world.video.train_mle import MLEConfig, save_checkpoint, train_mle
        from rlvr_world.video.world_model import WorldModelSpec, build_world_model

        m, c = self.cfg.mle, self.cfg.model
        torch.set_num_threads(m.torch_threads)
        length = len(sequences[0].input_ids)
        model = build_world_model(
            self.vocab, hidden=c.hidden, layers=c.layers, heads=c.heads, max_len=length + 8
        )
        model.to(self.cfg.run.device)  # type: ignore[arg-type]
        mcfg = MLEConfig(steps=m.steps, batch_size=m.batch_size, lr=m.lr, log_every=100)
        t0 = time.perf_counter()
        result = train_mle(
            model,
            sequences,
            mcfg,
            pad_id=self.vocab.pad,
            log_path=self.run_dir / "mle_log.jsonl",
        )
        self.spec = WorldModelSpec(
            vocab=self.vocab,
            tokens_per_frame=self.tokens_per_frame,
            context_length=1 if self.multi_step else c.context_length,
            action_quantizer=quantizer.to_dict(),
            extra={
                "frame_tokenizer": str(tokenizer_dir),
                "layout": c.layout,
                **({"segment_frames": c.segment_frames} if self.multi_step else {}),
            },
        )
        path = save_checkpoint(self.run_dir / "model" / "mle", model, self.spec, result)
        self.summary["mle"] = result.summary()
        self._phase("mle", time.perf_counter() - t0, dict(result.summary()))
        return path

    # ------------------------------------------------------------ 4. RLVR

    def rl_items(self, clips: Sequence[Clip], sequences: Sequence[Any]) -> list[PromptItem]:
        return rl_phase.rl_items(clips, sequences, self.tokens_per_frame, self.multi_step)

    def trainer_yaml(self, model: Path, redis_url: str) -> Path:
        return rl_phase.write_trainer_yaml(self.cfg, model, redis_url, self.run_dir)

    @property
    def rollout_max_tokens(self) -> int:
        """The rollout server's token limit: one frame, or S - 1 frames and their actions."""
        return rl_phase.rollout_max_tokens(self.cfg, self.tokens_per_frame, self.quantizer.dims)

    def orchestrator_config(self) -> OrchestratorConfig:
        return rl_phase.orchestrator_config(self.cfg, self.tokens_per_frame, self.vocab)

    async def rl(self, model: Path, tokenizer_dir: Path, items: list[PromptItem]) -> Path:
        out = await rl_phase.run_rl(
            self.cfg,
            self.run_dir,
            self.log,
            model=model,
            tokenizer_dir=tokenizer_dir,
            items=items,
            max_tokens=self.rollout_max_tokens,
            orchestrator=self.orchestrator_config(),
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
        return final

    # ------------------------------------------------------------ 5. baseline

    def baseline(self, mle_dir: Path, sequences: Sequence[Any], seconds: float) -> Path:
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
            sequences,
            cfg,
            pad_id=self.vocab.pad,
            log_path=self.run_dir / "mle_continued_log.jsonl",
            resume=mle_dir,
        )
        path = save_checkpoint(self.run_dir / "model" / "mle_continued", model, spec, result)
        self.summary["baseline"] = {"budget_s": seconds, **result.summary()}
        self._phase("baseline", result.seconds, {"budget_s": seconds, **result.summary()})
        return path

    # ------------------------------------------------------------ evaluation

    def evaluate(
        self, name: str, weights: Path, clips: Sequence[Clip], frame_tokenizer: Any
    ) -> Any:
        import torch
        from transformers import AutoModelForCausalLM

        from rlvr_world.video.evaluate import EvalConfig, evaluate

        e = self.cfg.eval
        torch.set_num_threads(self.cfg.mle.torch_threads)
        model = AutoModelForCausalLM.from_pretrained(str(weights), dtype=torch.float32)
        model.to(self.cfg.run.device)  # type: ignore[arg-type]
        model.eval()  # type: ignore[no-untyped-call]
        first = not self.summary.get("eval")
        cfg = EvalConfig(
            temperature=e.temperature, top_k=e.top_k, seed=e.seed, grid_rows=0, baselines=first
        )
        t0 = time.perf_counter()
        if first:  # shared by every evaluation: the scorer, and the clips' sequences
            from rlvr_world.rewards.perceptual import make_perceptual

            self._perceptual = make_perceptual("stlpips", "vgg", device=self.cfg.run.device)
            self._eval_seqs = self.sequences(clips, frame_tokenizer, self.quantizer)
        common: dict[str, Any] = {
            "vocab": self.vocab,
            "quantizer": self.quantizer,
            "perceptual": self._perceptual,
            "out_dir": self.run_dir / "eval" / name,
            "sequences": self._eval_seqs,
        }
        if self.multi_step:
            from rlvr_world.video.multistep import evaluate_multistep

            segments = self.cfg.model.segment_frames
            report = evaluate_multistep(
                model, frame_tokenizer, clips, cfg, segment_frames=segments, **common
            )
        else:
            report = evaluate(model, frame_tokenizer, clips, cfg, **common)
        self.summary.setdefault("eval", {})[name] = report
        self._phase(f"eval_{name}", time.perf_counter() - t0)
        return report

    def report(self, clips: Sequence[Clip], frame_tokenizer: Any) -> Path:
        from rlvr_world.apps.video.report import (
            write_compare,
            write_curves,
            write_video_report,
        )

        rows = list(clips[: self.cfg.eval.grid_rows])
        if self.multi_step:  # compare the last predicted frame dS after ctx, d1
            steps = self.cfg.model.segment_frames
            rows = [(np.stack([f[0], f[1], f[steps]]), a) for f, a in rows]
        models = {"mle": self.run_dir / "model" / "mle"}
        if "mle_continued" in self.summary.get("eval", {}):
            models["mle_continued"] = self.run_dir / "model" / "mle_continued"
        if "rl" in self.summary:
            models["rlvr"] = Path(self.summary["rl"]["checkpoint"])
        preds = {
            name: self._predicted(path, clips[: len(rows)], rows, frame_tokenizer)
            for name, path in models.items()
        }
        extras = [write_compare(self.run_dir / "compare.png", rows, preds)]
        curves = write_curves(self.run_dir)
        if curves is not None:
            extras.append(curves)
        recon = Path(self.summary.get("tokenizer", {}).get("path", "")) / "recon.png"
        if recon.is_file():
            extras.append(recon)
        return write_video_report(self.run_dir, self.summary, [str(e) for e in extras])

    def _predicted(
        self, weights: Path, clips: Sequence[Clip], rows: Sequence[Clip], frame_tokenizer: Any
    ) -> np.ndarray:
        """Sampled frames of the grid rows: the next frame, or the last of a multi-step rollout."""
        from rlvr_world.apps.video.report import predicted_frames

        if not self.multi_step:
            return predicted_frames(
                weights,
                rows,
                frame_tokenizer,
                vocab=self.vocab,
                quantizer=self.quantizer,
                cfg=self.cfg.eval,
            )
        import torch
        from transformers import AutoModelForCausalLM

        from rlvr_world.video.evaluate import EvalConfig
        from rlvr_world.video.multistep import predicted_multistep

        e = self.cfg.eval
        model = AutoModelForCausalLM.from_pretrained(str(weights), dtype=torch.float32)
        seqs = self.sequences(clips, frame_tokenizer, self.quantizer)
        ecfg = EvalConfig(temperature=e.temperature, top_k=e.top_k, seed=e.seed)
        _, frames = predicted_multistep(model, frame_tokenizer, seqs, self.vocab, ecfg)
        return np.asarray(frames[:, -1])

    # ------------------------------------------------------------ all

    async def run_async(self) -> dict[str, Any]:
        import torch

        from rlvr_world.video.actions import ActionQuantizer
        from rlvr_world.video.data import all_actions
        from rlvr_world.video.layout import SingleStepVocab
        from rlvr_world.video.multistep import multistep_vocab
        from rlvr_world.video.tokenizer import FrameTokenizer

        t0 = time.perf_counter()
        c = self.cfg
        torch.set_num_threads(c.mle.torch_threads)  # the tokenizer's training too
        train, test = self.data()
        tokenizer_dir = self.tokenizer(train, test)
        frame_tokenizer = FrameTokenizer.load(tokenizer_dir, device=c.run.device)
        self.tokens_per_frame = int(frame_tokenizer.tokens_per_frame)
        codes = int(frame_tokenizer.codebook_size)
        self.vocab: Any = (
            multistep_vocab(codes, c.model.action_bins)
            if self.multi_step
            else SingleStepVocab(visual_codes=codes, action_bins=c.model.action_bins)
        )
        if c.data.source == "pusht":  # the action space's own bounds, as RT-1's dataset ranges
            self.quantizer = ActionQuantizer(PUSHT_ACTION_RANGES, c.model.action_bins)
        else:
            self.quantizer = ActionQuantizer.from_actions(all_actions(train), c.model.action_bins)
        length = c.model.clip_frames
        self.summary["model"] = {
            "layout": c.model.layout,
            "tokens_per_frame": self.tokens_per_frame,
            "action_dims": self.quantizer.dims,
            "vocab_size": self.vocab.size,
            "clip_frames": length,
        }
        train_clips = self.clips(train, length, c.data.seed)
        test_clips = spread(self.clips(test, length, c.data.seed + 1), c.eval.clips, c.eval.seed)
        t1 = time.perf_counter()
        train_seqs = self.sequences(train_clips, frame_tokenizer, self.quantizer)
        self._phase("encode", time.perf_counter() - t1, {"clips": len(train_clips)})
        mle_dir = self.mle(train_seqs, self.quantizer, tokenizer_dir)
        self.evaluate("mle", mle_dir, test_clips, frame_tokenizer)
        items = self.rl_items(train_clips, train_seqs)
        rl_ckpt = await self.rl(mle_dir, tokenizer_dir, items)
        self.evaluate("rlvr", rl_ckpt, test_clips, frame_tokenizer)
        if c.baseline.enabled:
            cont = self.baseline(mle_dir, train_seqs, float(self.summary["rl"]["seconds"]))
            self.evaluate("mle_continued", cont, test_clips, frame_tokenizer)
        self.summary["wall_s"] = time.perf_counter() - t0
        self.report(test_clips, frame_tokenizer)
        (self.run_dir / "summary.json").write_text(json.dumps(self.summary, indent=2, default=str))
        self.log.write("end", wall_s=self.summary["wall_s"])
        self.log.close()
        return self.summary


def _floats(d: dict[str, Any]) -> dict[str, float]:
    return {k: float(v) for k, v in d.items() if isinstance(v, int | float)}


def run_video_pipeline(cfg: VideoPipelineConfig, config_path: str = "") -> dict[str, Any]:
    """Run the video pipeline (module docstring); returns the summary (also ``summary.json``)."""
    return asyncio.run(VideoRun(cfg, config_path).run_async())
