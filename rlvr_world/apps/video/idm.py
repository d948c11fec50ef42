"""``rlvr-world video train-idm``: the command line. Thin: parse, check, run, print.

Trains an inverse-dynamics model (``rlvr_world.video.idm``) on PushT data, either a finished
video run's recordings (``--run-dir``) or a fresh recording, and writes the IDM folder and
``report.json`` (its accuracy on held-out true frames against the mean-action and copied-frame
baselines: the ceiling of the ``idm`` reward). The work is ``rlvr_world.apps.video.idm_train``;
torch and gym-pusht are imported only when the command runs, so ``--help`` is instant.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rlvr_world.apps.subcommand import add_command, add_group

if TYPE_CHECKING:
    from rlvr_world.scaffold.cli import Subparsers

logger = logging.getLogger(__name__)

__all__ = ["add_video_parser"]

PROG = "rlvr-world video train-idm"
#: Recording options and their defaults (configs/video/pusht_skip.yaml's settings).
RECORDING_DEFAULTS: dict[str, Any] = {
    "episodes": 128,
    "steps": 80,
    "seed": 0,
    "frame_skip": 4,
    "image_size": 64,
    "actions": "agent_relative",
    "relative_range": 128.0,
    "held_out": 16,
}


def add_video_parser(sub: Subparsers) -> None:
    """Add ``video`` with its ``train-idm`` subcommand to the ``rlvr-world`` subcommands."""
    kinds = add_group(sub, "video", help="video world-model tools")
    p = add_command(
        kinds,
        "train-idm",
        _run_train_idm,
        help="train an inverse-dynamics model on PushT data and report its ceiling",
        description=(
            "Train an inverse-dynamics model (previous frame, next frame -> the world model's "
            "action) on PushT data: a finished video run's recordings (--run-dir: its config "
            "decides frame size, frame_skip and action form, and its test episodes are held "
            "out) or a fresh recording (--episodes, --steps, --seed, --frame-skip, --image-size, "
            "--actions, --relative-range, --held-out; defaults: configs/video/pusht_skip.yaml). "
            "Writes the IDM folder (config.json, model.safetensors) and report.json: MAE per "
            "axis, R^2 and share within the tolerance on held-out true frames, for the IDM, the "
            "mean action and a copied frame."
        ),
    )
    p.add_argument("--out", type=Path, required=True, help="the IDM folder to write")
    p.add_argument("--run-dir", type=Path, default=None, help="a finished PushT video run")
    p.add_argument("--episodes", type=int, default=None, help="episodes to record (128)")
    p.add_argument("--steps", type=int, default=None, help="steps per episode (80)")
    p.add_argument("--seed", type=int, default=None, help="recording and split seed (0)")
    p.add_argument("--frame-skip", type=int, default=None, help="steps per model step (4)")
    p.add_argument("--image-size", type=int, default=None, help="frame side in pixels (64)")
    p.add_argument(
        "--actions",
        choices=("absolute", "agent_relative"),
        default=None,
        help="target positions or moves relative to the agent (agent_relative)",
    )
    p.add_argument(
        "--relative-range", type=float, default=None, help="agent_relative: +-range (128)"
    )
    p.add_argument("--held-out", type=int, default=None, help="held-out episodes (16)")
    p.add_argument("--train-steps", type=int, default=3000, help="optimiser steps (3000)")
    p.add_argument("--batch-size", type=int, default=64, help="pairs per step (64)")
    p.add_argument("--lr", type=float, default=2e-3, help="peak learning rate (2e-3)")
    p.add_argument("--train-seed", type=int, default=0, help="initialisation and batch seed")
    p.add_argument(
        "--every-offset",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="train on every start offset of a span, not only the run's own spans",
    )
    p.add_argument("--time-limit-s", type=float, default=None, help="stop training after this long")
    p.add_argument("--device", default="auto", help="auto, cpu, cuda or cuda:N (auto)")
    p.add_argument("--torch-threads", type=int, default=1, help="torch CPU threads (1)")


def _check_args(args: argparse.Namespace) -> None:
    given = [k for k in RECORDING_DEFAULTS if getattr(args, k) is not None]
    if args.run_dir is not None and given:
        flags = ", ".join("--" + k.replace("_", "-") for k in given)
        raise ValueError(f"--run-dir takes the run's own data settings; drop {flags}")
    for name in ("train_steps", "batch_size", "torch_threads"):
        if getattr(args, name) < 1:
            raise ValueError(f"--{name.replace('_', '-')}: must be >= 1, got {getattr(args, name)}")
    if not args.lr > 0.0:
        raise ValueError(f"--lr: must be > 0, got {args.lr}")
    if args.time_limit_s is not None and not args.time_limit_s > 0.0:
        raise ValueError(f"--time-limit-s: must be > 0, got {args.time_limit_s}")
    config = args.out / "config.json"
    if config.is_file() and '"inverse_dynamics"' not in config.read_text(errors="replace"):
        raise ValueError(
            f"--out {args.out}: holds a config.json that is not an IDM's; pick another"
        )


def _fresh_data(args: argparse.Namespace) -> Any:
    from pydantic import ValidationError

    from rlvr_world.apps.video.config import VideoData
    from rlvr_world.apps.video.idm_train import validation_errors

    values = {
        k: v if getattr(args, k) is None else getattr(args, k)
        for k, v in RECORDING_DEFAULTS.items()
    }
    try:
        data = VideoData(source="pusht", **values)
    except ValidationError as exc:
        raise ValueError(validation_errors(exc)) from None
    if data.frame_skip > data.steps:
        raise ValueError(
            f"--frame-skip {data.frame_skip}: longer than an episode (--steps {data.steps}); a "
            "model step spans frame_skip recorded steps"
        )
    return data


def _run_train_idm(args: argparse.Namespace) -> int:
    try:
        _check_args(args)
        import torch

        from rlvr_world.apps.video import idm_train
        from rlvr_world.devices import resolve_device

        device = resolve_device(args.device, "--device")
        torch.set_num_threads(args.torch_threads)
        if args.run_dir is not None:
            data, paths = idm_train.run_data(args.run_dir)
            recs = idm_train.read_recordings(paths, data.image_size)
            source = {"kind": "run", "run_dir": str(args.run_dir)}
        else:
            data = _fresh_data(args)
            recs = idm_train.fresh_recordings(data)
            source = {"kind": "recorded", "seed": data.seed, "relative_range": data.relative_range}
        settings = idm_train.TrainSettings(
            steps=args.train_steps,
            batch_size=args.batch_size,
            lr=args.lr,
            seed=args.train_seed,
            device=device,
            every_offset=args.every_offset,
            time_limit_s=args.time_limit_s,
        )
        report = idm_train.train_and_report(data, recs, settings, args.out, source)
    except ValueError as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return 2
    _print_summary(report)
    return 0


def _print_summary(report: dict[str, Any]) -> None:
    d, t, h = report["data"], report["training"], report["held_out"]
    print(
        f"IDM: {report['idm']} ({t['steps']} steps in {t['seconds']} s on {t['device']}; "
        f"{d['train_pairs']} training pairs of {d['train_episodes']} episodes, "
        f"{d['held_out_pairs']} held-out pairs of {d['held_out_episodes']})"
    )
    tol = ", ".join(f"{v:g}" for v in report["tolerance"]["action_units"])
    for name in ("idm", "mean_action", "copy"):
        row = h[name]
        mae = ", ".join(f"{v:.1f}" for v in row["mae"])
        r2 = ", ".join("n/a" if v is None else f"{v:.3f}" for v in row["r2"])
        print(
            f"  {name:<12} MAE ({mae})  R^2 ({r2})  within ({tol}): "
            f"{100 * row['within_tolerance']:.1f}%"
        )
    print(json.dumps({"report": str(Path(report["idm"]) / "report.json")}))
