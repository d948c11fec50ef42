"""OpenRLHF's own remote-RM client scores through our ``/get_reward`` (real HTTP server, loopback).

OpenRLHF 0.11.2 (its latest release) does not install on CPU with its dependencies: it pins
``flash-attn==2.8.3``, whose source build fails at "Getting requirements to build wheel" with
``ModuleNotFoundError: No module named 'torch'`` (and needs CUDA after that), and it pins
``transformers==5.15.0`` against our 5.10.4. Its remote-RM client, though, imports on CPU with what
``.venv`` already has (torch, transformers, aiohttp, sympy, pylatexenc), so ``make setup``
installs the package with ``--no-deps`` and this test drives the real client:
``openrlhf.utils.agent.SingleTurnAgentExecutor`` (``--remote_rm_url``), whose ``execute`` tokenizes
the prompt, asks the engine for one continuation, decodes prompt + response (special tokens kept),
posts ``{"query": [...], "prompts": [...], "labels": [...]}`` (5 tries, 1 s apart, 180 s timeout)
and keeps ``rewards`` / ``scores`` / ``extra_logs`` of the answer for its ``Experience``. On a
failed call it logs "Failed to fetch reward from remote RM" and leaves the reward ``None``:
OpenRLHF's "no verdict".

The engine is the one stand-in: vLLM (``openrlhf.trainer.ray.vllm_engine``) is not installed here,
so ``ScriptedEngine`` answers ``generate`` with the tokens of given completions, in vLLM's output
shape. Everything after generation is OpenRLHF's code.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import httpx
import pytest

from rlvr_world.rewards.dispatch import score_mapping
from services.reward.settings import RewardSettings
from services.reward.testing import ServiceThread
from tests.helpers.reward import example_rows
from tests.helpers.tiny_lm import tiny_tokenizer

pytestmark = [pytest.mark.integration, pytest.mark.slow]  # failure cases wait for 5 retries
openrlhf = pytest.importorskip(
    "openrlhf", reason="openrlhf is installed --no-deps by make setup (see module docstring)"
)
ROWS = example_rows("web_agent")


@pytest.fixture(scope="module")
def svc() -> Iterator[ServiceThread]:
    settings = RewardSettings(grpc_port=0, http_port=0, workers=1, default_data_source="web_agent")
    with ServiceThread(settings) as service:
        yield service


@pytest.fixture(scope="module")
def late() -> Iterator[ServiceThread]:
    """Every score times out (a failure of the service, not of the policy)."""
    settings = RewardSettings(
        grpc_port=0, http_port=0, workers=1, default_data_source="web_agent", deadline_s=1e-6
    )
    with ServiceThread(settings) as service:
        yield service


class ScriptedEngine:
    """Stands in for OpenRLHF's vLLM engine: ``generate`` returns the next scripted completion as
    vLLM's ``RequestOutput`` shape (``outputs[0].token_ids``, ``finish_reason``, ``logprobs``)."""

    def __init__(self, tokenizer: Any, completion: str) -> None:
        ids = tokenizer(completion, add_special_tokens=False)["input_ids"]
        self.token_ids = [*ids, tokenizer.eos_token_id]

    async def generate(self, prompt_token_ids: list[int], params: Any, **_: Any) -> Any:
        out = SimpleNamespace(token_ids=self.token_ids, finish_reason="stop", logprobs=None)
        return SimpleNamespace(outputs=[out])


def run_openrlhf(url: str, prompt: str, label: str, completion: str) -> dict[str, Any]:
    """OpenRLHF's single-turn rollout of one sample, reward from ``url``; its output dict."""
    from openrlhf.utils.agent import SingleTurnAgentExecutor

    tokenizer = tiny_tokenizer()
    executor = SingleTurnAgentExecutor(remote_rm_url=f"{url}/get_reward")
    params = SimpleNamespace(max_tokens=256, logprobs=None)
    engine = ScriptedEngine(tokenizer, completion)
    output: dict[str, Any] = asyncio.run(
        executor.execute(prompt, label, params, 1024, tokenizer, engine)
    )
    return output


def label_of(row: dict[str, Any]) -> str:
    return json.dumps({"data_source": row["data_source"], "ground_truth": row["ground_truth"]})


