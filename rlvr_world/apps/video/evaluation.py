"""Held-out evaluation of the video run: which metric, which sampling, which clips, the headline.

* ``reward_weights``: the ``rl.weights`` with the ``perceptual`` key resolved to the run's
  perceptual metric (``VideoEval.perceptual_metric``);
* ``load_model`` / ``evaluate_model``: load a saved world model; evaluate it on clips with one
  sampling (``rlvr_world.video.evaluate`` or ``multistep.evaluate_multistep``), writing
  ``eval.json`` when given a folder;
* ``tune_sampling``: try each ``eval.candidates`` sampling with the MLE model on the validation
  clips (never the test clips) and keep the one with the best reward;
* ``shuffle_actions``: the clips with their action rows permuted among them (the ablation that
  shows whether a model uses its actions);
* ``headlines``: the run's headline (the paper's reward ``-(L1 + perceptual)``) and one per term
  (L1, the perceptual distance, PSNR, SSIM, MSE), each with the paired bootstrap of RLVR minus
  the control over the held-out clips (``rlvr_world.stats``), from the per-clip scores.

What it does not do: no training and no plots; the phases of ``pipeline.VideoRun`` call it.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from rlvr_world.apps.video.config import (
    PERCEPTUAL,
    SamplingChoice,
    VideoEval,
    VideoPipelineConfig,
    VideoRl,
)
from rlvr_world.stats import build_headline

if TYPE_CHECKING:
    from transformers import PreTrainedModel

    from rlvr_world.apps.video.setup import VideoSetup
    from rlvr_world.video.data import ClipArrays
    from rlvr_world.video.evaluate import FrameScores
    from rlvr_world.video.layout import TokenSequence

logger = logging.getLogger(__name__)

#: (metric, higher is better) of the headline terms, after the reward itself.
TERMS = (("l1", False), ("mse", False), ("psnr", True), ("ssim", True))


def reward_weights(rl: VideoRl, metric: str) -> dict[str, float]:
    """``rl.weights`` with the ``perceptual`` key renamed to ``metric``."""
    return {(metric if k == PERCEPTUAL else k): float(w) for k, w in rl.weights.items()}


def shuffle_actions(clips: Sequence[ClipArrays], seed: int) -> list[ClipArrays]:
    """The clips with their action arrays permuted among them (frames unchanged)."""
    order = np.random.default_rng(seed).permutation(len(clips))
    return [(frames, clips[int(j)][1]) for (frames, _), j in zip(clips, order, strict=True)]


def load_model(weights: Path, device: str) -> PreTrainedModel:
    """The saved world model in ``weights`` (a model folder or a trainer checkpoint), float32,
    on ``device``, in eval mode."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(weights), dtype=torch.float32)
    model.to(device)  # type: ignore[arg-type]
    model.eval()  # type: ignore[no-untyped-call]
    return model


def evaluate_model(  # noqa: PLR0913 (the model, setup and clips, then one keyword per option)
    model: PreTrainedModel,
    s: VideoSetup,
    clips: tuple[Sequence[ClipArrays], Sequence[TokenSequence]],
    cfg: VideoPipelineConfig,
    *,
    sampling: SamplingChoice,
    seed: int,
    baselines: bool,
    out_dir: Path | None,
    frame_scores: FrameScores | None = None,
) -> dict[str, Any]:
    """The held-out report (``evaluate.evaluate`` keys, ``per_clip`` included) of ``model`` on
    ``clips`` (clips and their token sequences), with the setup's tokenizer, vocabulary,
    quantizer and perceptual scorer; multi-step (over ``model.segment_frames``) when
    ``model.layout`` is ``multi_step``; ``frame_scores``: extra measures of the predicted
    frames (``apps.video.reading``). ``out_dir`` None writes nothing."""
    from rlvr_world.video.evaluate import EvalConfig, evaluate
    from rlvr_world.video.layout import MultiStepVocab, SingleStepVocab
    from rlvr_world.video.multistep import evaluate_multistep

    held, sequences = clips
    vocab, perceptual = s.vocab, s.perceptual
    eval_cfg = EvalConfig(
        temperature=sampling.temperature,
        top_k=sampling.top_k,
        seed=seed,
        grid_rows=0,
        baselines=baselines,
        perceptual=perceptual.metric,
        net=perceptual.net,
        anchor_dilate=cfg.model.anchor_dilate,
    )
    if cfg.model.layout == "multi_step":
        if not isinstance(vocab, MultiStepVocab):
            raise ValueError("segment_frames: a multi-step evaluation needs a MultiStepVocab")
        return evaluate_multistep(
            model,
            s.frame_tokenizer,
            held,
            eval_cfg,
            vocab=vocab,
            quantizer=s.quantizer,
            segment_frames=cfg.model.segment_frames,
            perceptual=perceptual,
            out_dir=out_dir,
            sequences=sequences,
            frame_scores=frame_scores,
        )
    if not isinstance(vocab, SingleStepVocab):
        raise ValueError("vocab: a single-step evaluation needs a SingleStepVocab")
    return evaluate(
        model,
        s.per_frame,
        held,
        eval_cfg,
        vocab=vocab,
        quantizer=s.quantizer,
        perceptual=perceptual,
        out_dir=out_dir,
        sequences=sequences,
        frame_scores=frame_scores,
    )


