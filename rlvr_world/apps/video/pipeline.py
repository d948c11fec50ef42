"""``rlvr-world run CONFIG`` with ``task: video``: the video world model from data to RLVR.

Order (each phase logged to ``pipeline_log.jsonl`` with its seconds):

1. **data**: record PushT episodes with ``gym-pusht`` (or read ``.npz`` episodes), resize, split
   by episode into train, validation (``data.validation``) and held-out (test); PushT episodes
   keep the simulator's state of every frame;
   **idm** (``idm`` section, ``idm_phase``): train an inverse-dynamics model on the train and
   validation episodes (``idm.train``; its held-out accuracy on true frames, the ceiling, in
   ``idm/report.json``) or check ``idm.path``; the reward service loads it and every evaluation
   reads the predicted frames' actions with it;
2. **tokenizer**: train the per-frame FSQ tokenizer on the train frames (L1 + ST-LPIPS) or load
   ``tokenizer.path``; reconstructions PNG and held-out PSNR in ``tokenizer/``;
3. **MLE**: a LLaMA-style transformer over ``[f0 a0]..[f_{C-1} a_{C-1}] BOS f_C EOS`` sequences
   (single-step layout, actions quantised into bins from the train ranges), saved to
   ``model/mle`` (``mle_phase``); the sampling of every evaluation is tuned on the validation
   clips (``eval.candidates``, ``eval/validation.json``), then the MLE model is evaluated on the
   held-out clips (``eval/mle``) and, with ``eval.shuffled_actions``, with their actions
   shuffled among them (``eval/mle_shuffled_actions``); every evaluation also measures the
   agent-position error of the predicted frames (PushT) and the IDM's reading of their actions
   (``reading``);
4. **RLVR**: embedded Redis, the reward service, the decoder (with the frame tokenizer) and the
   rollout service (the MLE model) as supervised processes; the queue-fed trainer starts from the
   MLE weights; the orchestrator samples ``group_size`` next frames per train clip restricted to
   the visual ids, decodes them, scores ``-(sum weight * loss)`` against the true frame (the
   items carry the true actions and states for the ``idm`` and ``state`` terms) and pushes the
   groups; evaluated on the same held-out clips (``eval/rlvr``, and shuffled:
   ``eval/rlvr_shuffled_actions``);
5. **baseline**: continue MLE from ``model/mle`` for the RLVR phase's budget (``baseline.budget``:
   its wall time, on the same machine with nothing else running, its trained sequences or its
   optimizer steps), evaluated the same way (``eval/mle_continued``, and shuffled);
   phases 4 and 5 run once per seed (``run.seeds``: seeds ``run.seed``, ``run.seed + 1``, ...,
   each in ``seed<n>/`` when there are several), all from the same MLE model;
6. **report**: ``report.md``, ``summary.json`` (with ``headline``: the reward of RLVR and of
   the control over the held-out clips and seeds, and the paired-bootstrap interval of their
   difference; ``headline_terms``: the same per metric; ``action_reading``: the shuffle gaps,
   the agent-position error and the IDM measures per model, with intervals, also in the
   headline), ``compare.png`` (context | MLE |
   continued MLE | RLVR | true per held-out clip) and ``curves.png`` (MLE loss, GRPO reward).

Held-out evaluation samples like the reference evaluation (temperature 1, top-k 100) unless
``eval.candidates`` are tuned; every model of a seed sees the same random numbers.
``run.seed`` reseeds everything but the data (``data.seed``: recording, split, test clips).

``model.layout: multi_step`` (``rlvr_world.video.multistep``) swaps the sequences for
``ctx [d1 a1] .. [dS aS]`` over clips of ``S + 2`` frames: MLE trains on ``d2..dS``; RLVR items
generate the ``S - 1`` frames interleaved with the true actions (rollout ``inserts``), score them
with the mean over frames and train with the actions masked out; evaluation rolls out the same
way in-process and averages the metrics over frames; ``compare.png`` shows the last predicted
frame ``dS`` after the context ``ctx, d1``.

``VideoRun`` runs the phases in order and keeps the summary. What every phase after the tokenizer
shares (the frame tokenizer, the vocabulary, the action quantizer, the train and held-out clips,
their token sequences and states, the perceptual scorer of the evaluations, the IDM) is built
once, right after
phase 2, into a frozen ``VideoSetup`` that is handed to each phase; no phase adds state to the
run. The episodes and clips of phase 1 are ``episodes``, the services, trainer and orchestrator of
phase 4 are ``rl``, the continued MLE of phase 5 is ``control``, the pictures and ``report.md``
of phase 6 are ``report``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rlvr_world.apps.video import evaluation, idm_phase, mle_phase, reading
from rlvr_world.apps.video import rl as rl_phase
from rlvr_world.apps.video import setup as setup_phase
from rlvr_world.apps.video.balance import run_weights
from rlvr_world.apps.video.config import SamplingChoice, VideoPipelineConfig, placed
from rlvr_world.apps.video.control import continue_mle, control_budget
from rlvr_world.apps.video.episodes import run_episodes, split_data
from rlvr_world.apps.video.report import write_run_report
from rlvr_world.apps.video.setup import EvalSet, VideoSetup, encode, predicted_rows
from rlvr_world.devices import module_device
from rlvr_world.runlog import JsonlLog

if TYPE_CHECKING:
    from rlvr_world.video.data import Episode

#: The evaluations of a run: the models, and each with its actions shuffled.
EVALUATED = (
    "mle",
    "mle_shuffled_actions",
    "mle_continued",
    "mle_continued_shuffled_actions",
    "rlvr",
    "rlvr_shuffled_actions",
)

logger = logging.getLogger(__name__)


class VideoRun:
    """One run; ``run_async()`` does everything and returns the summary."""

    def __init__(self, cfg: VideoPipelineConfig, config_path: str = "") -> None:
        # every phase gets the concrete device (a CUDA device this machine lacks: refused here)
        self.cfg, placement = placed(cfg)
        self.config_path = config_path
        self.run_dir = cfg.run.run_dir
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.log = JsonlLog(self.run_dir / "pipeline_log.jsonl")
        #: The JSON document of ``summary.json``: each phase adds its section.
        self.summary: dict[str, Any] = {"config": config_path, "phases_s": {}}
        # the resolved config (overrides applied): what an analysis of this run rebuilds from
        (self.run_dir / "config.json").write_text(
            cfg.model_dump_json(indent=2, exclude_unset=True) + "\n"
        )
        self.summary["devices"] = {"run": {"setting": cfg.run.device, **placement.as_dict()}}
        #: The seeds of the RLVR / continued-MLE repeats.
        self.seeds = [cfg.run.seed + i for i in range(cfg.run.seeds)]

    def _device(self, name: str, module: Any) -> None:
        """The device ``module`` (a torch module) is on, as phase ``name``'s, into the summary."""
        self.summary["devices"][name] = {"device": module_device(module), "precision": "fp32"}

    def _phase(self, name: str, seconds: float, fields: Mapping[str, object] | None = None) -> None:
        self.summary["phases_s"][name] = self.summary["phases_s"].get(name, 0.0) + seconds
        self.log.write(name, **{**(fields or {}), "seconds": seconds})
        logger.info("%s done in %.1f s", name, seconds)

    @property
    def multi_step(self) -> bool:
        return self.cfg.model.layout == "multi_step"

    def seed_dir(self, seed: int) -> Path:
        """Where the RLVR and control phases of ``seed`` and their evaluations write."""
        return self.run_dir / f"seed{seed}"

    # ------------------------------------------------------------ 1. data

    def data(self) -> tuple[list[Episode], list[Episode], list[Episode]]:
        """``(train, validation, test)`` episodes (validation empty unless configured)."""
        t0 = time.perf_counter()
        episodes = run_episodes(self.cfg.data, self.run_dir)
        train, val, test = split_data(self.cfg.data, episodes)
        fields = {
            "train_episodes": len(train),
            "validation_episodes": len(val),
            "test_episodes": len(test),
            "transitions": sum(e.length for e in episodes),
        }
        self._phase("data", time.perf_counter() - t0, fields)
        return train, val, test

    # ------------------------------------------------------------ 2. tokenizer, setup

    def tokenizer(self, train: Sequence[Episode], test: Sequence[Episode]) -> Path:
        t0 = time.perf_counter()
        path, metrics = setup_phase.tokenizer_dir(self.cfg, self.run_dir, train, test)
        trained = self.cfg.tokenizer.path is None
        self.summary["tokenizer"] = {"path": str(path), "trained": trained, **metrics}
        if trained:
            self._phase("tokenizer", time.perf_counter() - t0, metrics)
        return path

    def setup(
        self,
        train: Sequence[Episode],
        val: Sequence[Episode],
        test: Sequence[Episode],
        tokenizer_dir: Path,
        idm: Path | None = None,
    ) -> VideoSetup:
        """The run's ``VideoSetup`` (``setup.build_setup``; ``idm``: the run's IDM folder)."""
        t0 = time.perf_counter()
        s = setup_phase.build_setup(self.cfg, train, val, test, tokenizer_dir, idm=idm)
        self.summary["model"] = {
            "layout": self.cfg.model.layout,
            **s.token_counts,
            "action_dims": s.quantizer.dims,
            "vocab_size": s.vocab.size,
            "clip_frames": self.cfg.model.clip_frames,
        }
        self.summary["perceptual"] = {"metric": s.perceptual.metric, "net": s.perceptual.net}
        self._device("tokenizer", s.frame_tokenizer)
        fields = {"clips": len(s.train_clips), "test_clips": len(s.test_clips)}
        self._phase("setup", time.perf_counter() - t0, {**fields, "val": len(s.val_clips)})
        return s

    # ------------------------------------------------------------ 3. MLE

    def mle(self, s: VideoSetup) -> Path:
        """The start: ``mle.path`` checked against this run (``mle_phase.check_saved``), or a
        model trained here (``mle_phase.train_start``)."""
        if self.cfg.mle.path is not None:
            mle_phase.check_saved(self.cfg, s, self.cfg.mle.path)
            self.summary["mle"] = {"path": str(self.cfg.mle.path), "trained": False}
            return self.cfg.mle.path
        t0 = time.perf_counter()
        path, result, model = mle_phase.train_start(self.cfg, s, self.run_dir)
        self._device("mle", model)
        self.summary["mle"] = result.summary()
        self._phase("mle", time.perf_counter() - t0, result.summary())
        return path

    def idm(self) -> Path | None:
        """The run's inverse-dynamics model (``idm_phase.prepare_idm``): trained here on the
        train episodes, or ``idm.path`` checked; None without one."""
        t0 = time.perf_counter()
        path, entry = idm_phase.prepare_idm(self.cfg, self.run_dir)
        if path is None:
            return None
        self.summary["idm"] = entry
        if entry["trained"]:
            self._phase("idm", time.perf_counter() - t0, {"held_out": entry["held_out"]})
        return path

    # ------------------------------------------------------------ 4. RLVR

    def reward_weights(self, s: VideoSetup, mle_dir: Path) -> dict[str, float]:
        """The RL reward's weights (``balance.run_weights``: ``rl.weights``, balanced on MLE
        samples when ``rl.balance_prompts`` is set)."""
        t0 = time.perf_counter()
        weights, info = run_weights(self.cfg, s, mle_dir, s.reader)
        if info is not None:
            self.summary["balance"] = info
            self._phase("balance", time.perf_counter() - t0, info)
        return weights

    async def rl(
        self, s: VideoSetup, model: Path, seed: int, weights: dict[str, float]
    ) -> tuple[Path, float]:
        """GRPO from ``model`` through the services with ``seed`` and the reward ``weights``;
        the trainer's last checkpoint and the phase's seconds (trainer start to exit)."""
        out_dir = self.seed_dir(seed)
        out_dir.mkdir(parents=True, exist_ok=True)
        anchored = self.cfg.model.anchor_dilate is not None
        items = rl_phase.rl_items(
            s.train_clips,
            s.train_sequences,
            s.tokens_per_frame,
            self.multi_step,
            anchor=(s.per_frame.grid, s.quantizer.dims) if anchored else None,
            context_vocab=s.context_vocab,
            truth=rl_phase.clip_truth(s.train_clips, predicted_rows(self.cfg)[1], s.train_states),
        )
        metric = s.perceptual.metric
        out = await rl_phase.run_rl(
            self.cfg,
            out_dir,
            self.log,
            setup=s,
            model=model,
            items=items,
            orchestrator=rl_phase.orchestrator_config(
                self.cfg,
                s.tokens_per_frame,
                s.vocab,
                metric=metric,
                seed=seed,
                weights=weights,
                grid=None if self.multi_step else s.per_frame.grid,
            ),
            seed=seed,
        )
        code, stats, seconds = out.trainer_exit, out.stats, out.seconds
        self.summary["devices"].update(out.devices)
        final = rl_phase.final_checkpoint(out_dir / "trainer")
        fields = {
            "seed": seed,
            "trainer_exit": code,
            "pushed": stats.pushed,
            "failed": stats.failed,
            "samples": stats.samples,
            "samples_per_s": stats.samples / max(seconds, 1e-9),
            "checkpoint": str(final),
            "weights": weights,
        }
        rl = self.summary.setdefault("rl", {"trainer_exit": 0, "by_seed": {}})
        rl["by_seed"][str(seed)] = {"seconds": seconds, **fields}
        rl["trainer_exit"] = rl["trainer_exit"] or code
        self._phase("rl", seconds, fields)
        if code != 0:
            raise RuntimeError(f"trainer exited with {code}; see {out_dir}/logs/trainer.log")
        return final, seconds

    # ------------------------------------------------------------ 5. baseline

    def baseline(self, s: VideoSetup, mle_dir: Path, seconds: float, seed: int) -> Path:
        """The control of ``seed``: MLE from ``mle_dir`` for the RL phase's budget (``control``)."""
        out_dir = self.seed_dir(seed)
        budget = control_budget(self.cfg, out_dir / "trainer" / "train_log.jsonl", seconds)
        path, result, device = continue_mle(
            self.cfg, s, mle_dir, budget=budget, seed=seed, out_dir=out_dir
        )
        self.summary["devices"]["baseline"] = {"device": device, "precision": "fp32"}
        fields = {"seed": seed, **budget, **result.summary()}
        self.summary.setdefault("baseline", {"by_seed": {}})["by_seed"][str(seed)] = fields
        self._phase("baseline", result.seconds, fields)
        return path

    # ------------------------------------------------------------ evaluation

    def evaluate(
        self,
        s: VideoSetup,
        name: str,
        weights: Path,
        *,
        sampling: SamplingChoice,
        seed: int,
        baselines: bool = False,
        on: EvalSet | None = None,
        folder: Path | None = None,
    ) -> dict[str, Any]:
        """The report of the model in ``weights`` on the held-out clips (or ``on``) in
        ``<folder or run dir>/eval/<name>/``, with the action-reading measures of its frames
        (``reading.frame_scores``); ``baselines`` also scores the tokenizer ceiling and copying
        the last frame. ``eval.json`` keeps every clip."""
        import torch

        on = on or EvalSet(s.test_clips, s.test_sequences, s.test_states)
        torch.set_num_threads(self.cfg.mle.torch_threads)
        t0 = time.perf_counter()
        model = evaluation.load_model(weights, self.cfg.run.device)
        self._device("evaluation", model)
        report = evaluation.evaluate_model(
            model,
            s,
            (on.clips, on.sequences),
            self.cfg,
            sampling=sampling,
            seed=self.cfg.eval.seed + seed,
            baselines=baselines,
            out_dir=(folder or self.run_dir) / "eval" / name,
            frame_scores=reading.frame_scores(
                on.clips, predicted_rows(self.cfg), on.states, s.reader
            ),
        )
        self._phase(f"eval_{name}", time.perf_counter() - t0)
        return report

    def shuffled(self, s: VideoSetup) -> EvalSet:
        """The held-out clips with their actions shuffled among them (the frames and the true
        states stay): what every model is also evaluated on when ``eval.shuffled_actions``."""
        c = self.cfg
        clips = evaluation.shuffle_actions(s.test_clips, c.data.seed)
        sequences = encode(
            clips,
            s.frame_tokenizer,
            s.quantizer,
            s.vocab,
            c.model.segment_frames,
            hold_below=c.tokenizer.hold_below,
        )
        return EvalSet(clips, sequences, s.test_states)

    def tune(self, s: VideoSetup, mle_dir: Path) -> SamplingChoice:
        """The sampling of every evaluation: the best ``eval.candidates`` on the validation
        clips with the MLE model, or ``eval.temperature`` / ``top_k`` without candidates."""
        options = evaluation.candidates_of(self.cfg.eval)
        if len(options) == 1:
            return options[0]
        seed, val = self.cfg.run.seed, EvalSet(s.val_clips, s.val_sequences, s.val_states)
        results = [
            (
                o,
                self.evaluate(
                    s,
                    f"validation/t{o.temperature:g}_k{o.top_k}",
                    mle_dir,
                    sampling=o,
                    seed=seed,
                    on=val,
                ),
            )
            for o in options
        ]
        evaluation.write_tuning(self.run_dir / "eval" / "validation.json", results)
        chosen = evaluation.best_sampling(results)
        self.summary["sampling"] = {"chosen": chosen.model_dump(), "tuned_on": len(s.val_clips)}
        return chosen

    # ------------------------------------------------------------ all

    async def run_async(self) -> dict[str, Any]:
        import torch

        t0 = time.perf_counter()
        c = self.cfg
        torch.set_num_threads(c.mle.torch_threads)  # the tokenizer's training too
        train, val, test = self.data()
        idm = self.idm()
        s = self.setup(train, val, test, self.tokenizer(train, test), idm)
        mle = self.mle(s)
        sampling = self.tune(s, mle)
        self.summary.setdefault("sampling", {})["used"] = sampling.model_dump()
        seed = c.run.seed
        start = self.evaluate(s, "mle", mle, sampling=sampling, seed=seed, baselines=True)
        shuffled = self.shuffled(s) if c.eval.shuffled_actions else None
        runs: dict[str, list[dict[str, Any]]] = {name: [] for name in EVALUATED}
        runs["mle"].append(start)
        if shuffled is not None:
            runs["mle_shuffled_actions"].append(
                self.evaluate(
                    s, "mle_shuffled_actions", mle, sampling=sampling, seed=seed, on=shuffled
                )
            )
        models = {"mle": mle}
        weights = self.reward_weights(s, mle)
        for seed in self.seeds:
            folder = self.seed_dir(seed)
            models["rlvr"], rl_seconds = await self.rl(s, mle, seed, weights)
            if c.baseline.enabled:
                models["mle_continued"] = self.baseline(s, mle, rl_seconds, seed)
            for name in ("rlvr", "mle_continued"):
                if name not in models:
                    continue
                runs[name].append(
                    self.evaluate(
                        s, name, models[name], sampling=sampling, seed=seed, folder=folder
                    )
                )
                if shuffled is not None:
                    runs[f"{name}_shuffled_actions"].append(
                        self.evaluate(
                            s,
                            f"{name}_shuffled_actions",
                            models[name],
                            sampling=sampling,
                            seed=seed,
                            folder=folder,
                            on=shuffled,
                        )
                    )
        if runs["mle_continued"]:
            head, terms = evaluation.headlines(
                start,
                runs["mle_continued"],
                runs["rlvr"],
                seeds=self.seeds,
                perceptual=s.perceptual.metric,
                budget=c.baseline.budget,
            )
            self.summary["headline"], self.summary["headline_terms"] = head, terms
        self.read_actions(s, runs)
        evals = {k: evaluation.mean_report(v) for k, v in runs.items() if v}
        self.summary["eval"] = {k: _without_clips(v) for k, v in evals.items()}
        self.summary["wall_s"] = time.perf_counter() - t0
        write_run_report(c, self.run_dir, self.summary, s, models=models, sampling=sampling)
        (self.run_dir / "summary.json").write_text(json.dumps(self.summary, indent=2, default=str))
        self.log.write("end", wall_s=self.summary["wall_s"])
        self.log.close()
        return self.summary

    def read_actions(self, s: VideoSetup, runs: Mapping[str, list[dict[str, Any]]]) -> None:
        """``action_reading`` (``reading.action_reading``) of the start, the control and RLVR
        from their evaluations (``runs``: name -> one report per seed), into the summary and
        the headline."""
        pairs = {
            model: (runs[name], runs[f"{name}_shuffled_actions"] or None)
            for model, name in (("start", "mle"), ("control", "mle_continued"), ("rlvr", "rlvr"))
            if runs[name]
        }
        start = runs["mle"][0]
        baselines = {
            "copy_last_frame": reading.baseline_measures(start, "raw_copy_"),
            "copy_last_frame_tokens": reading.baseline_measures(start, "copy_"),
            "tokenizer_ceiling": reading.baseline_measures(start, "recon_"),
        }
        rows = predicted_rows(self.cfg)
        measure = reading.frame_scores(s.test_clips, rows, s.test_states, s.reader)
        if measure is not None:
            baselines["true_frames"] = reading.true_frame_scores(s.test_clips, rows, measure)
        found = reading.action_reading(
            pairs, seeds=self.seeds, baselines=baselines, seed=self.cfg.run.seed
        )
        self.summary["action_reading"] = found
        if "headline" in self.summary:
            self.summary["headline"]["action_reading"] = found


def _without_clips(report: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in report.items() if not k.startswith("per_clip")}


def run_video_pipeline(cfg: VideoPipelineConfig, config_path: str = "") -> dict[str, Any]:
    """Run the video pipeline (module docstring); returns the summary (also ``summary.json``)."""
    return asyncio.run(VideoRun(cfg, config_path).run_async())
