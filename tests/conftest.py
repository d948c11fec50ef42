"""Shared fixtures: the optional real-data folder and one torch thread per process."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from tests.helpers.shared import shared_dir

# Property tests: no per-example deadline and no "data generation too slow" health check; both
# measure the machine's speed, not the code (tests may still set their own example counts).
settings.register_profile(
    "suite", deadline=None, suppress_health_check=[HealthCheck.too_slow], print_blob=True
)
settings.load_profile("suite")

#: pytest-timeout of a test marked ``slow`` that sets none itself (others get pyproject's 300 s): a
#: whole pipeline run takes minutes on a loaded 2-core machine and several times that under the CPU
#: hog of ``make test-stress``. A hang still ends; a slow machine does not fail a test.
SLOW_TIMEOUT_S = 1200
#: The test files that take longest (measured, most first). They run first, so that the workers
#: of ``pytest -n 2 --dist loadfile`` (``make test``) end together instead of one starting a
#: minutes-long file near the end; only the order depends on this list.
LONGEST_FIRST = (
    "tests/chaos/test_chaos_pipeline.py",
    "tests/integration/test_video_pipeline.py",
    "tests/integration/test_video_pipeline_multistep.py",
    "tests/integration/test_rollout_vllm.py",
    "tests/integration/test_trainer_e2e.py",
    "tests/chaos/test_chaos_reward.py",
    "tests/integration/test_pipeline_loop.py",
    "tests/integration/test_compose_mirror.py",
    "tests/integration/test_rollout_smollm2.py",
)
#: Credentials a local stack puts in this process's environment (``ensure_local_token``).
CREDENTIAL_ENVS = ("RLVR_API_TOKEN",)


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


def _module_rank(items: list[pytest.Item]) -> dict[str, int]:
    """Rank of each test file: ``LONGEST_FIRST`` in its order, then the other files holding a
    slow test, then the rest."""
    slow = {str(item.path) for item in items if "slow" in item.keywords}
    rank: dict[str, int] = {}
    for item in items:
        path = str(item.path)
        if path not in rank:
            relative = item.nodeid.split("::")[0]
            if relative in LONGEST_FIRST:
                rank[path] = LONGEST_FIRST.index(relative)
            else:
                rank[path] = len(LONGEST_FIRST) + (0 if path in slow else 1)
    return rank


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Longest test files first (whole files, their own order kept); give slow tests their
    longer timeout; skip tests marked ``gpu`` with a reason where CUDA is absent."""
    rank = _module_rank(items)
    items.sort(key=lambda item: rank[str(item.path)])  # stable: a file's tests stay in order
    for item in items:
        if "slow" in item.keywords and item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(SLOW_TIMEOUT_S))
    gpu_items = [item for item in items if "gpu" in item.keywords]
    if not gpu_items or _cuda_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device (torch.cuda.is_available() is False)")
    for item in gpu_items:
        item.add_marker(skip)
