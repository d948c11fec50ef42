"""Fixtures of the chaos suite (helpers live in ``tests.chaos.support``)."""

from __future__ import annotations

import pytest

from tests.chaos.support import Certs, make_certs


@pytest.fixture(scope="session")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("certs"))
