"""``scripts/gpu_check.py`` (``make gpu-check``): where torch sees no CUDA device it refuses at
once and runs nothing; with ``--device cpu --toy`` every phase runs on the CPU at toy size (the
gpu-marked tests, which skip here; the rollout service with a weight reload, on the transformers
engine and on vLLM's CPU build; the text pipeline; the video smoke), and ``gpu_check.json`` says
what each phase did. A toy run measures nothing: it shows the pieces work before GPU time is spent.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from rlvr_world.apps.run.stack import default_vllm_python
from rlvr_world.queue.server import REDIS_URL_ENV

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(1500)]

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "gpu_check.py"


def _check(tmp_path: Path, *args: str, timeout: float = 1200) -> tuple[int, str, dict[str, Any]]:
    out = tmp_path / "gpu_check.json"
    argv = [sys.executable, str(SCRIPT), "--run-dir", str(tmp_path / "run"), "--out", str(out)]
    env = {k: v for k, v in os.environ.items() if k != REDIS_URL_ENV}
    proc = subprocess.run(
        [*argv, *args], capture_output=True, text=True, timeout=timeout, env=env, check=False
    )
    report = json.loads(out.read_text()) if out.exists() else {}
    return proc.returncode, proc.stdout + proc.stderr, report


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA: no refusal")
def test_without_cuda_it_refuses_and_runs_nothing(tmp_path: Path) -> None:
    code, output, report = _check(tmp_path, timeout=120)
    assert code == 3
    assert "sees no CUDA device here, so nothing was run" in output
    assert "--device cpu --toy" in output
    assert report == {} and not (tmp_path / "run").exists()


def test_an_unknown_phase_is_refused(tmp_path: Path) -> None:
    code, output, _ = _check(tmp_path, "--device", "cpu", "--toy", "--phases", "tests,gpus")
    assert code == 2 and "--phases: unknown phase 'gpus'" in output


def test_the_whole_check_at_toy_size_on_the_cpu(tmp_path: Path) -> None:
    code, output, report = _check(
        tmp_path, "--device", "cpu", "--toy", "--engine", "transformers", "--budget-s", "1100"
    )
    assert code == 0, output
    assert report["toy"] is True and report["device"]["setting"] == "cpu"
    assert report["commit"] and report["rollout_engine"] == "transformers"
    phases = report["phases"]
    assert list(phases) == ["model", "tests", "rollout", "text", "video"]
    assert phases["model"]["status"] == "skipped"  # a tiny model at toy size
    tests = phases["tests"]
    assert tests["status"] == "ok" and "tests/unit/test_device_gpu.py" in tests["detail"]["files"]
    if not torch.cuda.is_available():
        assert tests["detail"]["passed"] == 0 and tests["detail"]["skipped"] >= 4
    rollout = phases["rollout"]["detail"]
    assert phases["rollout"]["status"] == "ok" and rollout["served_version"] == 1
    assert rollout["greedy_logprob_change"] > 0 and rollout["load_weights_s"] >= 0
    assert rollout["device"] == {"device": "cpu", "precision": "fp32"}
    text = phases["text"]["detail"]
    assert phases["text"]["status"] == "ok" and text["devices"]["trainer"]["device"] == "cpu"
    head = report["text_headline"]
    assert head["metric"] == "exact_match" and head["n"] > 0 and len(head["ci95"]) == 2
    assert head["control_budget"] == "samples" and "RLVR - control" in head["text"]
    video = phases["video"]["detail"]
    assert phases["video"]["status"] == "ok" and video["headline"]["n"] > 0
    assert {d["device"] for d in video["devices"].values() if d} == {"cpu"}
    assert all(p["seconds"] >= 0 for p in phases.values())
    assert report["total_s"] == pytest.approx(sum(p["seconds"] for p in phases.values()), abs=0.5)


@pytest.mark.skipif(
    not default_vllm_python().exists(), reason="no vLLM environment (make vllm-setup)"
)
def test_the_rollout_phase_on_vllm_reloads_weights(tmp_path: Path) -> None:
    code, output, report = _check(
        tmp_path, "--device", "cpu", "--toy", "--engine", "vllm", "--phases", "rollout"
    )
    assert code == 0, output
    rollout = report["phases"]["rollout"]
    assert rollout["status"] == "ok" and rollout["detail"]["engine"] == "vllm"
    assert rollout["detail"]["served_version"] == 1
    assert report["rollout_engine"] == "vllm"
