"""``rlvr_world.apps.subcommand``: the helpers every ``rlvr-world`` command registers with."""

from __future__ import annotations

import argparse
import subprocess
import sys

import pytest

from rlvr_world.apps.subcommand import add_command, add_group, lazy
from rlvr_world.scaffold.cli import resolve


def _root() -> tuple[argparse.ArgumentParser, argparse._SubParsersAction[argparse.ArgumentParser]]:
    parser = argparse.ArgumentParser(prog="tool")
    return parser, parser.add_subparsers(dest="command", required=True)


def test_a_command_carries_its_help_description_and_handler() -> None:
    parser, sub = _root()
    cmd = add_command(sub, "go", lambda args: 7, help="go somewhere", description="Goes.")
    cmd.add_argument("--far", action="store_true")
    args = parser.parse_args(["go", "--far"])
    assert args.handler(args) == 7 and args.far
    assert cmd.description == "Goes." and "go somewhere" in parser.format_help()


def test_a_group_requires_one_of_its_subcommands(capsys: pytest.CaptureFixture[str]) -> None:
    parser, sub = _root()
    kinds = add_group(sub, "make", help="make things")
    add_command(kinds, "tea", lambda args: 0, help="a cup")
    assert parser.parse_args(["make", "tea"]).make_command == "tea"
    with pytest.raises(SystemExit) as stop:
        parser.parse_args(["make"])
    assert stop.value.code == 2
    assert "the following arguments are required: make_command" in capsys.readouterr().err


def test_resolve_names_an_object_by_module_and_name() -> None:
    assert resolve("os.path:join") is __import__("os").path.join


def test_a_lazy_handler_imports_its_module_only_when_it_runs() -> None:
    code = (
        "import argparse, sys; from rlvr_world.apps.subcommand import lazy; "
        "h = lazy('rlvr_world.apps.healthcheck:run_healthcheck'); "
        "assert 'rlvr_world.apps.healthcheck' not in sys.modules, 'imported early'; "
        "code = h(argparse.Namespace(probe='http', url='http://127.0.0.1:1/', timeout_s=1.0)); "
        "assert 'rlvr_world.apps.healthcheck' in sys.modules; sys.exit(code)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 1, done.stderr  # the probe's own status: nothing listens on port 1
    assert "GET http://127.0.0.1:1/ failed" in done.stderr


def test_a_lazy_handler_names_what_it_runs() -> None:
    assert "lazy('pkg.mod:run')" in repr(lazy("pkg.mod:run"))
