"""``rlvr-world run CONFIG [--set section.field=value ...]``: the one-command pipeline.

Only argparse at import time; the pipeline (torch, grpc, redis) loads in ``run_run``.
``rlvr_world.apps.cli`` registers ``add_run_parser`` (and ``pool``, ``orchestrate``,
``train-run``); ``python -m rlvr_world.apps.commands`` works too.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from rlvr_world.apps.run.configfile import add_config_arguments
from rlvr_world.apps.subcommand import add_command, lazy
from rlvr_world.scaffold.cli import resolve

if TYPE_CHECKING:
    from rlvr_world.scaffold.cli import Subparsers


def _add_run_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    add_config_arguments(
        parser,
        "pipeline YAML (configs/pipeline/*.yaml; task: video runs configs/video/*.yaml, "
        "the analyses configs/experiments/*.yaml)",
        "override a field, e.g. --set rl.steps=4 (value parsed as JSON, else a string)",
    )
    return parser


def add_run_parser(sub: Subparsers) -> argparse.ArgumentParser:
    """Register ``run`` on the ``rlvr-world`` subcommands."""
    parser = add_command(
        sub,
        "run",
        run_run,
        help="run the whole pipeline: services, SFT, held-out eval, GRPO, eval, report",
        description="Starts embedded Redis and the services on loopback, runs SFT (if "
        "configured), evaluates, trains with GRPO through the orchestrator, evaluates again and "
        "writes a run directory with report.md.",
    )
    return _add_run_arguments(parser)


def add_pool_parser(sub: Subparsers) -> argparse.ArgumentParser:
    """Register ``pool`` on the ``rlvr-world`` subcommands."""
    parser = add_command(
        sub,
        "pool",
        run_pool,
        help="one headline over several seeds of a language or video run (paired bootstrap "
        "over items)",
        description="Reads each run directory's summary.json and eval_{start,control,rlvr}.jsonl "
        "(runs of one config with different run.seed), keeps the items every model of every run "
        "answered, averages each item over the seeds and prints the pooled headline; then the "
        "seed-level comparison (each run on all its own items, a Student-t interval over the "
        "seeds), the one that remains when seeds drew different items (the text game). Video "
        "runs (config.json task: video) are read from their per-clip eval.json reports: each "
        "run's RL seeds are averaged per clip, then the runs, with copying the last frame as "
        "the baseline and one headline per metric.",
    )
    parser.add_argument("runs", type=Path, nargs="+", help="run directories (at least 2)")
    parser.add_argument("--out", type=Path, default=None, help="write the pooled JSON here")
    return parser


def pool_any(run_dirs: Sequence[Path]) -> dict[str, Any]:
    """The pooled headline of video runs (``apps.video.pool``) or language runs
    (``apps.pipeline.pool``), by what the first run directory holds."""
    from rlvr_world.apps.pipeline.pool import pool_runs
    from rlvr_world.apps.video.pool import is_video_run, pool_video_runs

    if run_dirs and any(is_video_run(d) for d in run_dirs):
        return pool_video_runs(run_dirs)
    return pool_runs(run_dirs)


def run_pool(args: argparse.Namespace) -> int:
    """``rlvr-world pool RUN...``: print the pooled headline (``--out``: write it as JSON); 0, or
    2 with the reason when the runs cannot be pooled."""
    from rlvr_world.stats import PoolError

    try:
        pooled = pool_any(args.runs)
    except PoolError as exc:
        print(f"rlvr-world pool: {exc}")
        return 2
    head = pooled["headline"] or {"splits": {}}
    # video rewards differ in the thousandths
    d = 4 if pooled.get("task") == "video" else 3
    print(pooled["headline_text"])
    for seed, means in pooled["per_seed"].items():
        copy = means.get("copy_last_frame")
        print(
            f"seed {seed}: start {means['start']:.{d}f}, control {means['control']:.{d}f}, "
            f"RLVR {means['rlvr']:.{d}f}" + ("" if copy is None else f", copy {copy:.{d}f}")
        )
    for name, term in pooled.get("headline_terms", {}).items():
        low, high = term["ci95"]
        print(
            f"{name}: start {term['start']:.{d}f}, control {term['control']:.{d}f}, RLVR "
            f"{term['rlvr']:.{d}f}, copy {term['copy_last_frame']:.{d}f}; RLVR - control "
            f"[{low:+.{d}f}, {high:+.{d}f}]"
            + ("" if term["higher_is_better"] else " (lower is better)")
        )
    for name, split in head["splits"].items():
        low, high = split["ci95"]
        print(
            f"{name} (n = {split['n']}): start {split['start']:.3f}, control "
            f"{split['control']:.3f}, RLVR {split['rlvr']:.3f}, RLVR - control "
            f"{split['rlvr_minus_control']:+.3f} [{low:+.3f}, {high:+.3f}]"
        )
    seeds = pooled["across_seeds"]
    for name in ("all", "changed", "unchanged"):
        if name not in seeds:
            continue
        part = seeds[name]
        for key, label in (
            ("rlvr_minus_control", "RLVR - control"),
            ("rlvr_minus_start", "RLVR - start"),
            ("rlvr_minus_copy", "RLVR - copy"),
            ("control_minus_copy", "control - copy"),
        ):
            if key not in part:
                continue
            diff = part[key]
            low, high = diff["ci95"]
            note = "" if diff["ci95_excludes_zero"] else ", includes 0"
            print(
                f"across seeds, {name} (seeds as units, each on its own items): {label} "
                f"{diff['mean']:+.{d}f} [{low:+.{d}f}, {high:+.{d}f}]{note}; per seed "
                + ", ".join(f"{v:+.{d}f}" for v in diff["per_seed"])
            )
    for line in _reading_lines(pooled.get("action_reading")):
        print(line)
    if args.out is not None:
        args.out.write_text(json.dumps(pooled, indent=1))
    return 0


#: The shuffle gaps ``rlvr-world pool`` prints (``apps.video.reading``'s keys, labels).
_GAPS = (("reward_shuffle_gap", "reward"), ("agent_error_px_shuffle_gap", "agent error px"))


def _reading_lines(reading: dict[str, Any] | None) -> list[str]:
    """The shuffle gaps of a pooled video headline's ``action_reading``, one line per model."""
    lines = []
    for name, model in ((reading or {}).get("models") or {}).items():
        parts = []
        for key, label in _GAPS:
            if key in model:
                low, high = model[key]["ci95"]
                parts.append(f"{label} {model[key]['mean']:+.4f} [{low:+.4f}, {high:+.4f}]")
        if parts:
            lines.append(f"{name}: shuffle gap (true vs shuffled actions) " + ", ".join(parts))
    return lines


