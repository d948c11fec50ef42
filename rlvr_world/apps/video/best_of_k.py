"""``rlvr-world run CONFIG`` with ``task: video_best_of_k``: test-time scaling of a finished video
run's world models (the paper's best-of-k analysis, section 6.3).

For each held-out clip, each model (the run's MLE model, ``base``, and one seed's GRPO
checkpoint, ``rlvr``) samples ``max(ks)`` next frames with ``sampling``, sample ``j`` with the
sampling seed ``run.seed * 100_003 + j`` for both models; each is decoded and scored on every
metric exactly as the run's held-out evaluation scores it (``apps.video.evaluation``: the run's
perceptual metric, context-anchored frames where the run anchors them). Best-of-k takes, per
clip and per metric, the best of the first ``k`` samples (the largest reward, PSNR and SSIM; the
smallest L1, MSE and perceptual distance): an oracle choice with the true frame, the upper bound
of picking among ``k`` samples. The curves are nested (the first ``k`` samples are the first ones
of any larger ``k``), so each is monotone in ``k`` by construction.

What it reads: ``source.run_dir`` of a ``task: video`` run (its ``config.json``, or
``source.config`` for runs written before it existed; ``tokenizer/``, ``model/mle``,
``seed<source.seed>/trainer``'s last checkpoint, ``data/`` episodes) unless ``models`` names the
folders. The held-out clips are the run's (``data.seed`` alone decides them); ``clips`` of them
are used, a seeded draw (the same for every ``run.seed``).

What it writes to ``run.run_dir``: ``samples.json`` (every sample's metrics per clip),
``summary.json`` (``headline``: the reward's best-of-k means of both models per ``k``, the paired
bootstrap interval of RLVR - base per ``k`` over clips, and ``base_k_to_match_rlvr_1``, the
smallest ``k`` at which the base model's best-of-k reaches RLVR's single sample; ``curves``: the
same for every metric), ``report.md`` (one table per metric) and ``best_of_k.png`` (one panel
per metric, ``k`` on a log axis).

It does not train; the models must exist (a clear error names what is missing).
"""

from __future__ import annotations

import itertools
import json
import logging
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, Self

import numpy as np
from numpy.typing import NDArray
from pydantic import Field, model_validator

from rlvr_world.apps.run.configfile import Section, read_config
from rlvr_world.apps.video.config import SamplingChoice, VideoPipelineConfig, placed
from rlvr_world.apps.video.source import SourceSection, source_config
from rlvr_world.devices import TorchThreads

logger = logging.getLogger(__name__)

#: The compared models, in table order.
MODELS = ("base", "rlvr")
#: Multiplier separating the sampling seeds of two ``run.seed`` values.
SEED_STRIDE = 100_003
#: Most samples per clip (``max(ks)``).
MAX_K = 10_000
#: Metrics where higher is better; every other per-clip metric is a loss.
HIGHER_IS_BETTER = frozenset({"reward", "psnr", "ssim"})
#: Per-clip keys of an evaluation report that are not metrics.
NOT_METRICS = frozenset({"repeated"})


class ModelsSection(Section):
    """Model folders, when not the source run's own."""

    base: Path | None = Field(default=None, description="default: <run_dir>/model/mle")
    rlvr: Path | None = Field(
        default=None, description="default: <run_dir>/seed<seed>/trainer's last checkpoint"
    )


class BestOfKRun(Section):
    run_dir: Path = Field(default=Path("runs/video_best_of_k"), description="everything written")
    seed: int = Field(default=0, ge=0, description="sampling seeds: seed * 100003 + j")
    resamples: int = Field(default=10_000, ge=100, le=1_000_000, description="bootstrap draws")
    torch_threads: TorchThreads = 1


class BestOfKSection(Section):
    """What is sampled: ``max(ks)`` frames per clip and model, with this sampling."""

    ks: tuple[int, ...] = Field(default=(1, 5, 20, 100), description="increasing, from 1")
    clips: int = Field(default=16, ge=1, le=100_000, description="held-out clips used")
    temperature: float = Field(default=1.0, gt=0.0, le=10.0, description="> 0: samples differ")
    top_k: int = Field(default=100, ge=0, le=1_000_000, description="0 is off")

    @model_validator(mode="after")
    def _ks(self) -> Self:
        ks = self.ks
        if not ks or ks[0] != 1 or any(b <= a for a, b in itertools.pairwise(ks)):
            raise ValueError(f"best_of_k.ks: must start at 1 and strictly increase, got {list(ks)}")
        if ks[-1] > MAX_K:
            raise ValueError(f"best_of_k.ks: at most {MAX_K} samples per clip, got {ks[-1]}")
        return self

    @property
    def sampling(self) -> SamplingChoice:
        return SamplingChoice(temperature=self.temperature, top_k=self.top_k)