def candidates_of(e: VideoEval) -> tuple[SamplingChoice, ...]:
    """The sampling settings to try: ``eval.candidates``, or the one given sampling."""
    return e.candidates or (SamplingChoice(temperature=e.temperature, top_k=e.top_k),)


def best_sampling(
    results: Sequence[tuple[SamplingChoice, Mapping[str, Any]]],
) -> SamplingChoice:
    """The candidate whose report has the highest ``reward`` (the first of equals)."""
    if not results:
        raise ValueError("results: no candidate was evaluated")
    best = max(range(len(results)), key=lambda i: (float(results[i][1]["reward"]), -i))
    return results[best][0]


def write_tuning(path: Path, results: Sequence[tuple[SamplingChoice, Mapping[str, Any]]]) -> None:
    """``validation.json``: every candidate's validation metrics and the chosen one."""
    keep = ("reward", "l1", "psnr", "ssim", "lpips", "stlpips", "token_copy_rate")
    rows = [
        {**choice.model_dump(), **{k: float(r[k]) for k in keep if k in r}} for choice, r in results
    ]
    chosen = best_sampling(results).model_dump()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"candidates": rows, "chosen": chosen}, indent=2) + "\n")


def _table(reports: Sequence[Mapping[str, Any]], key: str) -> np.ndarray:
    return np.array([r["per_clip"][key] for r in reports], dtype=np.float64)


def headlines(
    start: Mapping[str, Any],
    control: Sequence[Mapping[str, Any]],
    rlvr: Sequence[Mapping[str, Any]],
    *,
    seeds: Sequence[int],
    perceptual: str,
    budget: str = "wall_time",
) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """``(headline, terms)`` from the per-clip scores: ``start`` (the MLE report, with
    baselines), one report per seed of the control and of RLVR; ``budget``: the control's
    (``baseline.budget``). The headline's metric is the
    evaluation reward ``-(L1 + perceptual)``; ``terms`` has one headline per metric in
    ``(perceptual, *TERMS)``."""
    if len(control) != len(seeds) or len(rlvr) != len(seeds):
        raise ValueError(f"{len(control)} control and {len(rlvr)} RLVR reports for {len(seeds)}")
    if "per_clip_copy" not in start:
        raise ValueError("start: the MLE report needs the baselines (per_clip_copy)")

    def one(key: str, higher: bool) -> dict[str, Any]:
        copy = np.array(start["per_clip_copy"][key], dtype=np.float64)
        # the last frame's own pixels, no tokenizer (single-step reports have it)
        raw = start.get(f"raw_copy_{key}")
        pixels = {} if raw is None else {"copy_last_frame_pixels": float(raw)}
        scores = {
            "start": _table([start], key),
            "control": _table(control, key),
            "rlvr": _table(rlvr, key),
        }
        head = build_headline(
            key,
            seeds,
            scores,
            higher_is_better=higher,
            baselines={"copy_last_frame": float(copy.mean()), **pixels},
            control_budget=budget,
        ).to_dict()
        # the headline names the trivial baseline at the top level too
        head["copy_last_frame"] = head["baselines"]["copy_last_frame"]
        head["ci_mean"] = head["rlvr"] - head["control"]
        return head

    head = one("reward", True)
    head["metric"] = f"reward -(L1 + {perceptual})"
    terms = {key: one(key, higher) for key, higher in ((perceptual, False), *TERMS)}
    return head, terms


def _numbers(value: object) -> bool:
    """A number, or a list of numbers (not a bool)."""
    items = value if isinstance(value, list) else [value]
    return bool(items) and all(
        isinstance(v, int | float) and not isinstance(v, bool) for v in items
    )


def mean_report(reports: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The numeric means of several seeds' reports (``per_clip`` averaged per clip)."""
    if not reports:
        raise ValueError("reports: none")
    out: dict[str, Any] = {}
    for key, value in reports[0].items():
        if _numbers(value):
            # a share with nothing to count is None in some seeds (change_stats): left out
            counted = [r[key] for r in reports if _numbers(r.get(key))]
            out[key] = np.mean([np.asarray(v, dtype=np.float64) for v in counted], axis=0)
            out[key] = out[key].tolist() if isinstance(value, list) else float(out[key])
        elif value is None:
            counted = [r[key] for r in reports if _numbers(r.get(key))]
            out[key] = float(np.mean(counted)) if counted else None
        else:
            out[key] = value
    if "per_clip" in reports[0]:
        out["per_clip"] = {
            k: np.mean([r["per_clip"][k] for r in reports], axis=0).tolist()
            for k in reports[0]["per_clip"]
        }
    out["seeds"] = len(reports)
    return out
