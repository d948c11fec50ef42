"""Shared fixtures: the optional real-data folder and one torch thread per process."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

SHARED_ENV = "RLVR_SHARED_DIR"
#: Credentials a local stack puts in this process's environment (``ensure_local_token``).
CREDENTIAL_ENVS = ("RLVR_API_TOKEN",)


def shared_dir() -> Path:
    """The folder with golden/ and data/ (CI sets RLVR_SHARED_DIR); skip with a reason if absent."""
    value = os.environ.get(SHARED_ENV)
    if not value:
        pytest.skip(f"{SHARED_ENV} is not set: golden files and real data samples are unavailable")
    path = Path(value)
    if not path.is_dir():
        pytest.skip(f"{SHARED_ENV}={value} is not a directory")
    return path


def read_jsonl(path: Path) -> Iterator[dict[str, Any]]:
    with path.open(encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                yield json.loads(line)


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


@pytest.fixture(autouse=True)
def _restore_credentials_env() -> Iterator[None]:
    """A test that starts a local stack sets ``RLVR_API_TOKEN`` here; the next test must not
    inherit it (monkeypatch does not record a variable that was absent)."""
    saved = {name: os.environ.get(name) for name in CREDENTIAL_ENVS}
    yield
    for name, value in saved.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


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
