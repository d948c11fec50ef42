"""Every attack on the reward service from issue 18, replayed with the exact answer it must get.

One real service (gRPC + HTTP on loopback, a token set, one scoring process) takes them all;
after each, its scoring process is the same one (nothing killed it) and it still scores.
"""

from __future__ import annotations

import io
import json
import os
import socket
import subprocess
import sys
import time
import zipfile
from collections.abc import Iterator
from typing import Any

import grpc
import httpx
import numpy as np
import pytest

from rlvr_world.client import verl_request
from rlvr_world.v1 import common_pb2, reward_pb2, reward_pb2_grpc
from services.reward.settings import RewardSettings
from services.reward.testing import ServiceThread
from tests.chaos.support import REPO

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.chaos]
TOKEN = "hostile-test-token"
AUTH = (("authorization", f"Bearer {TOKEN}"),)
TRUTH = "New items:\nNone\n\nDeleted items:\n[3] button 'Go'\n\nUpdated items:\nNone"
ROW = {"data_source": "web_agent", "solution_str": TRUTH, "ground_truth": TRUTH}
NPZ = {"content-type": "application/x-npz", "authorization": f"Bearer {TOKEN}"}
DEEP_MESSAGE = "JSON nested deeper than 64 levels"


def deep(levels: int) -> str:
    return "[" * levels + "]" * levels


@pytest.fixture(scope="module")
def svc() -> Iterator[ServiceThread]:
    settings = RewardSettings(grpc_port=0, http_port=0, workers=1, api_token=TOKEN)
    with ServiceThread(settings) as service:
        yield service


@pytest.fixture(scope="module")
def channel(svc: ServiceThread) -> Iterator[grpc.Channel]:
    with grpc.insecure_channel(svc.grpc_address) as ch:
        yield ch


@pytest.fixture(scope="module")
def stub(channel: grpc.Channel) -> reward_pb2_grpc.RewardServiceStub:
    return reward_pb2_grpc.RewardServiceStub(channel)  # type: ignore[no-untyped-call]


@pytest.fixture(scope="module")
def http(svc: ServiceThread) -> Iterator[httpx.Client]:
    headers = {"authorization": f"Bearer {TOKEN}"}
    with httpx.Client(base_url=svc.http_url, timeout=120, headers=headers) as client:
        yield client


def pool_pids(svc: ServiceThread) -> list[int]:
    pool = svc.service.engine._pool
    assert pool is not None
    return sorted(int(w.proc.pid) for w in pool._procs if w.proc.pid is not None)


def still_scores(svc: ServiceThread, stub: Any, http: httpx.Client, pids: list[int]) -> None:
    """Same scoring process as before, ready, and a good request scores 1.0 on both paths."""
    assert pool_pids(svc) == pids
    resp = stub.Score(verl_request(ROW, "good"), metadata=AUTH, timeout=60)
    assert (resp.status, resp.reward) == (common_pb2.REWARD_STATUS_OK, 1.0)
    assert http.post("/v1/score", json=ROW).json()["reward"] == 1.0
    assert http.get("/readyz").status_code == 200


def invalid(call: Any, *args: Any) -> str:
    with pytest.raises(grpc.RpcError) as err:
        call(*args, metadata=AUTH, timeout=60)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT, err.value.details()
    return str(err.value.details())


# ------------------------------------------------------------------ issue item 2: deep JSON


def test_deep_extra_info_is_invalid_argument_everywhere_and_kills_nothing(
    svc: ServiceThread, stub: Any, http: httpx.Client
) -> None:
    pids = pool_pids(svc)
    hostile = reward_pb2.ScoreRequest()
    hostile.CopyFrom(verl_request(ROW, "deep"))
    hostile.extra_info_json = '{"a": ' + deep(100_000) + "}"  # 200 KB, 100k levels
    assert len(hostile.SerializeToString()) > 200_000
    assert invalid(stub.Score, hostile) == f"extra_info_json: {DEEP_MESSAGE}"
    hostile.extra_info_json = '{"a": ' + deep(900) + "}"  # under json's own recursion guard
    assert invalid(stub.Score, hostile) == f"extra_info_json: {DEEP_MESSAGE}"
    batch = reward_pb2.ScoreBatchRequest(requests=[verl_request(ROW, "ok"), hostile])
    assert invalid(stub.ScoreBatch, batch) == f"requests[1].extra_info_json: {DEEP_MESSAGE}"
    [answer] = list(stub.ScoreStream(iter([hostile]), metadata=AUTH, timeout=60))
    assert answer.status == common_pb2.REWARD_STATUS_INVALID_INPUT
    assert answer.message == f"extra_info_json: {DEEP_MESSAGE}"
    as_text = http.post("/v1/score", json={**ROW, "extra_info": '{"a": ' + deep(100_000) + "}"})
    assert (as_text.status_code, as_text.json()) == (422, {"detail": f"extra_info: {DEEP_MESSAGE}"})
    body = ('{"data_source": "web_agent", "solution_str": "x", "extra_info": {"a": '
            + deep(100_000) + "}}")  # fmt: skip
    in_body = http.post("/v1/score", content=body, headers={"content-type": "application/json"})
    assert (in_body.status_code, in_body.json()) == (422, {"detail": f"body: {DEEP_MESSAGE}"})
    still_scores(svc, stub, http, pids)


