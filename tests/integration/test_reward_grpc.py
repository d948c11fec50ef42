"""The reward service over gRPC: a real grpc.aio server on a loopback port 0, real clients."""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import httpx
import numpy as np
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import (
    ProtoReflectionDescriptorDatabase,
)

from rlvr_world.client import (
    RetryPolicy,
    RewardClient,
    RewardServiceUnavailable,
    frames_request,
    verl_request,
)
from rlvr_world.rewards.dispatch import score_mapping
from rlvr_world.rewards.perceptual import make_perceptual
from rlvr_world.rewards.types import InvalidInput, Status
from rlvr_world.rewards.video import VideoRewardConfig, score_video
from rlvr_world.v1 import common_pb2, reward_pb2, reward_pb2_grpc
from services.reward import convert
from services.reward.settings import RewardSettings
from services.reward.testing import ServiceThread
from tests.helpers.reward import TOKEN, example_rows

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def svc() -> Iterator[ServiceThread]:
    settings = RewardSettings(
        grpc_port=0,
        http_port=0,
        workers=1,
        max_batch=16,
        max_payload_bytes=1 << 20,
        preload_perceptual=["stlpips:alex"],
        perceptual_max_wait_ms=20,
    )
    with ServiceThread(settings) as service:
        yield service


@pytest.fixture(scope="module")
def stub(svc: ServiceThread) -> Iterator[reward_pb2_grpc.RewardServiceStub]:
    with grpc.insecure_channel(svc.grpc_address) as channel:
        yield reward_pb2_grpc.RewardServiceStub(channel)


def assert_serving(address: str) -> None:
    with grpc.insecure_channel(address) as channel:
        resp = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=5)
    assert resp.status == health_pb2.HealthCheckResponse.SERVING


