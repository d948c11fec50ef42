"""Registering ``rlvr-world`` subcommands: the one owner of the argparse pattern they share.

``add_command`` adds a subcommand with its help, description and handler and returns its parser
(for the options); ``add_group`` adds a command that only holds subcommands (``collect web``,
``model import-gguf``) and returns their subparsers. ``lazy("module:function")`` is a handler
that imports its module only when the command runs, so building the parser (and ``--help``)
stays instant: the command modules import only argparse at the top.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import TYPE_CHECKING, cast

from rlvr_world.scaffold.cli import resolve

if TYPE_CHECKING:
    from rlvr_world.scaffold.cli import Subparsers

#: What a subcommand runs: the parsed arguments in, the exit status out.
Handler = Callable[[argparse.Namespace], int]


def add_command(
    sub: Subparsers, name: str, handler: Handler, *, help: str, description: str | None = None
) -> argparse.ArgumentParser:
    """Add subcommand ``name`` to ``sub``, run by ``handler``; returns its parser."""
    parser = sub.add_parser(name, help=help, description=description)
    parser.set_defaults(handler=handler)
    return parser


def add_group(sub: Subparsers, name: str, *, help: str) -> Subparsers:
    """Add command ``name`` to ``sub`` that only holds subcommands (one is required; the one
    given is ``args.<name>_command``); returns its subparsers, for ``add_command``."""
    return sub.add_parser(name, help=help).add_subparsers(dest=f"{name}_command", required=True)


def lazy(spec: str) -> Handler:
    """A handler that imports ``spec`` (``"module:function"``, a handler itself) only when the
    command runs, and returns what it returns."""

    def handler(args: argparse.Namespace) -> int:
        run = cast("Handler", resolve(spec))
        return run(args)

    handler.__qualname__ = f"lazy({spec!r})"
    return handler
