"""CLI: ``rlvr-world train --config FILE [--resume] [--set key=value ...]``.

Only argparse at import time, so ``--help`` is instant; torch/transformers load in ``run_train``.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path
from typing import Any


def configure_parser(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Add the train options to ``parser`` and set ``run_train`` as its handler; returns it."""
    parser.add_argument("--config", type=Path, required=True, help="YAML or TOML trainer config")
    parser.add_argument(
        "--resume", action="store_true", help="continue from the run dir's last checkpoint"
    )
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a config field, e.g. --set run.total_steps=10 (repeatable)",
    )
    parser.add_argument("--log-level", default="INFO", help="logging level (default INFO)")
    parser.set_defaults(handler=run_train)
    return parser


def add_train_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register the ``train`` subcommand on an ``argparse`` subparsers object."""
    parser = subparsers.add_parser(
        "train",
        help="run the GRPO trainer on the scored-group queue",
        description="GRPO trainer: pulls scored groups from Redis, checkpoints, publishes weights.",
    )
    return configure_parser(parser)


def run_train(args: argparse.Namespace) -> int:
    """Load the config, train, return the exit code: 2 with the reason when the external Redis
    refuses the client's credentials (``$RLVR_REDIS_PASSWORD``)."""
    logging.basicConfig(
        level=getattr(logging, str(args.log_level).upper(), logging.INFO),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    from rlvr_world.queue.server import RedisRefused
    from trainer.config import load_config
    from trainer.loop import open_trainer

    cfg = load_config(args.config, args.overrides)
    try:
        with open_trainer(cfg, resume=args.resume) as trainer:
            state = trainer.run()
    except RedisRefused as exc:
        print(f"rlvr-world train: error: {exc}", file=sys.stderr)
        return 2
    print(
        f"trained to step {state.step}: {state.trained_groups} groups, dropped {state.dropped}, "
        f"run dir {cfg.run.run_dir}"
    )
    return 0


def main(argv: list[str] | None = None) -> int:
    """``python -m trainer``: parse ``argv`` (default ``sys.argv``) and train; the exit code."""
    parser = configure_parser(argparse.ArgumentParser(prog="python -m trainer"))
    args = parser.parse_args(argv)
    return int(args.handler(args))
