"""Small helpers shared by the command lines of the services (no heavy imports)."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable, Sequence
from typing import Any


def serve_subparsers(sub: Any) -> Any:
    """The subparsers of ``serve`` under ``sub``, creating ``serve`` if no service did yet."""
    serve = sub.choices.get("serve")
    if serve is None:
        serve = sub.add_parser("serve", help="run a service")
        return serve.add_subparsers(dest="service", required=True)
    for action in serve._actions:  # argparse keeps no public handle on a parser's subparsers
        if isinstance(action, argparse._SubParsersAction):
            return action
    return serve.add_subparsers(dest="service", required=True)


def given_options(args: argparse.Namespace, dests: tuple[str, ...]) -> dict[str, Any]:
    """The options among ``dests`` that were given on the command line (not None)."""
    return {dest: getattr(args, dest) for dest in dests if getattr(args, dest, None) is not None}


#: (flag, settings field, type, help) of one service option.
Option = tuple[str, str, type, str]


def add_options(parser: argparse.ArgumentParser, options: tuple[Option, ...]) -> None:
    """Add each option with default None, so only the given ones override the environment."""
    for flag, dest, kind, text in options:
        parser.add_argument(flag, dest=dest, type=kind, default=None, help=text)


def module_main(
    argv: Sequence[str] | None,
    *,
    prog: str,
    description: str,
    options: tuple[Option, ...],
    run: Callable[[argparse.Namespace], int],
) -> int:
    """``python -m services.X``: parse the options plus ``--log-level``, configure logging, run."""
    parser = argparse.ArgumentParser(prog=prog, description=description)
    parser.add_argument(
        "--log-level", default="INFO", choices=("DEBUG", "INFO", "WARNING", "ERROR")
    )
    add_options(parser, options)
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=getattr(logging, args.log_level),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    return run(args)