def video_pair(t: int = 2, size: int = 32, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    pred = rng.integers(0, 256, (t, size, size, 3), dtype=np.uint8)
    target = rng.integers(0, 256, (t, size, size, 3), dtype=np.uint8)
    return pred, target


# ------------------------------------------------------------------ every task


def test_web_score_matches_core(stub: Any) -> None:
    for row in example_rows("web_agent"):
        resp = stub.Score(verl_request(row, "w"), timeout=30)
        core = score_mapping(row)
        assert resp.request_id == "w"
        assert resp.reward == pytest.approx(core.reward)
        assert dict(resp.metrics) == pytest.approx(dict(core.metrics))


def test_text_game_score_matches_core(stub: Any) -> None:
    for row in example_rows("llm_simulator"):
        resp = stub.Score(verl_request(row), timeout=30)
        core = score_mapping(row)
        assert (resp.reward, resp.message) == (core.reward, core.message)


def test_video_stlpips_scores_and_l1_is_exact(stub: Any) -> None:
    pred, target = video_pair()
    req = frames_request(pred, target, weights={"l1": 1.0, "stlpips": 1.0}, lpips_net="alex")
    resp = stub.Score(req, timeout=60)
    assert resp.status == common_pb2.REWARD_STATUS_OK, resp.message
    l1 = np.abs(pred / 255.0 - target / 255.0).mean()
    assert resp.metrics["l1"] == pytest.approx(l1, rel=1e-6)
    assert resp.metrics["stlpips"] > 0
    assert resp.reward == pytest.approx(-(resp.metrics["l1"] + resp.metrics["stlpips"]), rel=1e-6)


def test_video_patch_rewards_come_back_per_patch(stub: Any, svc: ServiceThread) -> None:
    pred, target = video_pair()
    req = frames_request(
        pred, target, weights={"l1": 1.0, "stlpips": 1.0}, lpips_net="alex", patch_grid=(4, 2)
    )
    resp = stub.Score(req, timeout=60)
    assert resp.status == common_pb2.REWARD_STATUS_OK, resp.message
    patches = np.array(resp.patch_rewards).reshape(2, 4, 2)
    local = np.abs(pred / 255.0 - target / 255.0).reshape(2, 4, 8, 2, 16, 3).mean(axis=(2, 4, 5))
    perceptual = -patches - local  # each patch's ST-LPIPS: the frame's plus its map's deviation
    assert np.ptp(perceptual, axis=(1, 2)).min() > 0  # per patch, not one value per frame
    assert perceptual.mean() == pytest.approx(resp.metrics["stlpips"], rel=1e-6)
    assert patches.mean() == pytest.approx(resp.reward, rel=1e-9)
    config = VideoRewardConfig(
        weights={"l1": 1.0, "stlpips": 1.0}, lpips_net="alex", patch_grid=(4, 2)
    )
    core = score_video(pred, target, config, perceptual=make_perceptual("stlpips", "alex", "cpu"))
    np.testing.assert_allclose(patches.ravel(), core.patch_rewards, rtol=1e-5, atol=1e-7)
    with RewardClient(svc.grpc_address) as client:
        result = client.score_frames(pred, target, weights={"l1": 1.0}, patch_grid=(2, 2))
    assert len(result.patch_rewards) == 2 * 2 * 2
    uneven = stub.Score(frames_request(pred, target, weights={"l1": 1.0}, patch_grid=(3, 3)))
    assert uneven.status == common_pb2.REWARD_STATUS_INVALID_INPUT
    assert "do not split into a 3x3 grid" in uneven.message and not uneven.patch_rewards


def test_video_identical_frames_have_zero_loss(stub: Any) -> None:
    pred, _ = video_pair(t=1)
    resp = stub.Score(frames_request(pred, pred, weights={"l1": 1.0, "mse": 1.0}), timeout=30)
    assert resp.status == common_pb2.REWARD_STATUS_OK
    assert resp.reward == 0.0


# ------------------------------------------------------------------ batch and stream


def test_batch_keeps_order_and_ids(stub: Any) -> None:
    rows = example_rows("web_agent")
    reqs = [verl_request(r, f"id{i}") for i, r in enumerate(rows)]
    pred, target = video_pair(t=1)
    reqs.append(frames_request(pred, target, weights={"l1": 1.0}, request_id="vid"))
    resp = stub.ScoreBatch(reward_pb2.ScoreBatchRequest(requests=reqs), timeout=60)
    assert [r.request_id for r in resp.responses] == [r.request_id for r in reqs]
    for row, out in zip(rows, resp.responses, strict=False):
        assert out.reward == pytest.approx(score_mapping(row).reward)
    assert resp.responses[-1].metrics["l1"] > 0


def test_batch_places_video_answers_between_text_ones(stub: Any) -> None:
    """Text requests are scored and encoded by the pool, video ones by the service process; the
    reply interleaves them in request order, each as its own ``Score`` call answers it."""
    rows = example_rows("web_agent")
    reqs = []
    for i in range(6):
        if i % 2:
            pred, target = video_pair(t=1, size=16, seed=i)
            reqs.append(frames_request(pred, target, weights={"l1": 1.0}, request_id=f"v{i}"))
        else:
            reqs.append(verl_request(rows[i % len(rows)], f"t{i}"))
    resp = stub.ScoreBatch(reward_pb2.ScoreBatchRequest(requests=reqs), timeout=60)
    assert [r.request_id for r in resp.responses] == [r.request_id for r in reqs]
    for req, out in zip(reqs, resp.responses, strict=True):
        assert out == stub.Score(req, timeout=60)


def test_malformed_batch_bytes_are_invalid_argument(stub: Any, svc: ServiceThread) -> None:
    """Bytes that are not a ScoreBatchRequest: refused with the reason, nothing scored."""
    with grpc.insecure_channel(svc.grpc_address) as channel:
        raw = channel.unary_unary("/rlvr_world.v1.RewardService/ScoreBatch")
        for data, expected in [
            (b"\x0a\x05abc", "requests: malformed ScoreBatchRequest (field 1 runs past the end)"),
            (b"\x0a\x02\x12\x05", "requests[0].malformed ScoreRequest"),
        ]:
            with pytest.raises(grpc.RpcError) as err:
                raw(data, timeout=10)
            assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert err.value.details().startswith(expected)
    assert_serving(svc.grpc_address)
    assert stub.ScoreBatch(reward_pb2.ScoreBatchRequest(requests=[_good_text()]), timeout=30)


def test_stream_answers_every_request_by_id(stub: Any) -> None:
    rows = example_rows("web_agent")
    reqs = [verl_request(rows[i % len(rows)], f"s{i}") for i in range(24)]
    bad = reward_pb2.ScoreRequest(request_id="bad", task=common_pb2.Task.Value("TASK_UNSPECIFIED"))
    pred, target = video_pair(t=1, seed=3)
    video = frames_request(pred, target, weights={"stlpips": 1.0}, lpips_net="alex", request_id="v")
    responses = list(stub.ScoreStream(iter([*reqs, bad, video]), timeout=60))
    by_id = {r.request_id: r for r in responses}
    assert len(responses) == len(by_id) == len(reqs) + 2
    for i, req in enumerate(reqs):
        assert by_id[f"s{i}"].reward == pytest.approx(score_mapping(rows[i % len(rows)]).reward)
        assert req.request_id in by_id
    assert by_id["bad"].status == common_pb2.REWARD_STATUS_INVALID_INPUT
    assert by_id["bad"].message.startswith("task:")
    assert by_id["v"].status == common_pb2.REWARD_STATUS_OK


# ------------------------------------------------------------------ health, reflection


def test_health_and_reflection(svc: ServiceThread) -> None:
    assert_serving(svc.grpc_address)
    with grpc.insecure_channel(svc.grpc_address) as channel:
        db = ProtoReflectionDescriptorDatabase(channel)
        services = db.get_services()
        assert "rlvr_world.v1.RewardService" in services
        assert "grpc.health.v1.Health" in services
        desc = db.FindFileContainingSymbol("rlvr_world.v1.RewardService")
        assert desc.name == "rlvr_world/v1/reward.proto"


# ------------------------------------------------------------------ bad input


def _tensor(arr: np.ndarray, **override: Any) -> common_pb2.Tensor:
    t = common_pb2.Tensor(data=arr.tobytes(), shape=list(arr.shape), dtype=arr.dtype.name)
    for k, v in override.items():
        if k == "shape":
            del t.shape[:]
            t.shape.extend(v)
        else:
            setattr(t, k, v)
    return t


def _video(pred: common_pb2.Tensor, target: common_pb2.Tensor) -> reward_pb2.ScoreRequest:
    return reward_pb2.ScoreRequest(task=common_pb2.TASK_VIDEO, frames=pred, target_frames=target)


GOOD = np.zeros((1, 8, 8, 3), dtype=np.float32)
NAN = GOOD.copy()
NAN[0, 1, 1, 1] = np.nan
BAD_REQUESTS = {
    "unknown task": (reward_pb2.ScoreRequest(task=7, text="x"), "task: unknown value 7"),  # type: ignore[arg-type]
    "unspecified task": (reward_pb2.ScoreRequest(text="x"), "task: unknown value 0"),
    "text task with frames": (
        reward_pb2.ScoreRequest(task=common_pb2.TASK_WEB, frames=_tensor(GOOD)),
        "text: task web takes text",
    ),
    "video without frames": (
        reward_pb2.ScoreRequest(task=common_pb2.TASK_VIDEO, text="x"),
        "frames: required",
    ),
    "wrong dtype": (_video(_tensor(GOOD, dtype="complex64"), _tensor(GOOD)), "frames.dtype"),
    "bytes do not match shape": (
        _video(_tensor(GOOD, shape=[1, 8, 8, 4]), _tensor(GOOD)),
        "frames.data",
    ),
    "wrong frame shape": (_video(_tensor(GOOD[0, :, :, :2]), _tensor(GOOD)), "frames.shape"),
    "target shape differs": (_video(_tensor(GOOD), _tensor(GOOD[:, :4])), "target_frames.shape"),
    "NaN frames": (_video(_tensor(NAN), _tensor(GOOD)), "frames.data: contains NaN"),
    "target out of range": (_video(_tensor(GOOD), _tensor(GOOD + 2)), "target_frames.data"),
    "bad weight": (
        reward_pb2.ScoreRequest(
            task=common_pb2.TASK_VIDEO,
            frames=_tensor(GOOD),
            target_frames=_tensor(GOOD),
            options=reward_pb2.ScoreOptions(video=reward_pb2.VideoOptions(weights={"fid": 1.0})),
        ),
        "options.video.weights",
    ),
    "patch grid of three numbers": (
        reward_pb2.ScoreRequest(
            task=common_pb2.TASK_VIDEO,
            frames=_tensor(GOOD),
            target_frames=_tensor(GOOD),
            options=reward_pb2.ScoreOptions(video=reward_pb2.VideoOptions(patch_grid=[2, 2, 2])),
        ),
        "options.video.patch_grid: expected (rows, cols)",
    ),
    "extra_info not JSON": (
        reward_pb2.ScoreRequest(task=common_pb2.TASK_WEB, text="x", extra_info_json="{nope"),
        "extra_info_json: not valid JSON",
    ),
    "unknown variant": (
        reward_pb2.ScoreRequest(
            task=common_pb2.TASK_WEB, text="x", options=reward_pb2.ScoreOptions(variant="loose")
        ),
        "variant",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_REQUESTS))
def test_bad_input_is_invalid_argument_naming_the_field(
    case: str, stub: Any, svc: ServiceThread
) -> None:
    request, expected = BAD_REQUESTS[case]
    with pytest.raises(grpc.RpcError) as err:
        stub.Score(request, timeout=10)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert expected in err.value.details()
    with pytest.raises(grpc.RpcError) as err:
        stub.ScoreBatch(reward_pb2.ScoreBatchRequest(requests=[request]), timeout=10)
    assert err.value.details().startswith("requests[0].")
    assert_serving(svc.grpc_address)


def test_empty_and_oversized_batches_are_refused(stub: Any, svc: ServiceThread) -> None:
    with pytest.raises(grpc.RpcError) as err:
        stub.ScoreBatch(reward_pb2.ScoreBatchRequest(), timeout=10)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "requests: empty batch" in err.value.details()
    row = example_rows("web_agent")[0]
    many = reward_pb2.ScoreBatchRequest(requests=[verl_request(row)] * 17)
    with pytest.raises(grpc.RpcError) as err:
        stub.ScoreBatch(many, timeout=10)
    assert "exceed max_batch=16" in err.value.details()
    assert_serving(svc.grpc_address)


def test_oversized_message_is_resource_exhausted(stub: Any, svc: ServiceThread) -> None:
    big = reward_pb2.ScoreRequest(task=common_pb2.TASK_WEB, text="x" * (2 << 20))
    with pytest.raises(grpc.RpcError) as err:
        stub.Score(big, timeout=10)
    assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert_serving(svc.grpc_address)


# ------------------------------------------------------------------ auth, deadline


@pytest.fixture(scope="module")
def locked() -> Iterator[ServiceThread]:
    """Auth on, and a deadline no scoring can meet."""
    settings = RewardSettings(grpc_port=0, http_port=0, workers=1, api_token=TOKEN, deadline_s=1e-6)
    with ServiceThread(settings) as service:
        yield service


def test_auth_refuses_missing_and_wrong_tokens(locked: ServiceThread) -> None:
    req = verl_request(example_rows("web_agent")[0])
    with grpc.insecure_channel(locked.grpc_address) as channel:
        stub = reward_pb2_grpc.RewardServiceStub(channel)
        for metadata in ((), (("authorization", "Bearer wrong"),), (("authorization", TOKEN),)):
            with pytest.raises(grpc.RpcError) as err:
                stub.Score(req, timeout=10, metadata=metadata)
            assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
            assert "authorization" in err.value.details()
        with pytest.raises(grpc.RpcError) as err:
            list(stub.ScoreStream(iter([req]), timeout=10))
        assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
    assert_serving(locked.grpc_address)  # the health service needs no token


def test_deadline_gives_status_timeout_not_zero(locked: ServiceThread) -> None:
    row = example_rows("web_agent")[0]
    with RewardClient(locked.grpc_address, token=TOKEN) as client:
        result = client.score_verl(row)
    assert result.status is Status.TIMEOUT
    assert "deadline" in result.message


def test_batch_deadline_answers_each_request_timeout_with_its_id(locked: ServiceThread) -> None:
    rows = example_rows("web_agent")
    reqs = [verl_request(rows[i % len(rows)], f"d{i}") for i in range(5)]
    with grpc.insecure_channel(locked.grpc_address) as channel:
        stub = reward_pb2_grpc.RewardServiceStub(channel)
        resp = stub.ScoreBatch(
            reward_pb2.ScoreBatchRequest(requests=reqs),
            timeout=30,
            metadata=(("authorization", f"Bearer {TOKEN}"),),
        )
    assert [r.request_id for r in resp.responses] == [f"d{i}" for i in range(5)]
    assert {r.status for r in resp.responses} == {common_pb2.REWARD_STATUS_TIMEOUT}
    assert all("deadline" in r.message for r in resp.responses)


# ------------------------------------------------------------------ client SDK


def test_client_fails_over_and_reports_all_down(svc: ServiceThread) -> None:
    row = example_rows("web_agent")[0]
    dead = "127.0.0.1:1"
    fast = RetryPolicy(attempts=4, initial_s=0.01, max_s=0.05)
    with RewardClient(f"{dead},{svc.grpc_address}", retry=fast, timeout_s=10) as client:
        results = [client.score_verl(row) for _ in range(4)]
    assert all(r.reward == pytest.approx(score_mapping(row).reward) for r in results)
    with (
        RewardClient([dead, "127.0.0.1:2"], retry=fast, timeout_s=2) as client,
        pytest.raises(RewardServiceUnavailable) as err,
    ):
        client.score_verl(row)
    assert "127.0.0.1:1, 127.0.0.1:2" in str(err.value)
    assert "UNAVAILABLE" in str(err.value)


def test_client_dns_round_robin_target(svc: ServiceThread) -> None:
    port = svc.grpc_address.rsplit(":", 1)[1]
    row = example_rows("web_agent")[0]
    with RewardClient(f"dns:///127.0.0.1:{port}") as client:
        assert client.score_verl(row).reward == pytest.approx(score_mapping(row).reward)
        assert client.score_verl({"data_source": "chess"}).status is Status.INVALID_INPUT


def test_tls(tmp_path: Path) -> None:
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-keyout", str(key), "-out", str(cert), "-subj", "/CN=localhost",
         "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost"],
        check=True, capture_output=True,
    )  # fmt: skip
    settings = RewardSettings(grpc_port=0, http_port=0, workers=1, tls_cert=cert, tls_key=key)
    row = example_rows("web_agent")[0]
    with ServiceThread(settings) as service:
        with RewardClient(service.grpc_address, root_cert=cert) as client:
            assert client.score_verl(row).reward == pytest.approx(score_mapping(row).reward)
        fast = RetryPolicy(attempts=2, initial_s=0.01)
        with (
            RewardClient(service.grpc_address, retry=fast, timeout_s=2) as plain,
            pytest.raises(RewardServiceUnavailable),
        ):
            plain.score_verl(row)


