"""``rlvr-world`` command line. Thin: parse arguments, import the heavy module lazily, run.

Subcommands:
  run            the whole pipeline on one machine: services, SFT, GRPO, evaluation, report
  pool           one headline over several seeds of a language run
  reward score   score a JSON Lines file of verl-style requests, in process or through a server
  serve reward   run the reward service (gRPC + HTTP gateway)
  serve rollout  run the rollout service (transformers engine)
  serve decoder  run the token decoding service
  train          run the GRPO trainer fed by the Redis Stream
  collect web    record MiniWoB++ transitions in headless Chromium (resumable)
  video train-idm  train a PushT inverse-dynamics model (the idm reward) and report its ceiling
  healthcheck    probe a service's gRPC health or HTTP readiness (container healthchecks)
  model          prepare model folders: import-gguf writes a GGUF file as a Hugging Face folder
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from rlvr_world import __version__
from rlvr_world.apps.collect.cli import add_collect_parser
from rlvr_world.apps.commands import (
    add_orchestrate_parser,
    add_pool_parser,
    add_run_parser,
    add_train_run_parser,
)
from rlvr_world.apps.healthcheck import add_healthcheck_parser
from rlvr_world.apps.model import add_model_parser
from rlvr_world.apps.subcommand import Handler, add_command, add_group
from rlvr_world.apps.video.idm import add_video_parser
from services.decoder.cli import COMMAND as DECODER
from services.reward.cli import COMMAND as REWARD
from services.rollout.cli import COMMAND as ROLLOUT
from trainer.cli import add_train_parser

if TYPE_CHECKING:
    from rlvr_world.scaffold.cli import Subparsers

#: Functions adding the subcommands owned by other modules, in ``--help`` order. Those modules
#: import only argparse at the top and keep their heavy imports inside their run functions, so
#: building the parser stays cheap.
_SUBCOMMANDS: tuple[Callable[[Subparsers], object], ...] = (
    REWARD.add_parser,
    ROLLOUT.add_parser,
    DECODER.add_parser,
    add_train_parser,
    add_healthcheck_parser,
    add_run_parser,
    add_pool_parser,
    add_orchestrate_parser,
    add_train_run_parser,
    add_collect_parser,
    add_video_parser,
    add_model_parser,
)


def _add_reward_parser(sub: Subparsers) -> None:
    score = add_command(
        add_group(sub, "reward", help="reward scoring"),
        "score",
        _run_reward_score,
        help="score a JSON Lines file of verl-style requests",
        description=(
            "Each input line: {data_source, solution_str, ground_truth, extra_info, "
            "variant?, reward_type?}. Each output line, in input order: "
            "{reward, status, metrics, message?}. A malformed line gets its own error line."
        ),
    )
    score.add_argument("--input", required=True, help="JSON Lines file, or - for stdin")
    score.add_argument("--output", required=True, help="JSON Lines file, or - for stdout")
    score.add_argument(
        "--server",
        default=None,
        help="score through a running reward service at this gRPC address (host:port, "
        "several comma-separated, or dns:///name:port) instead of in process",
    )
    score.add_argument(
        "--variant",
        choices=("paper", "strict"),
        default=None,
        help="default variant for lines that do not set one (default: strict)",
    )
    score.add_argument("--quiet", action="store_true", help="no summary on stderr")
    score.add_argument(
        "--resume",
        action="store_true",
        help="continue an output file a stopped run left: skip the lines it holds, append",
    )


def _run_reward_score(args: argparse.Namespace) -> int:
    from rlvr_world.apps.batch import score_file

    return score_file(
        args.input,
        args.output,
        server=args.server,
        variant=args.variant,
        quiet=args.quiet,
        resume=args.resume,
    )


def build_parser() -> argparse.ArgumentParser:
    """The ``rlvr-world`` parser with every subcommand; each sets ``args.handler``."""
    parser = argparse.ArgumentParser(
        prog="rlvr-world",
        description="Post-train world models with RL from verifiable rewards.",
    )
    parser.add_argument("--version", action="version", version=f"rlvr-world {__version__}")
    parser.add_argument(
        "--log-level", default="INFO", choices=("DEBUG", "INFO", "WARNING", "ERROR")
    )
    sub = parser.add_subparsers(dest="command", required=True)
    _add_reward_parser(sub)
    for add_parser in _SUBCOMMANDS:
        add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """``rlvr-world``: parse ``argv`` (default ``sys.argv``), log at ``--log-level`` and run the
    subcommand's handler; its exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=getattr(logging, args.log_level),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    handler: Handler = args.handler
    return handler(args)


if __name__ == "__main__":
    raise SystemExit(main())
