"""The deployment test runs only when asked for by marker (``-m deploy``: ``make deploy-test``).

It needs root, Podman and built images and takes minutes, so a run that does not name the marker
(``make test`` runs ``-m ""``) deselects it and says so.
"""

from __future__ import annotations

import pytest


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if "deploy" in (config.getoption("markexpr") or ""):
        return
    deploy = [item for item in items if item.get_closest_marker("deploy") is not None]
    if deploy:
        config.hook.pytest_deselected(items=deploy)
        items[:] = [item for item in items if item.get_closest_marker("deploy") is None]