# ------------------------------------------------------------------ text checked in the pool

#: Text requests whose ``extra_info_json`` and options the scoring process parses and validates
#: (``convert.RawTextJob``): case -> (extra_info_json, variant, reward_type, message start).
BAD_TEXT = {
    "extra_info not JSON": ("{nope", "", "", "extra_info_json: not valid JSON"),
    "extra_info a list": ("[1, 2]", "", "", "extra_info_json: must be a JSON object, got list"),
    "extra_info a string": ('"s"', "", "", "extra_info_json: must be a JSON object, got str"),
    "unknown variant": ("", "loose", "", "variant: "),
    "unknown reward_type": ('{"a": 1}', "paper", "dense", "reward_type: "),
}


def _good_text() -> reward_pb2.ScoreRequest:
    return verl_request(example_rows("web_agent")[0], "good")


def _bad_text(case: str, request_id: str = "bad") -> tuple[reward_pb2.ScoreRequest, str]:
    """The request and the exact message the up-front check gives it (it names the field)."""
    extra, variant, reward_type, start = BAD_TEXT[case]
    req = reward_pb2.ScoreRequest()
    req.CopyFrom(_good_text())
    req.request_id, req.extra_info_json = request_id, extra
    req.options.variant, req.options.reward_type = variant, reward_type
    raw = convert.job_from_proto(req)
    assert isinstance(raw, convert.RawTextJob)
    with pytest.raises(InvalidInput) as err:
        raw.checked()
    assert str(err.value).startswith(start)
    return req, str(err.value)