class BestOfKConfig(Section):
    """``task: video_best_of_k``; every field has bounds, unknown fields are refused."""

    task: Literal["video_best_of_k"] = "video_best_of_k"
    source: SourceSection
    models: ModelsSection = Field(default_factory=ModelsSection)
    best_of_k: BestOfKSection = Field(default_factory=BestOfKSection)
    run: BestOfKRun = Field(default_factory=BestOfKRun)


def load_best_of_k_config(path: Path, overrides: dict[str, Any] | None = None) -> BestOfKConfig:
    """Read ``path`` (YAML), apply ``section.field`` overrides, validate."""
    data = read_config(path, overrides)
    return BestOfKConfig.model_validate(data)


def model_paths(cfg: BestOfKConfig, video: VideoPipelineConfig) -> dict[str, Path]:
    """``{"base": folder, "rlvr": folder}`` (the base model: ``models.base``, else the source
    run's ``mle.path``, else its ``model/mle``); ``FileNotFoundError`` for a missing one."""
    from rlvr_world.apps.video.rl import final_checkpoint

    run_dir = cfg.source.run_dir
    base = cfg.models.base or video.mle.path or run_dir / "model" / "mle"
    if cfg.models.rlvr is not None:
        rlvr = cfg.models.rlvr
    else:
        trainer = run_dir / f"seed{cfg.source.seed}" / "trainer"
        if not trainer.is_dir():
            raise FileNotFoundError(
                f"{trainer}: no GRPO run of seed {cfg.source.seed} in {run_dir} (source.seed)"
            )
        rlvr = final_checkpoint(trainer)
    paths = {"base": base, "rlvr": rlvr}
    for name, path in paths.items():
        if not (path / "config.json").is_file():
            raise FileNotFoundError(f"models.{name} {path}: no saved model (config.json) there")
    return paths


# --------------------------------------------------------------------------------------------
# The curves


def direction(metric: str) -> bool:
    """True when higher is better for ``metric``."""
    return metric in HIGHER_IS_BETTER


def best_of_k(samples: NDArray[np.float64], ks: Sequence[int], higher: bool) -> NDArray[np.float64]:
    """``(len(ks), clips)``: per clip, the best of the first ``k`` of ``samples`` ``(K, clips)``
    (the largest when ``higher``, else the smallest). ``ValueError`` when a ``k`` exceeds ``K``
    or is below 1."""
    arr = np.asarray(samples, dtype=np.float64)
    if arr.ndim != 2 or arr.shape[0] == 0:  # noqa: PLR2004 (samples x clips)
        raise ValueError(f"samples: expected (samples, clips), got shape {arr.shape}")
    if any(k < 1 or k > arr.shape[0] for k in ks):
        raise ValueError(f"ks {list(ks)}: each must be in [1, {arr.shape[0]}]")
    running = np.maximum.accumulate(arr, axis=0) if higher else np.minimum.accumulate(arr, axis=0)
    return np.stack([running[k - 1] for k in ks])


def curves(
    samples: Mapping[str, Mapping[str, NDArray[np.float64]]],
    ks: Sequence[int],
    *,
    resamples: int,
    seed: int,
) -> dict[str, dict[str, Any]]:
    """Per metric: each model's best-of-k means per ``k`` and the paired bootstrap of RLVR -
    base per ``k`` over clips. ``samples[model][metric]`` is ``(K, clips)``."""
    from rlvr_world.stats import paired_bootstrap

    out: dict[str, dict[str, Any]] = {}
    for metric in samples["base"]:
        higher = direction(metric)
        best = {m: best_of_k(samples[m][metric], ks, higher) for m in MODELS}
        diffs = [
            paired_bootstrap(best["rlvr"][i], best["base"][i], resamples=resamples, seed=seed)
            for i in range(len(ks))
        ]
        out[metric] = {
            "higher_is_better": higher,
            **{m: [float(v) for v in best[m].mean(axis=1)] for m in MODELS},
            "rlvr_minus_base": [d.mean for d in diffs],
            "ci95": [d.as_list() for d in diffs],
        }
    return out


