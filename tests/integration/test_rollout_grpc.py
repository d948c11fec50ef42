"""Rollout service over real gRPC on loopback with the transformers engine and a tiny local model:
samples and their behaviour log-probs, seeds, lengths, stop strings, and every refused input."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from rlvr_world.v1 import rollout_pb2, rollout_pb2_grpc
from services.rollout.settings import RolloutSettings
from services.rollout.testing import ServiceThread
from services.rollout.weights import NOT_LOADABLE
from tests.helpers.rollout import (
    BAD_GENERATE,
    EOS,
    MAX_N,
    VOCAB,
    assert_serving,
    recompute,
    request,
)
from tests.helpers.tiny_lm import build_tiny_lm, load_model

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_lm(tmp_path_factory.mktemp("tiny_lm"))


@pytest.fixture(scope="module")
def weights_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("weights")


@pytest.fixture(scope="module")
def svc(model_dir: Path, weights_root: Path) -> Iterator[ServiceThread]:
    settings = RolloutSettings(
        model=str(model_dir), grpc_port=0, max_n=MAX_N, max_tokens=64, weights_roots=[weights_root]
    )
    with ServiceThread(settings) as service:
        yield service


@pytest.fixture(scope="module")
def stub(svc: ServiceThread) -> Iterator[rollout_pb2_grpc.RolloutServiceStub]:
    with grpc.insecure_channel(svc.grpc_address) as channel:
        yield rollout_pb2_grpc.RolloutServiceStub(channel)  # type: ignore[no-untyped-call]


@pytest.fixture(scope="module")
def reference(model_dir: Path) -> Any:
    """The same weights loaded independently, for teacher-forced recomputation."""
    return load_model(model_dir)


@pytest.mark.parametrize(
    ("temperature", "top_k", "top_p"), [(1.0, -1, 0.0), (0.7, 50, 0.9), (0.0, 0, 0.0)]
)
def test_logprobs_match_teacher_forced_recomputation(
    stub: rollout_pb2_grpc.RolloutServiceStub,
    reference: Any,
    temperature: float,
    top_k: int,
    top_p: float,
) -> None:
    resp = stub.Generate(request(n=6, temperature=temperature, top_k=top_k, top_p=top_p))
    assert resp.request_id == "r1"
    assert resp.policy_version == 0
    assert len(resp.samples) == 6
    prompt = list(resp.prompt_token_ids)
    for sample in resp.samples:
        tokens = list(sample.token_ids)
        assert len(sample.logprobs) == len(tokens) >= 1
        expected = recompute(reference, prompt, tokens, temperature)
        assert max(abs(a - b) for a, b in zip(sample.logprobs, expected, strict=True)) < 1e-4
        if sample.finish_reason == "stop":
            assert tokens[-1] == EOS and EOS not in tokens[:-1]
        else:
            assert sample.finish_reason == "length" and len(tokens) == 16
    if temperature == 0.0:  # greedy: every sample the same
        assert len({tuple(s.token_ids) for s in resp.samples}) == 1


def test_text_prompt_uses_the_model_tokenizer(
    stub: rollout_pb2_grpc.RolloutServiceStub, model_dir: Path
) -> None:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    resp = stub.Generate(request("the kettle is on the stove", n=1))
    assert list(resp.prompt_token_ids) == tokenizer("the kettle is on the stove")["input_ids"]
    sample = resp.samples[0]
    assert sample.text == tokenizer.decode(list(sample.token_ids), skip_special_tokens=True)


def test_seed_reproduces_samples_and_another_seed_differs(
    stub: rollout_pb2_grpc.RolloutServiceStub,
) -> None:
    def draw(seed: int) -> list[tuple[int, ...]]:
        resp = stub.Generate(request([0, 5, 6, 7], n=4, seed=seed, ignore_eos=True))
        return [tuple(s.token_ids) for s in resp.samples]

    first = draw(11)
    assert draw(11) == first
    assert draw(12) != first
    assert len(set(first)) > 1  # the n samples of one request differ


def test_ignore_eos_and_max_tokens_set_the_lengths(
    stub: rollout_pb2_grpc.RolloutServiceStub,
) -> None:
    stopped = stub.Generate(request(n=8, max_tokens=24, seed=3)).samples
    assert any(s.finish_reason == "stop" for s in stopped)
    forced = stub.Generate(request(n=8, max_tokens=24, seed=3, ignore_eos=True)).samples
    assert all(s.finish_reason == "length" and len(s.token_ids) == 24 for s in forced)
    assert any(EOS in s.token_ids for s in forced)  # EOS was drawn and did not stop
    for short, long in zip(stopped, forced, strict=True):  # same seed: same draws
        assert list(long.token_ids[: len(short.token_ids)]) == list(short.token_ids)
    one = stub.Generate(request(n=3, max_tokens=1, ignore_eos=True)).samples
    assert [len(s.token_ids) for s in one] == [1, 1, 1]


def test_allowed_tokens_keep_every_sample_in_the_range(
    stub: rollout_pb2_grpc.RolloutServiceStub, reference: Any
) -> None:
    allowed = rollout_pb2.TokenRange(begin=5, end=12)
    resp = stub.Generate(
        request([1, 2, 3], n=4, max_tokens=12, ignore_eos=True, allowed_tokens=allowed)
    )
    ids = [t for s in resp.samples for t in s.token_ids]
    assert len(ids) == 48 and all(5 <= t < 12 for t in ids)
    assert len({tuple(s.token_ids) for s in resp.samples}) > 1  # still sampled, not one path


def test_stop_strings_end_samples_and_are_cut_from_text(
    stub: rollout_pb2_grpc.RolloutServiceStub, model_dir: Path
) -> None:
    from transformers import AutoTokenizer

    tokenizer: Any = AutoTokenizer.from_pretrained(model_dir)
    resp = stub.Generate(request(n=8, max_tokens=40, seed=5, ignore_eos=True, stop=["e", "o"]))
    hit = 0
    for sample in resp.samples:
        full = tokenizer.decode(list(sample.token_ids), skip_special_tokens=True)
        assert "e" not in sample.text and "o" not in sample.text
        if sample.finish_reason == "stop":
            hit += 1
            assert full.startswith(sample.text) and full[len(sample.text)] in "eo"
            shorter = tokenizer.decode(list(sample.token_ids[:-1]), skip_special_tokens=True)
            assert "e" not in shorter and "o" not in shorter  # stopped at the first hit
    assert hit > 0


def test_info_reports_engine_model_version_vocab(
    stub: rollout_pb2_grpc.RolloutServiceStub, model_dir: Path
) -> None:
    info = stub.Info(rollout_pb2.EngineInfoRequest())
    assert (info.engine, info.model, info.policy_version, info.vocab_size) == (
        "transformers",
        str(model_dir),
        0,
        VOCAB,
    )


@pytest.mark.parametrize(
    ("req", "code", "message"),
    [pytest.param(*case[1:], id=case[0]) for case in BAD_GENERATE],
)
def test_bad_generate_requests_get_a_clear_status_and_the_service_stays_healthy(
    svc: ServiceThread,
    stub: rollout_pb2_grpc.RolloutServiceStub,
    req: rollout_pb2.GenerateRequest,
    code: grpc.StatusCode,
    message: str,
) -> None:
    with pytest.raises(grpc.RpcError) as err:
        stub.Generate(req)
    assert err.value.code() == code
    assert message in (err.value.details() or "")
    assert_serving(svc, stub)


def test_load_weights_from_unknown_path_is_not_found_with_one_message(
    svc: ServiceThread, stub: rollout_pb2_grpc.RolloutServiceStub, weights_root: Path
) -> None:
    """Missing, a file, an empty folder: the same answer, so it tells nothing about the disk."""
    (weights_root / "a_file").write_text("x")
    (weights_root / "empty").mkdir(exist_ok=True)
    for name in ("nope", "a_file", "empty"):
        with pytest.raises(grpc.RpcError) as err:
            path = str(weights_root / name)
            stub.LoadWeights(rollout_pb2.LoadWeightsRequest(version=3, path=path))
        assert err.value.code() == grpc.StatusCode.NOT_FOUND
        assert err.value.details() == NOT_LOADABLE
    assert stub.Info(rollout_pb2.EngineInfoRequest()).policy_version == 0
    assert_serving(svc, stub)
