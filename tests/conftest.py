"""Shared fixtures: the optional real-data folder and one torch thread per process."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.helpers.shared import shared_dir


@pytest.fixture(scope="session")
def shared() -> Path:
    return shared_dir()


@pytest.fixture(autouse=True, scope="session")
def _one_torch_thread() -> None:
    """Two contending torch threads on these 2-core machines were measured up to 35x slower."""
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    try:
        import torch
    except ImportError:
        return
    torch.set_num_threads(1)


def _cuda_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Skip tests marked ``gpu`` with a reason where CUDA is absent."""
    gpu_items = [item for item in items if "gpu" in item.keywords]
    if not gpu_items or _cuda_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device (torch.cuda.is_available() is False)")
    for item in gpu_items:
        item.add_marker(skip)