def k_to_match(
    base: Sequence[float], rlvr_one: float, ks: Sequence[int], higher: bool
) -> int | None:
    """The smallest ``k`` at which the base model's best-of-k is at least as good as RLVR's
    single sample; None when no ``k`` in ``ks`` gets there."""
    for k, value in zip(ks, base, strict=True):
        if (value >= rlvr_one) if higher else (value <= rlvr_one):
            return int(k)
    return None


# --------------------------------------------------------------------------------------------
# Sampling


def sample_metrics(
    cfg: BestOfKConfig, video: VideoPipelineConfig, paths: Mapping[str, Path]
) -> tuple[dict[str, dict[str, NDArray[np.float64]]], dict[str, Any]]:
    """``samples[model][metric]`` ``(max k, clips)`` and facts of the setup (clips, metric)."""
    import torch

    from rlvr_world.apps.video import evaluation
    from rlvr_world.apps.video.episodes import run_episodes, split_data, spread
    from rlvr_world.apps.video.setup import build_setup
    from rlvr_world.video.world_model import read_spec

    torch.set_num_threads(cfg.run.torch_threads)
    tokenizer_dir = video.tokenizer.path or video.run.run_dir / "tokenizer"
    if not (tokenizer_dir / "config.json").is_file():
        raise FileNotFoundError(f"{tokenizer_dir}: the run's frame tokenizer is not there")
    train, val, test = split_data(video.data, run_episodes(video.data, video.run.run_dir))
    s = build_setup(video, train, val, test, tokenizer_dir)
    spec = read_spec(paths["base"])
    if (spec.vocab, spec.tokens_per_frame) != (s.vocab, s.tokens_per_frame):
        raise ValueError(
            f"models.base {paths['base']}: its vocabulary or tokens per frame do not match the "
            "source config's tokenizer and model settings (a different run's config?)"
        )
    picked = spread(range(len(s.test_clips)), min(cfg.best_of_k.clips, len(s.test_clips)), 0)
    clips = ([s.test_clips[i] for i in picked], [s.test_sequences[i] for i in picked])
    kmax = cfg.best_of_k.ks[-1]
    out: dict[str, dict[str, NDArray[np.float64]]] = {}
    seconds: dict[str, float] = {}
    for name in MODELS:
        t0 = time.perf_counter()
        model = evaluation.load_model(paths[name], video.run.device)
        rows: dict[str, list[list[float]]] = {}
        for j in range(kmax):
            report = evaluation.evaluate_model(
                model,
                s,
                clips,
                video,
                sampling=cfg.best_of_k.sampling,
                seed=cfg.run.seed * SEED_STRIDE + j,
                baselines=False,
                out_dir=None,
            )
            for metric, values in report["per_clip"].items():
                if metric not in NOT_METRICS:
                    rows.setdefault(metric, []).append([float(v) for v in values])
        out[name] = {m: np.asarray(v, dtype=np.float64) for m, v in rows.items()}
        seconds[name] = time.perf_counter() - t0
        logger.info("%s: %d samples of %d clips in %.1f s", name, kmax, len(picked), seconds[name])
    facts = {
        "clips": len(picked),
        "held_out_clips": len(s.test_clips),
        "perceptual": s.perceptual.metric,
        "anchor_dilate": video.model.anchor_dilate,
        "seconds": seconds,
    }
    return out, facts


# --------------------------------------------------------------------------------------------
# Report


def _fmt(value: float) -> str:
    return f"{value:.4f}" if abs(value) < 10 else f"{value:.2f}"  # noqa: PLR2004 (PSNR in dB)


def write_report(run_dir: Path, summary: Mapping[str, Any]) -> None:
    """``report.md``: the headline sentence and one table per metric."""
    ks, head = summary["ks"], summary["headline"]
    lines = [
        "# Best-of-k: the base (MLE) and RLVR video world models",
        "",
        f"Source run: `{summary['source']['run_dir']}` (RLVR: seed {summary['source']['seed']}); "
        f"{head['n']} held-out clips, {ks[-1]} samples per clip and model at temperature "
        f"{summary['sampling']['temperature']:g}, top-k {summary['sampling']['top_k']}; best of "
        f"the first k samples per clip with the true frame (an oracle choice). 95% CIs: paired "
        f"bootstrap over clips, RLVR - base.",
        "",
        head["text"],
        "",
    ]
    for metric, c in summary["curves"].items():
        better = "higher" if c["higher_is_better"] else "lower"
        lines += [
            f"## {metric} ({better} is better)",
            "",
            "| k | base | RLVR | RLVR - base (95% CI) |",
            "|---|---|---|---|",
        ]
        for i, k in enumerate(ks):
            lo, hi = c["ci95"][i]
            zero = ", includes 0" if lo <= 0 <= hi else ""
            lines.append(
                f"| {k} | {_fmt(c['base'][i])} | {_fmt(c['rlvr'][i])} | "
                f"{c['rlvr_minus_base'][i]:+.4f} [{lo:+.4f}, {hi:+.4f}]{zero} |"
            )
        lines.append("")
    (run_dir / "report.md").write_text("\n".join(lines))


