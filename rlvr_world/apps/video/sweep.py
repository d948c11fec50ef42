"""``rlvr-world run CONFIG`` with ``task: video_sweep``: RLVR arms from one finished video run's
tokenizer and MLE model, each arm a set of config overrides (the paper's section 6.3 analyses:
``configs/experiments/video_group_size.yaml`` varies the group size G,
``configs/experiments/video_metric_rewards.yaml`` trains on one metric at a time,
``configs/experiments/video_action_reward.yaml`` adds the action-following terms).

Each arm is a ``task: video`` run (``apps.video.pipeline``) in ``<run_dir>/<arm>/`` of the source
run's config with ``tokenizer.path`` and ``mle.path`` set to the source run's (no tokenizer or
MLE training: every arm starts from the same weights), the source run's recorded episodes
(linked, not re-recorded), the sampling the source run used (no re-tuning: ``eval.candidates``
empty), no shuffled-actions ablation and, unless ``common`` turns it back on, no continued-MLE
control; the source run's IDM (``<source>/idm`` when it trained one, or its ``idm.path``) as
``idm.path``; then ``common`` and the arm's own overrides. Every arm is evaluated on the same
held-out clips with the same sampling seeds, so arms are compared clip by clip.

``control: true`` runs one continued-MLE control for all arms: the first arm runs it (per RL
seed, ``baseline.enabled`` on it alone), and every arm's headline compares its RLVR with that
control on the same clips (``evaluation.headlines``: RLVR - control with its paired bootstrap,
copying the last frame as a baseline) and carries its ``action_reading``
(``apps.video.reading``: the shuffle gaps, the agent-position error and the IDM's reading of
the start, the control and the arm, with intervals). The control's budget must not depend on the
arm: ``baseline.budget`` samples or steps, and the same ``rl.steps``, ``rl.groups_per_step`` and
``rl.group_size`` in every arm (refused otherwise, before anything runs).

What it writes to ``run.run_dir``: ``summary.json`` (``arms``: per arm the held-out means of
every metric, RLVR - start per metric with the paired bootstrap over clips, the train reward per
step (on the arm's own reward: not comparable across arms whose rewards differ), the
repetition rate of the start and of RLVR, the RL seconds, and with ``control`` the arm's
``headline`` and ``action_reading``; ``headline``: the reward per arm with its interval against
the start, and against the shared control with its shuffle gap and agent-position error),
``report.md`` (one table: arms x metrics; with ``control`` a second one: each arm against the
control, and how it reads its actions) and ``sweep.png``
(the train reward per step of every arm, and RLVR - start per metric with its interval).

It does not train the tokenizer or the MLE model; the source run must be finished.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, Self

import numpy as np
from pydantic import Field, model_validator

from rlvr_world.apps.run.configfile import Section, apply_overrides, read_config
from rlvr_world.apps.video.config import VideoPipelineConfig
from rlvr_world.apps.video.source import SourceSection, source_config
from rlvr_world.apps.video.sweep_control import arm_headlines, control_lines, with_shared_control
from rlvr_world.runlog import read_jsonl

logger = logging.getLogger(__name__)

#: Arm names become folder names.
ARM_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
#: Overrides an arm may not set: they would make it another run than the source's start.
FIXED = ("tokenizer.path", "mle.path", "run.run_dir", "data.")
#: Metrics in table order; the perceptual one is appended.
METRICS = ("reward", "l1", "mse", "psnr", "ssim")
HIGHER_IS_BETTER = frozenset({"reward", "psnr", "ssim"})
#: What the sweep's headline carries of each arm's action reading (with a shared control).
READING_KEYS = (
    "reward_shuffle_gap",
    "agent_error_px",
    "agent_error_px_shuffle_gap",
    "idm_acc",
    "idm_mae",
)
MIN_ARMS = 2


class SweepRun(Section):
    run_dir: Path = Field(default=Path("runs/video_sweep"), description="everything written")
    seed: int = Field(default=0, ge=0, description="run.seed of every arm")
    resamples: int = Field(default=10_000, ge=100, le=1_000_000, description="bootstrap draws")


class SweepConfig(Section):
    """``task: video_sweep``; every field has bounds, unknown fields are refused."""

    task: Literal["video_sweep"] = "video_sweep"
    source: SourceSection
    #: ``section.field`` overrides of every arm (e.g. ``rl.steps``).
    common: dict[str, Any] = Field(default_factory=dict)
    #: Arm name -> its ``section.field`` overrides, in table order.
    arms: dict[str, dict[str, Any]]
    control: bool = Field(
        default=False,
        description="one continued-MLE control for every arm, run with the first arm; each arm's "
        "headline then compares RLVR with it (module docstring)",
    )
    run: SweepRun = Field(default_factory=SweepRun)

    @model_validator(mode="after")
    def _arms(self) -> Self:
        if len(self.arms) < MIN_ARMS:
            raise ValueError(f"arms: a sweep compares at least {MIN_ARMS} arms")
        for name, overrides in {"common": self.common, **self.arms}.items():
            if name != "common" and not ARM_NAME.match(name):
                raise ValueError(
                    f"arms: {name!r} is not a folder name (letters, digits, _ . -; 64 at most)"
                )
            for key in overrides:
                if any(key == f or (f.endswith(".") and key.startswith(f)) for f in FIXED):
                    raise ValueError(
                        f"{'common' if name == 'common' else f'arms.{name}'}: {key} is fixed by "
                        "the sweep (every arm starts from the source run's tokenizer, MLE model "
                        "and data)"
                    )
        return self


def load_sweep_config(path: Path, overrides: dict[str, Any] | None = None) -> SweepConfig:
    """Read ``path`` (YAML), apply ``section.field`` overrides, validate."""
    data = read_config(path, overrides)
    return SweepConfig.model_validate(data)


def _source_sampling(src: Path, video: VideoPipelineConfig) -> dict[str, Any]:
    """The sampling the source run evaluated with (its summary's ``sampling.used``), else its
    config's ``eval.temperature`` / ``top_k``."""
    summary = src / "summary.json"
    if summary.is_file():
        used = json.loads(summary.read_text()).get("sampling", {}).get("used")
        if used:
            return {"eval.temperature": used["temperature"], "eval.top_k": used["top_k"]}
    return {"eval.temperature": video.eval.temperature, "eval.top_k": video.eval.top_k}


def arm_config(cfg: SweepConfig, name: str, video: VideoPipelineConfig) -> VideoPipelineConfig:
    """The ``task: video`` config of arm ``name`` (module docstring); ``FileNotFoundError`` when
    the source run has no tokenizer or MLE model."""
    src = cfg.source.run_dir
    tokenizer = video.tokenizer.path or src / "tokenizer"
    mle = video.mle.path or src / "model" / "mle"
    for what, path in (("tokenizer", tokenizer), ("MLE model", mle)):
        if not (path / "config.json").is_file():
            raise FileNotFoundError(f"{path}: the source run's {what} is not there")
    idm = video.idm.path or (src / "idm" if video.idm.train else None)
    if idm is not None and not (idm / "config.json").is_file():
        raise FileNotFoundError(f"{idm}: the source run's IDM is not there")
    fixed = {
        "tokenizer.path": str(tokenizer),
        "mle.path": str(mle),
        "run.run_dir": str(cfg.run.run_dir / name),
        "run.seed": cfg.run.seed,
        "run.seeds": 1,
        "eval.candidates": [],
        "eval.shuffled_actions": False,
        "baseline.enabled": False,
        **_source_sampling(src, video),
        **({"idm.path": str(idm), "idm.train": False} if idm is not None else {}),
    }
    data = video.model_dump(mode="json", exclude_unset=True)
    data = apply_overrides(apply_overrides(data, fixed), {**cfg.common, **cfg.arms[name]})
    return VideoPipelineConfig.model_validate(data)


def _link_data(src: Path, arm_dir: Path) -> None:
    """The arm's ``data/`` is the source run's (recorded episodes are not recorded again)."""
    data = src / "data"
    if not data.is_dir():
        return
    arm_dir.mkdir(parents=True, exist_ok=True)
    link = arm_dir / "data"
    if link.is_symlink() or link.exists():
        if link.resolve() != data.resolve():
            raise FileExistsError(f"{link}: exists and is not the source run's data folder")
        return
    link.symlink_to(data.resolve(), target_is_directory=True)


def _per_clip(arm: VideoPipelineConfig, seeds: Sequence[int], name: str) -> dict[str, np.ndarray]:
    """Per-clip metrics of ``name`` (``mle`` or ``rlvr``), averaged over the arm's seeds."""
    run_dir = arm.run.run_dir
    if name == "mle":
        paths = [run_dir / "eval" / "mle" / "eval.json"]
    else:
        paths = [run_dir / f"seed{s}" / "eval" / name / "eval.json" for s in seeds]
    reports = [json.loads(p.read_text())["per_clip"] for p in paths]
    return {k: np.mean([r[k] for r in reports], axis=0) for k in reports[0]}


def _train_curve(arm: VideoPipelineConfig, seeds: Sequence[int]) -> list[float]:
    """The trainer's mean train reward per step, averaged over the arm's seeds."""
    run_dir = arm.run.run_dir
    curves = []
    for s in seeds:
        log = read_jsonl(run_dir / f"seed{s}" / "trainer" / "train_log.jsonl")
        steps = [e for e in log if e.get("event") == "step"]
        curves.append([float(e["reward_mean"]) for e in steps])
    n = min(len(c) for c in curves)
    return [float(np.mean([c[i] for c in curves])) for i in range(n)]


def compare(
    start: Mapping[str, np.ndarray],
    arms: Mapping[str, Mapping[str, np.ndarray]],
    metrics: Sequence[str],
    *,
    resamples: int,
    seed: int,
) -> dict[str, dict[str, Any]]:
    """Per arm and metric: the held-out mean and RLVR - start with its paired bootstrap."""
    from rlvr_world.stats import paired_bootstrap

    out: dict[str, dict[str, Any]] = {}
    for name, per_clip in arms.items():
        row: dict[str, Any] = {}
        for m in metrics:
            diff = paired_bootstrap(per_clip[m], start[m], resamples=resamples, seed=seed)
            row[m] = {
                "rlvr": float(np.mean(per_clip[m])),
                "minus_start": diff.mean,
                "ci95": diff.as_list(),
                "higher_is_better": m in HIGHER_IS_BETTER,
            }
        out[name] = row
    return out


def write_report(out_dir: Path, summary: Mapping[str, Any]) -> None:
    """``report.md``: one row per arm, each metric with RLVR - start and its interval."""
    metrics, start = summary["metrics"], summary["start"]
    head = "| arm | " + " | ".join(
        f"{m} ({'higher' if m in HIGHER_IS_BETTER else 'lower'} is better)" for m in metrics
    )
    lines = [
        "# RLVR arms from one MLE start",
        "",
        f"Source run: `{summary['source']}`; {summary['headline']['n']} held-out clips, seeds "
        f"{summary['headline']['seeds']}. Each cell: the arm's held-out mean, then RLVR - start "
        "with its 95% CI (paired bootstrap over clips).",
        "",
        head + " | repetition rate | final train reward | RL s |",
        "|---" * (len(metrics) + 4) + "|",
        "| start (MLE) | "
        + " | ".join(f"{start[m]:.4f}" for m in metrics)
        + f" | {summary['start_repetition_rate']:.3f} | | |",
    ]
    for name, arm in summary["arms"].items():
        cells = []
        for m in metrics:
            c = arm["metrics"][m]
            lo, hi = c["ci95"]
            zero = ", includes 0" if lo <= 0 <= hi else ""
            cells.append(f"{c['rlvr']:.4f}; {c['minus_start']:+.4f} [{lo:+.4f}, {hi:+.4f}]{zero}")
        curve = arm["train_reward"]
        last = f"{np.mean(curve[-5:]):.4f}" if curve else ""
        rep = f"{arm['repetition_rate']:.3f}"
        lines.append(
            f"| {name} | " + " | ".join(cells) + f" | {rep} | {last} | {arm['rl_s']:.0f} |"
        )
    lines += control_lines(summary)
    lines.append("")
    (out_dir / "report.md").write_text("\n".join(lines))


def write_plot(path: Path, summary: Mapping[str, Any]) -> None:
    """``sweep.png``: the train reward per step of each arm, then RLVR - start per metric."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    metrics, arms = summary["metrics"], summary["arms"]
    panels = 1 + len(metrics)
    cols = min(4, panels)
    rows = -(-panels // cols)
    fig, grid = plt.subplots(rows, cols, figsize=(3.8 * cols, 3.2 * rows), squeeze=False)
    axes = list(grid.flat)
    ax = axes[0]
    for name, arm in arms.items():
        ax.plot(range(1, len(arm["train_reward"]) + 1), arm["train_reward"], label=name)
    ax.set_xlabel("GRPO step")
    ax.set_title("train reward")
    ax.legend(fontsize=7)
    for ax in axes[panels:]:
        ax.axis("off")
    for ax, m in zip(axes[1:panels], metrics, strict=True):
        names = list(arms)
        mids = [arms[n]["metrics"][m]["minus_start"] for n in names]
        lows = [mid - arms[n]["metrics"][m]["ci95"][0] for n, mid in zip(names, mids, strict=True)]
        highs = [arms[n]["metrics"][m]["ci95"][1] - mid for n, mid in zip(names, mids, strict=True)]
        ax.errorbar(range(len(names)), mids, yerr=[lows, highs], fmt="o", capsize=3)
        ax.axhline(0.0, color="grey", lw=0.8)
        ax.set_xticks(range(len(names)), names, rotation=30, fontsize=7)
        ax.set_title(f"{m}: RLVR - start")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _add_control(out: dict[str, Any], found: Mapping[str, Mapping[str, Any]]) -> None:
    """Each arm's headline against the shared control (``sweep_control.arm_headlines``) into
    the summary, and its gist into the sweep's headline."""
    head = out["headline"]
    for name, entry in found.items():
        out["arms"][name].update(entry)
        arm_head = entry["headline"]
        reading = arm_head["action_reading"]
        mine = reading["models"]["rlvr"]
        head["arms"][name] |= {
            "rlvr_minus_control": arm_head["rlvr"] - arm_head["control"],
            "ci95": arm_head["ci95"],
            "ci95_excludes_zero": arm_head["ci95_excludes_zero"],
            **{k: mine[k] for k in READING_KEYS if k in mine},
            "vs_control": {
                k: v for k, v in reading.get("rlvr_minus_control", {}).items() if k in READING_KEYS
            },
        }
    first = next(iter(found.values()))["headline"]
    head["control"], head["copy_last_frame"] = first["control"], first["copy_last_frame"]
    head["control_budget"] = first["control_budget"]
    models = first["action_reading"]["models"]
    for name in ("start", "control"):
        head[f"{name}_reading"] = {k: models[name][k] for k in READING_KEYS if k in models[name]}


def run_sweep(cfg: SweepConfig, config_path: str = "") -> dict[str, Any]:
    """Everything in the module docstring; returns the summary (also ``summary.json``)."""
    from rlvr_world.apps.video.pipeline import VideoRun

    t0 = time.perf_counter()
    video = source_config(cfg.source)
    out_dir = cfg.run.run_dir
    out_dir.mkdir(parents=True, exist_ok=True)
    arms = {name: arm_config(cfg, name, video) for name in cfg.arms}  # every config checked first
    if cfg.control:
        arms = with_shared_control(arms)
    per_clip: dict[str, dict[str, np.ndarray]] = {}
    facts: dict[str, dict[str, Any]] = {}
    start: dict[str, np.ndarray] | None = None
    perceptual = ""
    for name, arm in arms.items():
        logger.info("arm %s: %s", name, {**cfg.common, **cfg.arms[name]})
        _link_data(cfg.source.run_dir, arm.run.run_dir)
        summary = asyncio.run(VideoRun(arm, f"{config_path} arm {name}").run_async())
        seeds = [arm.run.seed + i for i in range(arm.run.seeds)]
        perceptual = summary["perceptual"]["metric"]
        if start is None:
            start = _per_clip(arm, seeds, "mle")
        per_clip[name] = _per_clip(arm, seeds, "rlvr")
        facts[name] = {
            "overrides": {**cfg.common, **cfg.arms[name]},
            "train_reward": _train_curve(arm, seeds),
            "rl_s": float(sum(r["seconds"] for r in summary["rl"]["by_seed"].values())),
            # clips (multi-step: generated frames) that copy the frame before them
            "repetition_rate": float(summary["eval"]["rlvr"]["repetition_rate"]),
            "start_repetition_rate": float(summary["eval"]["mle"]["repetition_rate"]),
            "seeds": seeds,
        }
    assert start is not None
    metrics = [*METRICS, perceptual]
    rows = compare(start, per_clip, metrics, resamples=cfg.run.resamples, seed=cfg.run.seed)
    n = len(start["reward"])
    seeds = sorted({s for f in facts.values() for s in f["seeds"]})
    out: dict[str, Any] = {
        "config": config_path,
        "source": str(cfg.source.run_dir),
        "metrics": metrics,
        "start": {m: float(np.mean(start[m])) for m in metrics},
        "start_repetition_rate": next(iter(facts.values()))["start_repetition_rate"],
        "arms": {name: {**facts[name], "metrics": rows[name]} for name in arms},
        "headline": {
            "metric": f"reward -(L1 + {perceptual})",
            "n": n,
            "seeds": seeds,
            "start": float(np.mean(start["reward"])),
            "arms": {
                name: {
                    "rlvr": rows[name]["reward"]["rlvr"],
                    "ci95_vs_start": rows[name]["reward"]["ci95"],
                }
                for name in arms
            },
            "higher_is_better": True,
        },
    }
    if cfg.control:
        _add_control(out, arm_headlines(arms, perceptual, seed=cfg.run.seed))
    write_report(out_dir, out)
    write_plot(out_dir / "sweep.png", out)
    out["wall_s"] = time.perf_counter() - t0
    (out_dir / "summary.json").write_text(json.dumps(out, indent=2) + "\n")
    return out