def run_run(args: argparse.Namespace) -> int:
    """``rlvr-world run CONFIG``: run the config's task until done (SIGTERM / SIGHUP stop it
    cleanly); the runner's exit status, or 2 with the reason when refused at the start."""
    from rlvr_world.apps.supervisor import exits_on_termination
    from rlvr_world.devices import DeviceUnavailable

    # SIGTERM / SIGHUP unwind the run, so every process and Redis it started is stopped.
    with exits_on_termination():
        try:
            return _run_task(args)
        except DeviceUnavailable as exc:  # refused at the start, before any work
            print(f"rlvr-world run: error: {exc}", file=sys.stderr)
            return 2


def _run_task(args: argparse.Namespace) -> int:
    """The config checked first (every bad field, a missing or unreadable file: exit 2 with the
    reason and no traceback), then the task's runner."""
    import yaml
    from pydantic import ValidationError

    from rlvr_world.apps.run.configfile import parse_overrides, read_config_mapping
    from rlvr_world.rewards.dispatch import describe_validation_error

    try:
        overrides = parse_overrides(args.overrides)
        task = str(read_config_mapping(args.config).get("task") or "text_game")
        loader = CONFIG_LOADERS.get(task, CONFIG_LOADERS["text_game"])
        load = cast("Callable[[Path, dict[str, Any]], object]", resolve(loader))
        load(args.config, overrides)  # validates; the runner reads the config again
    except ValidationError as exc:
        print(
            f"rlvr-world run: error: {args.config}: {describe_validation_error(exc)}",
            file=sys.stderr,
        )
        return 2
    except (OSError, ValueError, yaml.YAMLError) as exc:
        print(f"rlvr-world run: error: {args.config}: {exc}", file=sys.stderr)
        return 2
    runner = RUNNERS.get(task, run_language)  # the language pipeline validates its own task
    return runner(args.config, task, overrides)


