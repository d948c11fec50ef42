"""``pip install '.[client]'`` into a fresh virtual environment: no torch, and it scores.

The package is built from a copy of the sources (``pyproject.toml``, ``README.md`` and the three
packages) in a temporary folder, so the build leaves nothing in the working tree, and installed
with pip's default build isolation from PyPI (or pip's cache). On this 2-core machine the install
took about 25 s and the whole module 39 s, with pip's cache warm (a cold cache also downloads
numpy, scipy, grpcio and the other base wheels). Then, from that environment's own python, with
a real reward service on loopback: ``torch`` (and transformers) cannot be imported;
``rlvr_world.client`` scores over gRPC; the TRL and verl adapters import and score (TRL and verl
themselves are not installed: the adapters need neither); ``httpx`` reaches the HTTP gateway.
Each answer equals the in-process core's. PyPI unreachable (no network) skips the test with
pip's message; any other pip failure fails it.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rlvr_world.rewards.dispatch import score_mapping
from services.reward.settings import RewardSettings
from services.reward.testing import ServiceThread
from tests.helpers.reward import example_rows

pytestmark = [pytest.mark.integration, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]
SOURCES = ("pyproject.toml", "README.md", "rlvr_world", "services", "trainer")
NETWORK_ERRORS = (
    "Failed to establish a new connection",
    "Temporary failure in name resolution",
    "Network is unreachable",
    "No matching distribution found for setuptools",
)
PIP_TIMEOUT_S = 600

#: Run in the fresh venv: argv[1] gRPC address, argv[2] HTTP URL, argv[3] JSON rows.
PROBE = """
import asyncio, importlib.util, json, sys
address, url, rows = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
out = {"absent": [m for m in ("torch", "transformers", "fastapi", "trl", "verl")
                  if importlib.util.find_spec(m) is None]}
from rlvr_world.client import RewardClient
with RewardClient(address) as client:
    out["grpc"] = [[r.status.value, r.reward] for r in client.score_verl_batch(rows)]
from rlvr_world.adapters.trl import RewardServiceFunc
func = RewardServiceFunc(address)
out["trl"] = func([r["solution_str"] for r in rows] + ["garbage"],
                  ground_truth=[r["ground_truth"] for r in rows] + [rows[0]["ground_truth"]],
                  data_source=[r["data_source"] for r in rows] + [rows[0]["data_source"]])
func.close()
from rlvr_world.adapters.verl import compute_score
r = rows[0]
out["verl"] = asyncio.run(compute_score(r["data_source"], r["solution_str"], r["ground_truth"],
                                        None, address=address))["score"]
import httpx
out["http"] = httpx.post(url + "/v1/score", json=rows[0]).json()["reward"]
out["torch_loaded"] = "torch" in sys.modules
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def client_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv with ``.[client]`` installed from a copy of the sources; its python."""
    root = tmp_path_factory.mktemp("client_extra")
    src = root / "src"
    src.mkdir()
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info")
    for name in SOURCES:
        path = ROOT / name
        if path.is_dir():
            shutil.copytree(path, src / name, ignore=ignore)
        else:
            shutil.copy2(path, src / name)
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    command = [str(python), "-m", "pip", "install", "--disable-pip-version-check", "-q"]
    pip = subprocess.run([*command, f"{src}[client]"], capture_output=True, text=True,
                         timeout=PIP_TIMEOUT_S, check=False)  # fmt: skip
    if pip.returncode != 0:
        output = pip.stdout + pip.stderr
        if any(err in output for err in NETWORK_ERRORS):
            pytest.skip(f"PyPI unreachable: {output[-500:]}")
        pytest.fail(f"pip install '.[client]' failed ({pip.returncode}):\n{output[-3000:]}")
    return python


@pytest.fixture(scope="module")
def svc() -> Iterator[ServiceThread]:
    with ServiceThread(RewardSettings(grpc_port=0, http_port=0, workers=1)) as service:
        yield service


def installed(python: Path) -> set[str]:
    listing = subprocess.run([str(python), "-m", "pip", "list", "--format", "json"],
                             capture_output=True, text=True, check=True, timeout=120)  # fmt: skip
    return {p["name"].lower() for p in json.loads(listing.stdout)}


def test_client_extra_has_no_torch(client_venv: Path) -> None:
    names = installed(client_venv)
    assert {"rlvr-world", "grpcio", "protobuf", "httpx", "numpy"} <= names
    heavy = {"torch", "transformers", "fastapi", "uvicorn", "redis", "trl", "verl", "lpips"}
    assert not names & heavy, names & heavy
    probe = subprocess.run([str(client_venv), "-c", "import torch"],
                           capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
    assert probe.returncode != 0 and "No module named 'torch'" in probe.stderr


def test_client_extra_scores_through_a_running_service(
    client_venv: Path, svc: ServiceThread
) -> None:
    rows: list[dict[str, Any]] = example_rows("web_agent")
    run = subprocess.run(
        [str(client_venv), "-c", PROBE, svc.grpc_address, svc.http_url, json.dumps(rows)],
        capture_output=True, text=True, timeout=120, check=False, cwd=client_venv.parent,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    out = json.loads(run.stdout.strip().splitlines()[-1])
    assert set(out["absent"]) == {"torch", "transformers", "fastapi", "trl", "verl"}
    assert out["torch_loaded"] is False
    cores = [score_mapping(r) for r in rows]
    assert out["grpc"] == [[c.status.value, pytest.approx(c.reward)] for c in cores]
    strict = [score_mapping({**r, "variant": "strict"}) for r in rows]  # the adapter's default
    assert out["trl"] == pytest.approx([c.reward for c in strict] + [0.0])  # unparseable: 0.0
    assert out["verl"] == pytest.approx(cores[0].reward)
    assert out["http"] == pytest.approx(cores[0].reward)