def test_deep_json_in_a_get_reward_label_is_422(
    svc: ServiceThread, stub: Any, http: httpx.Client
) -> None:
    pids = pool_pids(svc)
    label = '{"data_source": "web_agent", "ground_truth": ' + deep(5_000) + "}"
    resp = http.post("/get_reward", json={"query": ["x"], "labels": [label]})
    assert (resp.status_code, resp.json()) == (422, {"detail": f"labels[0]: {DEEP_MESSAGE}"})
    still_scores(svc, stub, http, pids)


# ------------------------------------------------------------------ item 6: HTTP 500s, UNKNOWN


def test_lone_surrogates_are_422_naming_the_field(
    svc: ServiceThread, stub: Any, http: httpx.Client
) -> None:
    pids = pool_pids(svc)
    json_type = {"content-type": "application/json"}
    one = b'{"request_id": "\\ud800", "data_source": "web_agent", "solution_str": "x"}'
    resp = http.post("/v1/score", content=one, headers=json_type)
    assert (resp.status_code, resp.json()) == (
        422,
        {"detail": "body.request_id: text holds a lone surrogate"},
    )
    batch = b'{"requests": [{"data_source": "web_agent", "solution_str": "\\udc00"}]}'
    resp = http.post("/v1/score/batch", content=batch, headers=json_type)
    assert (resp.status_code, resp.json()) == (
        422,
        {"detail": "body.requests[0].solution_str: text holds a lone surrogate"},
    )
    pair = json.dumps({**ROW, "request_id": "\U0001f600"}).encode()  # a valid pair is fine
    assert b"\\ud83d\\ude00" in pair
    ok = http.post("/v1/score", content=pair, headers=json_type)
    assert (ok.status_code, ok.json()["request_id"]) == (200, "\U0001f600")
    still_scores(svc, stub, http, pids)


def test_malformed_bytes_are_invalid_argument_not_unknown(
    svc: ServiceThread, channel: grpc.Channel, stub: Any, http: httpx.Client
) -> None:
    pids = pool_pids(svc)
    score = channel.unary_unary("/rlvr_world.v1.RewardService/Score")
    for raw in (b"\xff\xff\xff\xff", b"\x0a\x02\xff\xfe", b"\x12"):  # junk, bad UTF-8, truncated
        details = invalid(score, raw)
        assert details.startswith("request: malformed ScoreRequest message"), details
    stream = channel.stream_stream("/rlvr_world.v1.RewardService/ScoreStream")
    good = verl_request(ROW, "after").SerializeToString()
    answers = [
        reward_pb2.ScoreResponse.FromString(a)
        for a in stream(iter([b"\xff\xff", good]), metadata=AUTH, timeout=60)
    ]
    by_status = sorted((a.status, a.request_id) for a in answers)
    assert by_status == [
        (common_pb2.REWARD_STATUS_OK, "after"),
        (common_pb2.REWARD_STATUS_INVALID_INPUT, ""),
    ]
    still_scores(svc, stub, http, pids)


