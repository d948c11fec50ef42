"""Small helpers shared by the command lines of the services (no heavy imports)."""

from __future__ import annotations

import argparse
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