def run_language(path: Path, task: str, overrides: dict[str, Any]) -> int:
    """``task: text_game`` / ``web``: the language world-model pipeline
    (``rlvr_world.apps.pipeline.runner``)."""
    from rlvr_world.apps.pipeline.config import load_pipeline_config
    from rlvr_world.apps.pipeline.runner import run_pipeline
    from rlvr_world.apps.pipeline.tasks import task_of

    cfg = load_pipeline_config(path, overrides)
    summary = run_pipeline(cfg, str(path))
    evals = summary.get("eval", {})
    recipe = task_of(cfg)
    for name, report in evals.items():
        print(recipe.eval_line(name, report))
    if "headline_text" in summary:
        print(summary["headline_text"])
    print(
        f"{summary['trainer_steps']} GRPO steps, {summary['samples_per_s']:.2f} samples/s, "
        f"wall {summary['wall_s']:.0f}s; report: {cfg.run.run_dir / 'report.md'}"
    )
    return 0 if summary.get("trainer_exit") == 0 else 1


def run_video(path: Path, task: str, overrides: dict[str, Any]) -> int:
    """``task: video``: the video world model pipeline (``rlvr_world.apps.video.pipeline``)."""
    from rlvr_world.apps.video.config import load_video_config
    from rlvr_world.apps.video.pipeline import run_video_pipeline

    cfg = load_video_config(path, overrides)
    summary = run_video_pipeline(cfg, str(path))
    for name, report in summary.get("eval", {}).items():
        print(
            f"held-out {name}: reward {report['reward']:.4f}, L1 {report['l1']:.4f}, "
            f"{report['perceptual']} {report[report['perceptual']]:.4f}, "
            f"PSNR {report['psnr']:.2f} dB (n={report['n_clips']})"
        )
    print(f"wall {summary['wall_s']:.0f}s; report: {cfg.run.run_dir / 'report.md'}")
    return 0 if summary.get("rl", {}).get("trainer_exit") == 0 else 1


def run_best_of_k_task(path: Path, task: str, overrides: dict[str, Any]) -> int:
    """``task: video_best_of_k``: best-of-k of a finished video run's base and RLVR models
    (``rlvr_world.apps.video.best_of_k``)."""
    from rlvr_world.apps.video.best_of_k import load_best_of_k_config, run_best_of_k

    cfg = load_best_of_k_config(path, overrides)
    summary = run_best_of_k(cfg, str(path))
    print(summary["headline"]["text"])
    print(f"wall {summary['wall_s']:.0f}s; report: {cfg.run.run_dir / 'report.md'}")
    return 0


def run_sweep_task(path: Path, task: str, overrides: dict[str, Any]) -> int:
    """``task: video_sweep``: RLVR arms from a finished video run's MLE model
    (``rlvr_world.apps.video.sweep``)."""
    from rlvr_world.apps.video.sweep import load_sweep_config, run_sweep

    cfg = load_sweep_config(path, overrides)
    summary = run_sweep(cfg, str(path))
    head = summary["headline"]
    print(f"start: {head['metric']} {head['start']:.4f} (n={head['n']})")
    for name, arm in head["arms"].items():
        lo, hi = arm["ci95_vs_start"]
        print(f"{name}: {arm['rlvr']:.4f}, RLVR - start [{lo:+.4f}, {hi:+.4f}]")
    print(f"wall {summary['wall_s']:.0f}s; report: {cfg.run.run_dir / 'report.md'}")
    return 0


def run_mpc_task(path: Path, task: str, overrides: dict[str, Any]) -> int:
    """``task: mpc`` / ``task: policy_eval``: PushT planning or policy evaluation with the
    world models (``rlvr_world.apps.mpc.run``)."""
    from rlvr_world.apps.mpc.config import load_mpc_config, load_policy_eval_config
    from rlvr_world.apps.mpc.run import run_mpc, run_policy_eval

    if task == "mpc":
        summary = run_mpc(load_mpc_config(path, overrides), str(path))
        for name in summary["planners"]:
            h = summary["headline"][name]
            s, c = h["success_rate"], h["final_coverage"]
            print(
                f"{name}: success {s['value']}, coverage {c['value']} (n={s['n']}, "
                f"faults {h['faults']})"
            )
    else:
        summary = run_policy_eval(load_policy_eval_config(path, overrides), str(path))
        for name, h in summary["headline"].items():
            print(f"{name}: {h['metric']} {h['value']} ci95 {h['ci95']}")
    print(f"wall {summary['wall_s']:.0f}s; report: {summary['run_dir']}/report.md")
    return 0


