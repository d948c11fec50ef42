"""slime's ``--rm-url`` remote reward against ``POST /slime/reward`` (real HTTP server, loopback).

slime (THUDM/slime) is not on PyPI (the ``slime`` there is an unrelated statistics package) and
needs SGLang and Megatron, so this test posts exactly what its client posts, read from its source
(``slime/rollout/rm_hub/__init__.py``, ``remote_rm``): one sample per call, JSON
``{"prompt": sample.prompt, "response": sample.response, "label": sample.label}`` through an
``aiohttp`` session (``TCPConnector(limit=64)``, 120 s total timeout), ``raise_for_status()``, and
the whole JSON answer becomes ``Sample.reward``; with ``--reward-key reward``,
``Sample.get_reward_value`` reads ``reward`` from it. slime retries any failure up to 10 times
(backoff ``min(2**attempt, 30)`` s + jitter), then raises: our 422 / 503 make a bad sample fail
its rollout loudly instead of training on a made-up number.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import pytest

from rlvr_world.rewards.dispatch import score_mapping
from services.reward.settings import RewardSettings
from services.reward.testing import ServiceThread
from tests.helpers.reward import TOKEN, example_rows

pytestmark = pytest.mark.integration
ROWS = example_rows("web_agent")
REWARD_KEY = "reward"  # slime: --reward-key reward


@pytest.fixture(scope="module")
def svc() -> Iterator[ServiceThread]:
    settings = RewardSettings(
        grpc_port=0, http_port=0, workers=1, default_data_source="web_agent", api_token=TOKEN
    )
    with ServiceThread(settings) as service:
        yield service


@pytest.fixture(scope="module")
def late() -> Iterator[ServiceThread]:
    """No default data source, and every score times out (a failure of the service)."""
    settings = RewardSettings(grpc_port=0, http_port=0, workers=1, deadline_s=1e-6)
    with ServiceThread(settings) as service:
        yield service


def slime_post(url: str, sample: dict[str, Any], token: str | None = TOKEN) -> Any:
    """One call of slime's ``remote_rm``: ``(status, json)`` of the answer. (slime itself sends
    no header: see docs/integrations.md for a token-protected gateway.)"""
    import aiohttp

    payload = {"prompt": sample["prompt"], "response": sample["response"], "label": sample["label"]}
    headers = {"authorization": f"Bearer {token}"} if token else None

    async def call() -> tuple[int, Any]:
        connector = aiohttp.TCPConnector(limit=64, enable_cleanup_closed=True)
        timeout = aiohttp.ClientTimeout(total=120)
        async with (
            aiohttp.ClientSession(connector=connector, timeout=timeout) as session,
            session.post(url, json=payload, headers=headers) as resp,
        ):
            return resp.status, await resp.json()

    return asyncio.run(call())


def label_of(row: dict[str, Any]) -> str:
    return json.dumps({"data_source": row["data_source"], "ground_truth": row["ground_truth"]})


def test_slime_samples_get_the_service_rewards(svc: ServiceThread) -> None:
    url = f"{svc.http_url}/slime/reward"
    chat = [{"role": "user", "content": "What changes after the click?"}]
    cases = [
        ({"prompt": "p", "response": ROWS[0]["solution_str"], "label": label_of(ROWS[0])}, ROWS[0]),
        ({"prompt": chat, "response": ROWS[3]["solution_str"], "label": ROWS[3]["ground_truth"]},
         ROWS[3]),  # plain label: the server's default data source
        ({"prompt": "p", "response": ROWS[1]["solution_str"],
          "label": {"data_source": "web_agent", "ground_truth": ROWS[1]["ground_truth"]}},
         ROWS[1]),  # a label column holding an object
    ]  # fmt: skip
    for sample, row in cases:
        status, reward = slime_post(url, sample)
        core = score_mapping({**row, "solution_str": sample["response"]})
        assert status == 200 and core.ok
        assert reward[REWARD_KEY] == pytest.approx(core.reward)  # Sample.get_reward_value
        assert reward["status"] == "ok"
        assert reward["metrics"] == pytest.approx(dict(core.metrics))
    status, reward = slime_post(
        url, {"prompt": "p", "response": "no idea", "label": label_of(ROWS[0])}
    )
    assert status == 200
    assert (reward[REWARD_KEY], reward["status"]) == (0.0, "unparseable")  # the policy's failure
    assert reward["message"] == "solution_str: no recognised section header"


BAD: dict[str, tuple[dict[str, Any], str]] = {
    "no response": ({"prompt": "p", "label": "New items:"}, "response"),
    "response not a string": ({"prompt": "p", "response": 5, "label": "x"}, "response"),
    "no label": ({"prompt": "p", "response": "x"}, "label"),
    "label null": ({"prompt": "p", "response": "x", "label": None}, "label"),
    "label object without ground_truth": (
        {"prompt": "p", "response": "x", "label": {"data_source": "web_agent"}},
        "label.ground_truth: required in a label object",
    ),
    "unknown data_source": (
        {"prompt": "p", "response": "x", "label": {"data_source": "chess", "ground_truth": "g"}},
        "label.data_source: unknown 'chess'",
    ),
    "ground truth the scorer refuses": (
        {"prompt": "p", "response": "New items:",
         "label": label_of({**ROWS[0], "ground_truth": "no"})},
        "label.ground_truth: no 'New items:', 'Deleted items:' or 'Updated items:' section",
    ),
    "extra_info not an object": (
        {"prompt": "p", "response": "x",
         "label": {"data_source": "web_agent", "ground_truth": "New items:", "extra_info": [1]}},
        "label.extra_info: must be an object",
    ),
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_slime_sample_is_422_naming_the_field(svc: ServiceThread, case: str) -> None:
    import httpx

    body, expected = BAD[case]
    resp = httpx.post(
        f"{svc.http_url}/slime/reward", json=body, headers={"authorization": f"Bearer {TOKEN}"}
    )
    assert resp.status_code == 422, resp.text
    assert expected in resp.text
    ok = slime_post(f"{svc.http_url}/slime/reward",
                    {"prompt": "p", "response": "New items:", "label": "New items:"})  # fmt: skip
    assert ok[0] == 200  # nothing lost: the next sample is served


def test_plain_label_needs_a_server_default(late: ServiceThread) -> None:
    status, body = slime_post(f"{late.http_url}/slime/reward",
                              {"prompt": "p", "response": "x", "label": "New items:"})  # fmt: skip
    assert status == 422
    assert body["detail"].startswith("label: a plain ground truth needs the server setting")


def test_timeout_is_503_not_a_reward(late: ServiceThread) -> None:
    status, body = slime_post(f"{late.http_url}/slime/reward",
                              {"prompt": "p", "response": ROWS[0]["solution_str"],
                               "label": label_of(ROWS[0])})  # fmt: skip
    assert status == 503
    assert body["detail"].startswith("response: status timeout: not scored within")


def test_slime_route_takes_the_token_like_the_others(svc: ServiceThread) -> None:
    sample = {"prompt": "p", "response": "New items:", "label": "New items:"}
    status, body = slime_post(f"{svc.http_url}/slime/reward", sample, token=None)
    assert status == 401
    assert "authorization" in body["detail"]
    status, _ = slime_post(f"{svc.http_url}/slime/reward", sample, token="wrong")
    assert status == 401
    assert slime_post(f"{svc.http_url}/slime/reward", sample)[0] == 200
