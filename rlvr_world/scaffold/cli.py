"""The command line of every service, from one option table: ``rlvr-world serve X`` and
``python -m services.X``.

A service declares a ``ServiceCommand``: its name, help text, its own options, its settings class
and the coroutine that serves them (each as ``"module:name"``, imported only when the command
runs, so ``--help`` is instant). The options every service shares (bind address, drain grace,
credentials, ``--allow-insecure-bind``) are added here. Options default to None, so only those
given on the command line override the service's ``RLVR_<NAME>_*`` environment. A service that
refuses to start raises ``StartRefused`` (``rlvr_world.scaffold.settings``): the reason is
logged and the command exits 2, with no traceback.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import logging
import sys
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, TypeAlias, TypeVar, cast

if TYPE_CHECKING:
    from rlvr_world.scaffold.settings import ServiceSettings

#: (flag, settings field, type, help) of one service option; type ``bool``: a flag, ``list``: a
#: string option that may be repeated.
Option = tuple[str, str, type, str]

#: The ``rlvr-world`` subcommands (what ``ArgumentParser.add_subparsers`` returns).
Subparsers: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"
#: The settings class of the service a ``ServiceCommand`` starts.
S = TypeVar("S", bound="ServiceSettings")


def resolve(spec: str) -> object:
    """The object ``"module:name"`` names (the module imported now): the services' settings
    and serve functions here, the ``rlvr-world`` commands' lazy handlers (``apps.subcommand``)."""
    module, _, name = spec.partition(":")
    return getattr(importlib.import_module(module), name)


#: Options of every service (``scaffold.settings.ServiceSettings``).
COMMON_OPTIONS: tuple[Option, ...] = (
    ("--host", "host", str, "interface to bind (default 127.0.0.1)"),
    ("--grpc-port", "grpc_port", int, "gRPC port; 0 picks a free one"),
    ("--grace-s", "grace_s", float, "SIGTERM grace period for in-flight calls (default 10)"),
    ("--max-payload-bytes", "max_payload_bytes", int, "largest message (default 64 MiB)"),
    ("--tls-cert", "tls_cert", str, "PEM certificate: serve over TLS"),
    ("--tls-key", "tls_key", str, "PEM private key of --tls-cert"),
    ("--tls-client-ca", "tls_client_ca", str, "PEM CA: require client certificates (mTLS)"),
    (
        "--allow-insecure-bind",
        "allow_insecure_bind",
        bool,
        "start bound beyond loopback without a token or mTLS (default: refuse)",
    ),
)


def serve_subparsers(sub: Subparsers) -> Subparsers:
    """The subparsers of ``serve`` under ``sub``, creating ``serve`` if no service did yet."""
    serve = sub.choices.get("serve")
    if serve is None:
        serve = sub.add_parser("serve", help="run a service")
        return serve.add_subparsers(dest="service", required=True)
    for action in serve._actions:  # argparse keeps no public handle on a parser's subparsers
        if isinstance(action, argparse._SubParsersAction):
            return action
    return serve.add_subparsers(dest="service", required=True)


def given_options(args: argparse.Namespace, dests: Sequence[str]) -> dict[str, Any]:
    """The options among ``dests`` that were given on the command line (not None)."""
    return {dest: getattr(args, dest) for dest in dests if getattr(args, dest, None) is not None}


def add_options(parser: argparse.ArgumentParser, options: Sequence[Option]) -> None:
    """Add each option with default None, so only the given ones override the environment."""
    for flag, dest, kind, text in options:
        if kind is bool:
            parser.add_argument(flag, dest=dest, action="store_const", const=True, help=text)
        elif kind is list:
            parser.add_argument(flag, dest=dest, action="append", default=None, help=text)
        else:
            parser.add_argument(flag, dest=dest, type=kind, default=None, help=text)


def configure_logging(level: str) -> None:
    """Log records at ``level`` (a level name such as ``INFO``) and above to stderr."""
    logging.basicConfig(
        level=getattr(logging, level),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )


@dataclass(frozen=True)
class ServiceCommand(Generic[S]):
    """How one service is started from a command line (module docstring)."""

    name: str
    help: str
    description: str
    options: tuple[Option, ...]
    #: ``"module:Class"``: the settings class (read from the environment, options override)
    settings: str
    #: ``"module:function"``: the coroutine that serves the settings until SIGTERM / SIGINT
    serve: str

    @property
    def all_options(self) -> tuple[Option, ...]:
        """The service's options, then the common ones it does not redefine."""
        own = {flag for flag, _, _, _ in self.options}
        return self.options + tuple(o for o in COMMON_OPTIONS if o[0] not in own)

    def settings_from_args(self, args: argparse.Namespace) -> S:
        """The settings from the environment, overridden by the options given in ``args``; a
        bad value raises pydantic's ``ValidationError`` naming the field."""
        settings_class = cast("type[S]", resolve(self.settings))
        return settings_class(**given_options(args, [dest for _, dest, _, _ in self.all_options]))

    def run(self, args: argparse.Namespace) -> int:
        """Serve until SIGTERM/SIGINT; 0 after a clean drain, 2 when the service refuses to
        start (``StartRefused``: an insecure bind, a model it cannot load; the reason logged)."""
        from rlvr_world.scaffold.settings import StartRefused

        try:
            serve = cast("Callable[[S], Coroutine[Any, Any, None]]", resolve(self.serve))
            asyncio.run(serve(self.settings_from_args(args)))
        except StartRefused as exc:
            logging.getLogger(__name__).error("%s service not started: %s", self.name, exc)
            return 2
        return 0

    def add_parser(self, sub: Subparsers) -> argparse.ArgumentParser:
        """Add ``serve <name>`` to the ``rlvr-world`` subcommands."""
        parser = serve_subparsers(sub).add_parser(
            self.name, help=self.help, description=self.description
        )
        add_options(parser, self.all_options)
        parser.set_defaults(handler=self.run)
        return parser

    def main(self, argv: Sequence[str] | None = None) -> int:
        """``python -m services.<name>``: the options plus ``--log-level``, logging, serve."""
        parser = argparse.ArgumentParser(
            prog=f"python -m services.{self.name}", description=self.description
        )
        parser.add_argument(
            "--log-level", default="INFO", choices=("DEBUG", "INFO", "WARNING", "ERROR")
        )
        add_options(parser, self.all_options)
        args = parser.parse_args(argv)
        configure_logging(args.log_level)
        return self.run(args)