def write_plot(path: Path, ks: Sequence[int], curves_: Mapping[str, Mapping[str, Any]]) -> None:
    """``best_of_k.png``: one panel per metric, both models' best-of-k mean against ``k``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    metrics = list(curves_)
    cols = min(3, len(metrics))
    rows = -(-len(metrics) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4 * cols, 3 * rows), squeeze=False)
    for ax, metric in zip(axes.flat, metrics, strict=False):
        c = curves_[metric]
        for name, label in (("base", "base (MLE)"), ("rlvr", "RLVR")):
            ax.plot(ks, c[name], marker="o", label=label)
        ax.set_xscale("log")
        ax.set_xticks(list(ks), [str(k) for k in ks])
        ax.set_xlabel("k (samples)")
        ax.set_title(f"{metric} ({'higher' if c['higher_is_better'] else 'lower'} is better)")
        ax.legend(fontsize=8)
    for ax in list(axes.flat)[len(metrics) :]:
        ax.axis("off")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def headline(
    curves_: Mapping[str, Mapping[str, Any]], ks: Sequence[int], n: int, seed: int, metric: str
) -> dict[str, Any]:
    """The summary's ``headline``: the reward's curves, intervals and the matching ``k``."""
    c = curves_["reward"]
    match = k_to_match(c["base"], c["rlvr"][0], ks, True)
    lo, hi = c["ci95"][0]
    text = (
        f"Best of 1: base {c['base'][0]:.4f}, RLVR {c['rlvr'][0]:.4f}, RLVR - base "
        f"{c['rlvr_minus_base'][0]:+.4f} [{lo:+.4f}, {hi:+.4f}]"
        f"{' (includes 0)' if lo <= 0 <= hi else ''}; best of {ks[-1]}: base "
        f"{c['base'][-1]:.4f}, RLVR {c['rlvr'][-1]:.4f}. "
        + (
            f"The base model's best of {match} reaches RLVR's single sample."
            if match is not None
            else f"No base best-of-k up to {ks[-1]} reaches RLVR's single sample."
        )
    )
    return {
        "metric": metric,
        "n": n,
        "seeds": [seed],
        "ks": list(ks),
        "base": c["base"],
        "rlvr": c["rlvr"],
        "rlvr_minus_base": c["rlvr_minus_base"],
        "ci95": c["ci95"],
        "higher_is_better": True,
        "base_k_to_match_rlvr_1": match,
        "text": text,
    }


def run_best_of_k(cfg: BestOfKConfig, config_path: str = "") -> dict[str, Any]:
    """Everything in the module docstring; returns the summary (also ``summary.json``)."""
    t0 = time.perf_counter()
    video, _ = placed(source_config(cfg.source))  # run.device resolved (cpu or cuda:N)
    paths = model_paths(cfg, video)
    out_dir = cfg.run.run_dir
    out_dir.mkdir(parents=True, exist_ok=True)
    samples, facts = sample_metrics(cfg, video, paths)
    ks = list(cfg.best_of_k.ks)
    curves_ = curves(samples, ks, resamples=cfg.run.resamples, seed=cfg.run.seed)
    metric = f"reward -(L1 + {facts['perceptual']}), best of k"
    summary: dict[str, Any] = {
        "config": config_path,
        "source": {"run_dir": str(cfg.source.run_dir), "seed": cfg.source.seed},
        "models": {k: str(v) for k, v in paths.items()},
        "ks": ks,
        "sampling": cfg.best_of_k.sampling.model_dump(),
        **facts,
        "headline": headline(curves_, ks, facts["clips"], cfg.run.seed, metric),
        "curves": curves_,
    }
    (out_dir / "samples.json").write_text(
        json.dumps({m: {k: v.tolist() for k, v in d.items()} for m, d in samples.items()}) + "\n"
    )
    write_report(out_dir, summary)
    write_plot(out_dir / "best_of_k.png", ks, curves_)
    summary["wall_s"] = time.perf_counter() - t0
    (out_dir / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    return summary