def test_openrlhf_client_gets_the_service_rewards(svc: ServiceThread) -> None:
    """Full, partial and unparseable answers; JSON-object and plain labels. ``rewards`` and
    ``scores`` are the service's (unparseable: 0.0); ``extra_logs`` holds only numbers, as
    OpenRLHF turns each into a tensor."""
    cases = [
        (ROWS[0], label_of(ROWS[0]), ROWS[0]["solution_str"]),
        (ROWS[3], ROWS[3]["ground_truth"], ROWS[3]["solution_str"]),  # plain label
        (ROWS[0], label_of(ROWS[0]), "I think the page will change somehow."),
    ]
    for i, (row, label, completion) in enumerate(cases):
        prompt = f"Page before the click, case {i}:\n"
        out = run_openrlhf(svc.http_url, prompt, label, completion)
        core = score_mapping({**row, "solution_str": completion})
        expected = core.reward if core.ok else 0.0
        assert out["reward"] == pytest.approx([expected]), (i, core)
        assert out["scores"] == out["reward"]
        assert out["extra_logs"] == {"reward_ok": [1.0 if core.ok else 0.0]}
        assert all(isinstance(v, float) for vs in out["extra_logs"].values() for v in vs)
    assert core.status.value == "unparseable"  # the last case


def count(svc: ServiceThread, status: str) -> float:
    text = httpx.get(f"{svc.http_url}/metrics").text
    key = f'rlvr_reward_requests_total{{status="{status}",task="web",transport="http"}} '
    lines = [line for line in text.splitlines() if line.startswith(key)]
    return float(lines[0].split()[-1]) if lines else 0.0


def test_openrlhf_gets_no_verdict_for_a_failure_not_the_policys(
    svc: ServiceThread, late: ServiceThread, caplog: pytest.LogCaptureFixture
) -> None:
    """A timeout (503) and a label the scorer refuses (422): OpenRLHF tries 5 times, logs the
    failure and keeps reward None, never a silent 0."""
    caplog.set_level(logging.INFO, logger="openrlhf")
    row = ROWS[0]
    before = count(late, "timeout")
    timed_out = run_openrlhf(late.http_url, "p\n", label_of(row), row["solution_str"])
    assert timed_out["reward"] is None and timed_out["scores"] is None
    assert count(late, "timeout") - before == 5  # OpenRLHF's try_max_times
    bad_label = json.dumps({"data_source": "web_agent", "ground_truth": "no sections"})
    refused = run_openrlhf(svc.http_url, "p\n", bad_label, row["solution_str"])
    assert refused["reward"] is None
    logged = caplog.text
    assert logged.count("Failed to fetch reward from remote RM") == 2
    assert "503" in logged and "422" in logged


def test_get_reward_answers_openrlhfs_shape_directly(
    svc: ServiceThread, late: ServiceThread
) -> None:
    """What the client above reads, and the error bodies it logs, as plain HTTP."""
    row = ROWS[0]
    body = {"query": ["p\n" + row["solution_str"]], "prompts": ["p\n"], "labels": [label_of(row)]}
    ok = httpx.post(f"{svc.http_url}/get_reward", json=body).json()
    assert ok["rewards"] == ok["scores"] == [1.0] and ok["statuses"] == ["ok"]
    resp = httpx.post(f"{late.http_url}/get_reward", json=body)
    assert resp.status_code == 503
    assert resp.json()["detail"].startswith("query[0]: status timeout: ")
    body["labels"] = [json.dumps({"data_source": "web_agent", "ground_truth": "no sections"})]
    resp = httpx.post(f"{svc.http_url}/get_reward", json=body)
    assert resp.status_code == 422
    assert resp.json()["detail"].startswith("labels[0].ground_truth: no 'New items:'")


def test_the_client_is_openrlhfs_pinned_release() -> None:
    """The version make setup installs; its reward client still has the shape read above."""
    import inspect
    from importlib.metadata import version

    from openrlhf.utils.agent import SingleTurnAgentExecutor

    assert version("openrlhf") == "0.11.2"
    source = inspect.getsource(SingleTurnAgentExecutor._fetch_rewards_via_http)
    assert '"query"' in source and '"prompts"' in source and '"labels"' in source