def _npz(**arrays: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.savez_compressed(buf, **arrays)  # type: ignore[arg-type]
    return buf.getvalue()


def test_corrupt_npz_members_are_422(svc: ServiceThread, stub: Any, http: httpx.Client) -> None:
    pids = pool_pids(svc)
    frames = np.random.default_rng(0).integers(0, 256, (2, 32, 32, 3), dtype=np.uint8)
    good = _npz(frames=frames, target_frames=frames)
    data = bytearray(good)
    start = good.index(b"frames.npy") + 200  # inside the first member's deflate stream
    data[start : start + 64] = bytes(64)
    resp = http.post("/v1/score/npz", content=bytes(data), headers=NPZ)
    assert resp.status_code == 422
    assert resp.json()["detail"].startswith("frames: unreadable .npz member ("), resp.json()
    # a header that declares more data than its member holds
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        header = io.BytesIO()
        np.lib.format.write_array_header_1_0(
            header, {"descr": "|u1", "fortran_order": False, "shape": (10**6, 64, 64, 3)}
        )
        zf.writestr("frames.npy", header.getvalue() + bytes(100))
    resp = http.post("/v1/score/npz", content=buf.getvalue(), headers=NPZ)
    assert resp.status_code == 422
    assert resp.json()["detail"].startswith("frames: declares 12288000000 bytes of data")
    assert http.post("/v1/score/npz", content=good, headers=NPZ).status_code == 200
    still_scores(svc, stub, http, pids)


def test_npz_zip_bomb_is_refused_by_the_total_budget(
    svc: ServiceThread, stub: Any, http: httpx.Client
) -> None:
    """Issue item 5: a ~77 KB body that unpacks to 2 x 39 MB of frames."""
    pids = pool_pids(svc)
    frames = np.zeros((13, 1000, 1000, 3), dtype=np.uint8)  # 39,000,000 bytes
    body = _npz(frames=frames, target_frames=frames)
    assert len(body) < 100_000
    resp = http.post("/v1/score/npz", content=body, headers=NPZ)
    assert resp.status_code == 422
    assert resp.json()["detail"] == (
        "target_frames: unpacks to 39000000 bytes; the archive may unpack to 67108864 bytes "
        "in all (max_payload_bytes)"
    )
    still_scores(svc, stub, http, pids)


# ------------------------------------------------------------------ item 7: auth and binding


def test_tokens_any_scheme_case_and_missing_or_wrong_ones(
    svc: ServiceThread, stub: Any, http: httpx.Client
) -> None:
    req = verl_request(ROW, "t")
    for scheme in ("Bearer", "bearer", "BEARER"):
        meta = (("authorization", f"{scheme} {TOKEN}"),)
        assert stub.Score(req, metadata=meta, timeout=60).reward == 1.0
        resp = httpx.post(
            f"{svc.http_url}/v1/score", json=ROW, headers={"authorization": f"{scheme} {TOKEN}"}
        )
        assert resp.status_code == 200
    for meta in ((), (("authorization", "Bearer nope"),), (("authorization", TOKEN),)):
        with pytest.raises(grpc.RpcError) as err:
            stub.Score(req, metadata=meta, timeout=60)
        assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
        header = dict(meta)
        resp = httpx.post(f"{svc.http_url}/v1/score", json=ROW, headers=header)
        assert resp.status_code == 401
        assert resp.headers["www-authenticate"] == "Bearer"


def test_an_unauthenticated_body_is_refused_before_it_is_read(svc: ServiceThread) -> None:
    """Headers announcing 60 MB, no body sent: the 401 comes at once (nothing buffered)."""
    host, port = svc.http_url.rsplit("/", 1)[-1].split(":")
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(
            b"POST /v1/score HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: 60000000\r\n\r\n"
        )
        reply = sock.recv(4096)
    assert reply.startswith(b"HTTP/1.1 401"), reply[:200]


@pytest.mark.parametrize(
    ("service", "extra"),
    [("reward", ["--http-port", "0", "--workers", "1"]),
     ("decoder", ["--tokenizer", "/nonexistent"]),
     ("rollout", ["--model", "/nonexistent"])],
)  # fmt: skip
def test_binding_beyond_loopback_without_credentials_refuses_to_start(
    service: str, extra: list[str]
) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RLVR_")}
    env["PYTHONPATH"] = str(REPO)
    cmd = [sys.executable, "-m", f"services.{service}", "--host", "0.0.0.0", "--grpc-port", "0"]
    done = subprocess.run([*cmd, *extra], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr[-2000:]
    assert "refusing to bind 0.0.0.0 (beyond loopback) without credentials" in done.stderr
    assert f"RLVR_{service.upper()}_API_TOKEN" in done.stderr


def test_binding_beyond_loopback_with_the_explicit_flag_starts_and_warns() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RLVR_")}
    env["PYTHONPATH"] = str(REPO)
    cmd = [sys.executable, "-m", "services.reward", "--host", "0.0.0.0", "--grpc-port", "0",
           "--http-port", "0", "--workers", "1", "--allow-insecure-bind"]  # fmt: skip
    proc = subprocess.Popen(cmd, env=env, stderr=subprocess.PIPE, text=True)
    lines: list[str] = []
    try:
        assert proc.stderr is not None
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            line = proc.stderr.readline()
            if not line:
                break
            lines.append(line)
            if "reward service ready" in line:
                break
        text = "".join(lines)
        assert "WITHOUT credentials (allow_insecure_bind)" in text
        assert "reward service ready" in text and "auth no auth" in text
    finally:
        proc.terminate()
        proc.wait(timeout=60)
