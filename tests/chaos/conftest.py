"""Fixtures of the chaos suite (helpers live in ``tests.chaos.support``)."""

from __future__ import annotations

import json
import os

import pytest

from tests.chaos.support import REPORT_ENV, Certs, make_certs


@pytest.fixture(scope="session")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("certs"))


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Print the figures the chaos tests reported (``$RLVR_CHAOS_REPORT``), one block each."""
    path = os.environ.get(REPORT_ENV)
    if not path or not os.path.exists(path):
        return
    terminalreporter.section("chaos figures")
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            entry = json.loads(line)
            terminalreporter.write_line(f"{entry.pop('test')}:")
            for key, value in entry.items():
                terminalreporter.write_line(f"    {key}: {value}")