def _rejected_count(svc: ServiceThread) -> float:
    text = httpx.get(f"{svc.http_url}/metrics", timeout=10).text
    match = re.search(
        r'^rlvr_reward_rejected_total\{reason="invalid_input",transport="grpc"\} (\S+)$',
        text,
        re.MULTILINE,
    )
    return float(match[1]) if match else 0.0


@pytest.mark.parametrize("case", sorted(BAD_TEXT))
def test_text_checked_in_the_pool_answers_like_an_upfront_check(
    case: str, stub: Any, svc: ServiceThread
) -> None:
    bad, message = _bad_text(case)
    good = _good_text()
    expected = score_mapping(example_rows("web_agent")[0]).reward
    rejected_before = _rejected_count(svc)
    with pytest.raises(grpc.RpcError) as err:
        stub.Score(bad, timeout=30)
    assert (err.value.code(), err.value.details()) == (grpc.StatusCode.INVALID_ARGUMENT, message)
    with pytest.raises(grpc.RpcError) as err:
        stub.ScoreBatch(reward_pb2.ScoreBatchRequest(requests=[good, good, bad, good]), timeout=30)
    assert (err.value.code(), err.value.details()) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        f"requests[2].{message}",
    )
    by_id = {r.request_id: r for r in stub.ScoreStream(iter([good, bad]), timeout=30)}
    assert by_id["bad"].status == common_pb2.REWARD_STATUS_INVALID_INPUT
    assert by_id["bad"].message == message
    assert by_id["good"].status == common_pb2.REWARD_STATUS_OK
    assert by_id["good"].reward == pytest.approx(expected)
    assert _rejected_count(svc) == rejected_before + 3
    assert_serving(svc.grpc_address)
    assert stub.Score(good, timeout=30).reward == pytest.approx(expected)


def test_batch_names_its_first_invalid_request_wherever_it_was_checked(stub: Any) -> None:
    good = _good_text()
    text1, text_msg = _bad_text("extra_info a list", "t1")
    text2, _ = _bad_text("unknown variant", "t2")
    video, video_msg = BAD_REQUESTS["NaN frames"]  # checked by the event loop
    cases = [
        ([good, text1, good, video], f"requests[1].{text_msg}"),  # pool-checked comes first
        ([good, video, text1], f"requests[1].{video_msg}"),
        ([text1, text2, good], f"requests[0].{text_msg}"),
    ]
    for requests, details in cases:
        with pytest.raises(grpc.RpcError) as err:
            stub.ScoreBatch(reward_pb2.ScoreBatchRequest(requests=requests), timeout=30)
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert err.value.details().startswith(details)
