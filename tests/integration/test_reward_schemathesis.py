"""schemathesis against the gateway's own OpenAPI, on a real uvicorn server: no 5xx, ever.

Runs the ``schemathesis`` CLI (its pytest plugin does not load under pytest 9) against a service
started here, with the ``not_a_server_error`` check on every JSON operation, every phase.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from services.reward.settings import RewardSettings
from services.reward.testing import ServiceThread

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def _cli() -> str:
    found = shutil.which("schemathesis") or str(Path(sys.executable).parent / "schemathesis")
    if not Path(found).exists():
        pytest.skip("schemathesis (dev extra) is not installed")
    return found


def test_gateway_never_answers_5xx(tmp_path: Path) -> None:
    cli = _cli()
    settings = RewardSettings(
        grpc_port=0, http_port=0, workers=1, max_batch=8, default_data_source="web_agent"
    )
    with ServiceThread(settings) as svc:
        proc = subprocess.run(
            [
                cli,
                "run",
                f"{svc.http_url}/openapi.json",
                "--checks",
                "not_a_server_error",
                "--max-examples",
                "30",
                "--seed",
                "1",
                "--request-timeout",
                "30",
                "--generation-database",
                "none",
                "--suppress-health-check",  # generation speed depends on the machine's load
                "too_slow",
                # schemathesis cannot generate application/x-npz bodies; that route's bad bodies
                # are covered by test_reward_http.py
                "--exclude-path",
                "/v1/score/npz",
            ],
            capture_output=True,
            text=True,
            timeout=300,
            cwd=tmp_path,
        )
        healthy = subprocess.run(
            [
                sys.executable,
                "-c",
                f"import httpx; print(httpx.get('{svc.http_url}/healthz').text)",
            ],
            capture_output=True,
            text=True,
            check=True,
        )
    report = proc.stdout[-4000:] + proc.stderr[-2000:]
    assert proc.returncode == 0, report
    counts = re.search(r"(\d+) generated, (\d+) passed", proc.stdout)
    assert counts is not None, report
    assert int(counts[1]) == int(counts[2]) > 100, report
    assert '"ok"' in healthy.stdout
