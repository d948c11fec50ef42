"""Golden cases scored through the service (gRPC and HTTP) give exactly the core's results."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from typing import Any

import grpc
import httpx
import pytest

from rlvr_world.client import to_result, verl_request
from rlvr_world.rewards.dispatch import score_mapping
from rlvr_world.v1 import reward_pb2, reward_pb2_grpc
from services.reward.settings import RewardSettings
from services.reward.testing import ServiceThread
from tests.helpers.shared import read_jsonl, shared_file

pytestmark = pytest.mark.integration


def _extra(value: Any) -> Any:
    return ast.literal_eval(value) if isinstance(value, str) else value


def golden_rows(task: str) -> list[dict[str, Any]]:
    """verl-style requests built from the golden file: every case x variant (x reward type)."""
    path = shared_file("golden", f"golden_{task}.jsonl")
    rows = []
    for case in read_jsonl(path):
        for variant in ("paper", "strict"):
            base = {
                "solution_str": case["response"],
                "ground_truth": case["ground_truth"],
                "variant": variant,
            }
            if task == "web":
                rows.append({**base, "data_source": "web_agent"})
                continue
            for reward_type in ("binary", "task_specific"):
                rows.append(
                    {
                        **base,
                        "data_source": "llm_simulator",
                        "extra_info": _extra(case.get("extra_info")),
                        "reward_type": reward_type,
                    }
                )
    return rows


@pytest.fixture(scope="module")
def svc() -> Iterator[ServiceThread]:
    with ServiceThread(RewardSettings(grpc_port=0, http_port=0, workers=2)) as service:
        yield service


@pytest.mark.parametrize("task", ["web", "text_game"])
def test_golden_through_grpc_and_http_equal_core(task: str, svc: ServiceThread) -> None:
    rows = golden_rows(task)
    core = [score_mapping(r).to_dict() for r in rows]
    with grpc.insecure_channel(svc.grpc_address) as channel:
        stub = reward_pb2_grpc.RewardServiceStub(channel)
        batch = reward_pb2.ScoreBatchRequest(requests=[verl_request(r) for r in rows])
        via_grpc = [to_result(r).to_dict() for r in stub.ScoreBatch(batch, timeout=120).responses]
    with httpx.Client(base_url=svc.http_url, timeout=120) as http:
        resp = http.post("/v1/score/batch", json={"requests": rows})
        resp.raise_for_status()
        via_http = resp.json()["responses"]
    for row, expected, g, h in zip(rows, core, via_grpc, via_http, strict=True):
        answer = {k: v for k, v in h.items() if k != "request_id" and (k != "message" or v)}
        assert g == expected, row
        assert answer == expected, row