def run_web_mpc_task(path: Path, task: str, overrides: dict[str, Any]) -> int:
    """``task: web_mpc``: MPC on MiniWoB++ pages with the language world models
    (``rlvr_world.apps.mpc.web``)."""
    from rlvr_world.apps.mpc.web import run_web_mpc
    from rlvr_world.apps.mpc.web_config import load_web_mpc_config

    summary = run_web_mpc(load_web_mpc_config(path, overrides), str(path))
    for name in summary["planners"]:
        h = summary["headline"][name]
        print(f"{name}: success {h['value']} ci95 {h['ci95']} (n={h['n']}, faults {h['faults']})")
    print(f"wall {summary['wall_s']:.0f}s; report: {summary['run_dir']}/report.md")
    return 0


def add_orchestrate_parser(sub: Subparsers) -> argparse.ArgumentParser:
    """Register ``orchestrate`` on the ``rlvr-world`` subcommands."""
    parser = add_command(
        sub,
        "orchestrate",
        lazy("rlvr_world.apps.pipeline.orchestrate:run_orchestrate"),
        help="feed a language run's GRPO through running services (compose, Kubernetes)",
        description="The deployable half of rlvr-world run: against running reward, decoder "
        "and rollout services, Redis and a trainer, evaluate the start, feed the config's train "
        "items until the trainer has published rl.steps versions, evaluate RLVR and write "
        "summary.json (headline: RLVR against the start) and the answers to --out.",
    )
    add_config_arguments(
        parser,
        "pipeline YAML (task text_game or web)",
        "override a field (rl.steps must equal the trainer's run.total_steps)",
    )
    from rlvr_world.apps.run.endpoints import ENV

    for name, env in ENV.items():
        parser.add_argument(f"--{name}", default=None, help=f"address (default ${env})")
    parser.add_argument(
        "--out", type=Path, default=Path("runs/orchestrate"), help="where results are written"
    )
    parser.add_argument(
        "--metrics-port", type=int, default=None, help="serve /metrics here (Prometheus)"
    )
    return parser


def add_train_run_parser(sub: Subparsers) -> argparse.ArgumentParser:
    """Register ``train-run`` on the ``rlvr-world`` subcommands."""
    parser = add_command(
        sub,
        "train-run",
        lazy("rlvr_world.apps.pipeline.orchestrate:run_train_run"),
        help="the GRPO trainer of a language run's config (a deployment's trainer)",
        description="Writes the trainer config rlvr-world run would write for CONFIG's rl "
        "section (the model from --model, checkpoints in --run-dir, Redis from RLVR_REDIS_URL) "
        "and runs the trainer: with rlvr-world orchestrate on the same CONFIG, one file "
        "configures both sides of a deployment.",
    )
    add_config_arguments(
        parser,
        "pipeline YAML (task text_game or web)",
        "override a config field (use the same ones as orchestrate)",
    )
    parser.add_argument("--model", type=Path, required=True, help="the start model folder")
    parser.add_argument("--run-dir", type=Path, required=True, help="checkpoints and logs")
    parser.add_argument("--resume", action="store_true", help="continue from the last checkpoint")
    parser.add_argument(
        "--checkpoint-every", type=int, default=1, help="steps between checkpoints (default 1)"
    )
    parser.add_argument(
        "--metrics-port", type=int, default=None, help="serve /metrics here (Prometheus)"
    )
    return parser


#: A config's ``task`` -> the ``"module:function"`` that loads and checks it (as its runner will).
CONFIG_LOADERS: dict[str, str] = {
    "text_game": "rlvr_world.apps.pipeline.config:load_pipeline_config",
    "video": "rlvr_world.apps.video.config:load_video_config",
    "video_best_of_k": "rlvr_world.apps.video.best_of_k:load_best_of_k_config",
    "video_sweep": "rlvr_world.apps.video.sweep:load_sweep_config",
    "mpc": "rlvr_world.apps.mpc.config:load_mpc_config",
    "policy_eval": "rlvr_world.apps.mpc.config:load_policy_eval_config",
    "web_mpc": "rlvr_world.apps.mpc.web_config:load_web_mpc_config",
}

#: A config's ``task`` -> what runs it (``run_language`` for every other task: text_game, web).
RUNNERS: dict[str, Callable[[Path, str, dict[str, Any]], int]] = {
    "video": run_video,
    "video_best_of_k": run_best_of_k_task,
    "video_sweep": run_sweep_task,
    "mpc": run_mpc_task,
    "policy_eval": run_mpc_task,
    "web_mpc": run_web_mpc_task,
}


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m rlvr_world.apps.commands CONFIG``: ``rlvr-world run`` logging at INFO."""
    parser = _add_run_arguments(argparse.ArgumentParser(prog="python -m rlvr_world.apps.commands"))
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    return run_run(args)


if __name__ == "__main__":
    raise SystemExit(main())
