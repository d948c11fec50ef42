"""Service-level conversions: wire tensors and requests -> jobs, chunking, settings, CLI parser."""

from __future__ import annotations

import argparse

import numpy as np
import pytest

from rlvr_world.backoff import Backoff
from rlvr_world.client import RetryPolicy, split_addresses, verl_request
from rlvr_world.rewards.dispatch import score_mapping
from rlvr_world.rewards.types import InvalidInput, RewardResult, Status
from rlvr_world.v1 import common_pb2, reward_pb2
from rlvr_world.wire import codec
from services.reward import convert
from services.reward.engine import chunks, score_text_chunk, text_row
from services.reward.settings import RewardSettings


def test_decode_tensor_round_trip_and_unit_range() -> None:
    arr = np.arange(24, dtype=np.float32).reshape(1, 2, 4, 3) / 23
    t = codec.encode_tensor(arr)
    out = convert.decode_tensor(t.data, list(t.shape), t.dtype, "frames")
    assert out.dtype == np.float32
    np.testing.assert_array_equal(out, arr)
    ints = np.array([[[0, 255, 7]]], dtype=np.int64)
    assert convert.decode_tensor(ints.tobytes(), [1, 1, 3], "int64", "x").dtype == np.uint8


@pytest.mark.parametrize(
    ("data", "shape", "dtype", "message"),
    [
        (b"\0" * 12, [1, 1, 3], "bool", "frames.dtype: unsupported 'bool'"),
        (b"\0" * 12, [], "float32", "frames.shape: missing"),
        (b"\0" * 12, [1, 0, 3], "float32", "frames.shape: every dimension must be positive"),
        (b"\0" * 11, [1, 1, 3], "float32", "frames.data: 11 bytes, but shape (1, 1, 3)"),
        (np.array([np.inf, 0, 0], np.float32).tobytes(), [1, 1, 3], "float32", "NaN or infinity"),
        (
            np.array([0, 256, 0], np.int32).tobytes(),
            [1, 1, 3],
            "int32",
            "values must lie in [0, 255]",
        ),
    ],
)
def test_decode_tensor_names_the_field(
    data: bytes, shape: list[int], dtype: str, message: str
) -> None:
    with pytest.raises(
        InvalidInput, match=message.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")
    ):
        convert.decode_tensor(data, shape, dtype, "frames")


def test_job_from_proto_text_and_status_mapping() -> None:
    row = {"data_source": "web_agent", "solution_str": "s", "ground_truth": "g",
           "extra_info": {"k": np.int64(2)}, "variant": "paper"}  # fmt: skip
    raw = convert.job_from_proto(verl_request(row, "r1"))
    assert isinstance(raw, convert.RawTextJob)  # parsed and validated by the pool process
    job = raw.checked()
    assert (job.task, job.request.variant, job.request.extra_info) == ("web", "paper", {"k": 2})
    resp = convert.result_to_proto("r1", RewardResult(0.5, Status.UNPARSEABLE, {"f1": 0.5}, "why"))
    assert resp.status == common_pb2.REWARD_STATUS_UNPARSEABLE
    assert convert.result_from_proto(resp) == RewardResult(
        0.5, Status.UNPARSEABLE, {"f1": 0.5}, "why"
    )


def test_video_options_errors_name_the_proto_field() -> None:
    frames = codec.encode_tensor(np.zeros((1, 4, 4, 3), np.uint8))
    req = reward_pb2.ScoreRequest(
        task=common_pb2.TASK_VIDEO, frames=frames, target_frames=frames,
        options=reward_pb2.ScoreOptions(video=reward_pb2.VideoOptions(aggregation="median")),
    )  # fmt: skip
    with pytest.raises(InvalidInput, match=r"^options\.video\.aggregation: 'median'"):
        convert.job_from_proto(req)


def test_chunks_cover_every_item_once() -> None:
    for n, workers in [(0, 1), (1, 4), (7, 2), (1000, 2)]:
        parts = chunks(n, workers)
        assert [i for p in parts for i in p] == list(range(n))
        assert all(len(p) <= 64 for p in parts)
    assert len(chunks(8, 2)) == 8  # small batches still spread over the workers
    assert len(chunks(90, 2, per_worker=1)) == 2  # one chunk per process when asked


def test_client_address_parsing_and_backoff() -> None:
    assert split_addresses("a:1, b:2,") == ["a:1", "b:2"]
    assert split_addresses("dns:///reward:50051") == ["dns:///reward:50051"]
    with pytest.raises(ValueError, match="address"):
        split_addresses(" , ")
    policy = RetryPolicy(initial_s=0.1, multiplier=2, max_s=0.3)
    assert 0.05 <= policy.delay(0) <= 0.15
    assert 0.15 <= policy.delay(5) <= 0.45
    with pytest.raises(InvalidInput, match="data_source: unknown 'chess'"):
        verl_request({"data_source": "chess", "solution_str": "", "ground_truth": ""})


def test_the_client_and_the_orchestrator_share_one_backoff_with_their_own_defaults() -> None:
    client, orchestrator = RetryPolicy(), Backoff()
    assert isinstance(client, Backoff)
    assert (client.attempts, client.initial_s, client.multiplier, client.max_s) == (5, 0.05, 2, 2)
    assert client.jitter == 0.5  # the client's +-50%
    assert (orchestrator.attempts, orchestrator.initial_s, orchestrator.max_s) == (8, 0.2, 5.0)
    assert orchestrator.jitter == 0.25


def test_settings_from_env_and_tls_pair(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RLVR_REWARD_GRPC_PORT", "0")
    monkeypatch.setenv("RLVR_REWARD_API_TOKEN", "t")
    monkeypatch.setenv("RLVR_REWARD_PRELOAD_PERCEPTUAL", '["stlpips:alex"]')
    s = RewardSettings()
    assert (s.grpc_port, s.token(), s.preload_perceptual) == (0, "t", ["stlpips:alex"])
    with pytest.raises(ValueError, match="tls_cert and tls_key"):
        RewardSettings(tls_cert="c.pem")


def test_cli_parser_overrides_only_given_options() -> None:
    from services.reward.cli import COMMAND

    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="command")
    COMMAND.add_parser(sub)
    args = parser.parse_args(["serve", "reward", "--grpc-port", "0", "--workers", "3"])
    settings = COMMAND.settings_from_args(args)
    assert (settings.grpc_port, settings.workers, settings.http_port) == (0, 3, 8000)


def test_pool_side_checks_answer_rejected_without_failing_neighbours() -> None:
    row = {"data_source": "web_agent", "solution_str": "a b", "ground_truth": "a c"}
    good = convert.job_from_proto(verl_request(row))
    bad = convert.job_from_proto(verl_request({**row, "variant": "loose"}))
    assert isinstance(good, convert.RawTextJob) and isinstance(bad, convert.RawTextJob)
    with pytest.raises(InvalidInput) as err:
        bad.checked()
    rows = [text_row(good), text_row(bad), text_row(good.checked())]
    assert [r[0] for r in rows] == [False, False, True]  # raw, raw, validated
    out = score_text_chunk(rows)
    expected = score_mapping(row)
    assert out[0] == out[2] == expected
    assert isinstance(out[1], convert.Rejected)
    assert (out[1].status, out[1].message) == (Status.INVALID_INPUT, str(err.value))
