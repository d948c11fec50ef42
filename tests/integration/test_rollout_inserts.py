"""Interleaved generation (``GenerateRequest.inserts`` + ``SamplingParams.segment_tokens``) over
real gRPC with the transformers engine and the tiny model of ``test_rollout_grpc``: the layout of
generated and forced tokens, behaviour log-probs against a teacher-forced recomputation of the
whole sequence, and every refused combination (named field, service still serving)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
import torch

from rlvr_world.v1 import rollout_pb2, rollout_pb2_grpc
from services.rollout.engine import InvalidRequest, SamplingParams, plan_segments
from services.rollout.settings import RolloutSettings
from services.rollout.testing import ServiceThread
from tests.helpers.rollout import VOCAB, assert_serving, recompute, request
from tests.helpers.tiny_lm import build_tiny_lm, load_model

pytestmark = pytest.mark.integration
TOL = 1e-4
PROMPT = [0, 40, 41, 42, 43]
RUNS = [[250, 251, 252], [260, 261, 262], [270, 271, 272]]  # e.g. ground-truth action tokens


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_lm(tmp_path_factory.mktemp("tiny_lm_inserts"))


@pytest.fixture(scope="module")
def svc(model_dir: Path) -> Iterator[ServiceThread]:
    settings = RolloutSettings(model=str(model_dir), grpc_port=0, max_n=8, max_tokens=64)
    with ServiceThread(settings) as service:
        yield service


@pytest.fixture(scope="module")
def stub(svc: ServiceThread) -> Iterator[rollout_pb2_grpc.RolloutServiceStub]:
    with grpc.insecure_channel(svc.grpc_address) as channel:
        yield rollout_pb2_grpc.RolloutServiceStub(channel)  # type: ignore[no-untyped-call]


@pytest.fixture(scope="module")
def reference(model_dir: Path) -> Any:
    return load_model(model_dir)


def interleaved(runs: list[list[int]], **sampling: Any) -> rollout_pb2.GenerateRequest:
    params = {"n": 4, "segment_tokens": 5, "ignore_eos": True, **sampling}
    params.setdefault("max_tokens", (len(runs) + 1) * params["segment_tokens"])
    req = request(PROMPT, **params)
    req.inserts.extend(rollout_pb2.TokenIds(ids=run) for run in runs)
    return req


def expected_layout(runs: list[list[int]], segment: int, trailing: bool) -> list[bool]:
    """inserted flags: segment generated tokens, then a run, ...; a last segment unless trailing."""
    flags: list[bool] = []
    for run in runs:
        flags += [False] * segment + [True] * len(run)
    return flags if trailing else flags + [False] * segment


@pytest.mark.parametrize(
    ("temperature", "trailing", "allowed"),
    [(1.0, False, None), (0.7, True, None), (1.0, False, (3, 200)), (0.0, True, None)],
)
def test_inserts_are_placed_and_logprobs_match_teacher_forcing(
    stub: rollout_pb2_grpc.RolloutServiceStub,
    reference: Any,
    temperature: float,
    trailing: bool,
    allowed: tuple[int, int] | None,
) -> None:
    segment = 5
    max_tokens = len(RUNS) * segment if trailing else (len(RUNS) + 1) * segment
    req = interleaved(RUNS, temperature=temperature, max_tokens=max_tokens)
    if allowed is not None:
        req.sampling.allowed_tokens.CopyFrom(
            rollout_pb2.TokenRange(begin=allowed[0], end=allowed[1])
        )
    resp = stub.Generate(req)
    assert list(resp.prompt_token_ids) == PROMPT and len(resp.samples) == 4
    flags = expected_layout(RUNS, segment, trailing)
    for sample in resp.samples:
        tokens, logprobs = list(sample.token_ids), list(sample.logprobs)
        assert list(sample.inserted) == flags
        assert len(tokens) == len(logprobs) == len(flags)
        assert sample.finish_reason == "length"
        forced = [t for t, f in zip(tokens, flags, strict=True) if f]
        assert forced == [t for run in RUNS for t in run]
        assert all(lp == 0.0 for lp, f in zip(logprobs, flags, strict=True) if f)
        generated = [t for t, f in zip(tokens, flags, strict=True) if not f]
        assert len(generated) == max_tokens
        if allowed is not None:
            assert all(allowed[0] <= t < allowed[1] for t in generated)
        expected = recompute(reference, PROMPT, tokens, temperature)
        errors = [abs(a - b) for a, b, f in zip(logprobs, expected, flags, strict=True) if not f]
        assert max(errors) < TOL
    if temperature > 0:
        assert len({tuple(s.token_ids) for s in resp.samples}) > 1
    else:
        assert len({tuple(s.token_ids) for s in resp.samples}) == 1


def test_inserts_condition_what_follows(
    stub: rollout_pb2_grpc.RolloutServiceStub, reference: Any
) -> None:
    """Greedy after different forced runs continues from each run (the runs reach the cache)."""
    first = stub.Generate(interleaved([[250, 251, 252]], n=1, temperature=0.0)).samples[0]
    second = stub.Generate(interleaved([[10, 11, 12]], n=1, temperature=0.0)).samples[0]
    assert list(first.token_ids)[:5] == list(second.token_ids)[:5]  # same prefix before the run
    for sample, run in ((first, [250, 251, 252]), (second, [10, 11, 12])):
        tokens = list(sample.token_ids)
        assert tokens[5:8] == run
        expected = recompute(reference, PROMPT, tokens, 0.0)
        assert max(abs(a - b) for a, b in zip(sample.logprobs[8:], expected[8:], strict=True)) < TOL


def test_seed_reproduces_interleaved_samples(stub: rollout_pb2_grpc.RolloutServiceStub) -> None:
    a = stub.Generate(interleaved(RUNS, seed=11))
    b = stub.Generate(interleaved(RUNS, seed=11))
    assert [list(s.token_ids) for s in a.samples] == [list(s.token_ids) for s in b.samples]


def test_without_inserts_nothing_is_marked(stub: rollout_pb2_grpc.RolloutServiceStub) -> None:
    resp = stub.Generate(request(PROMPT, n=2, max_tokens=6))
    assert all(len(s.inserted) == 0 for s in resp.samples)
    only_segment = stub.Generate(
        request(PROMPT, n=2, max_tokens=6, segment_tokens=6, ignore_eos=True)
    )
    assert all(len(s.token_ids) == 6 and len(s.inserted) == 0 for s in only_segment.samples)


BAD_INTERLEAVED: list[tuple[str, dict[str, Any], list[list[int]], str]] = [
    ("max_tokens", {"max_tokens": 17}, RUNS, "sampling.max_tokens = 17"),
    ("no ignore_eos", {"ignore_eos": False}, RUNS, "sampling.ignore_eos"),
    ("no segment_tokens", {"segment_tokens": 0, "max_tokens": 20}, RUNS, "sampling.segment_tokens"),
    ("negative segment", {"segment_tokens": -1, "max_tokens": 20}, RUNS, "sampling.segment_tokens"),
    ("stop", {"stop": ["x"]}, RUNS, "sampling.stop"),
    ("empty run", {}, [[250], []], "inserts[1] is empty"),
    ("id past vocab", {}, [[250], [VOCAB]], f"inserts[1].ids[0] = {VOCAB}"),
    ("negative id", {}, [[-3]], "inserts[0].ids[0] = -3"),
    ("too many forced", {"max_tokens": 10}, [[5] * 70], "inserts: 70 forced tokens"),
]


@pytest.mark.parametrize("bad", BAD_INTERLEAVED, ids=[c[0] for c in BAD_INTERLEAVED])
def test_bad_interleaved_requests_are_refused_with_the_field(
    svc: ServiceThread,
    stub: rollout_pb2_grpc.RolloutServiceStub,
    bad: tuple[str, dict[str, Any], list[list[int]], str],
) -> None:
    case, sampling, runs, message = bad
    with pytest.raises(grpc.RpcError) as err:
        stub.Generate(interleaved(runs, **sampling))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT, case
    assert message in (err.value.details() or ""), err.value.details()
    assert_serving(svc, stub)


def test_inserted_tokens_count_against_the_context_length(
    svc: ServiceThread, stub: rollout_pb2_grpc.RolloutServiceStub
) -> None:
    req = interleaved([[5] * 60], segment_tokens=32, max_tokens=64)
    req.token_ids.ids[:] = [0] + [40] * 399  # 400 + 64 + 60 > 512 positions; 400 + 64 fits
    with pytest.raises(grpc.RpcError) as err:
        stub.Generate(req)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "60 inserted tokens exceed the model's context length 512" in (err.value.details() or "")
    assert_serving(svc, stub)


def test_plan_segments_follows_the_insert_rules() -> None:
    plain = SamplingParams(max_tokens=7)
    assert plan_segments(plain) == [()]
    params = SamplingParams(max_tokens=6, segment_tokens=2, ignore_eos=True, inserts=((9,), (8,)))
    assert plan_segments(params) == [(9,), (8,), ()]
    trailing = SamplingParams(max_tokens=4, segment_tokens=2, ignore_eos=True, inserts=((9,), (8,)))
    assert plan_segments(trailing) == [(9,), (8,)]
    with pytest.raises(InvalidRequest, match="must be 6 or 4"):
        plan_segments(
            SamplingParams(max_tokens=5, segment_tokens=2, ignore_eos=True, inserts=((9,), (8,)))
        )


def test_client_inserts_reach_the_trainer_as_a_loss_mask(svc: ServiceThread) -> None:
    """Orchestrator client -> rollout service -> wire sample -> GRPO batch -> response mask."""
    import asyncio

    from rlvr_world.apps.orchestrator.worker import to_sample
    from rlvr_world.grpo.groups import prepare_groups
    from rlvr_world.queue.schema import ScoredGroup, group_from_fields
    from rlvr_world.rewards.types import RewardResult, Status
    from rlvr_world.wire.services import Sampling, ServiceClients
    from trainer.model import pack

    async def generate() -> Any:
        # decoder/reward are never called here; their channels stay idle
        clients = ServiceClients(svc.grpc_address, "127.0.0.1:1", "127.0.0.1:1", timeout_s=30)
        try:
            sampling = Sampling(n=3, max_tokens=8, seed=3, ignore_eos=True)
            return await clients.generate(
                "c1", PROMPT, sampling, inserts=[[250, 251], [260]], segment_tokens=4
            )
        finally:
            await clients.close()

    resp = asyncio.run(generate())
    flags = [False] * 4 + [True] * 2 + [False] * 4 + [True]
    assert [list(s.inserted) for s in resp.samples] == [flags] * 3
    rewards = [RewardResult(reward=float(i), status=Status.OK, metrics={}) for i in range(3)]
    wire = [
        to_sample(list(s.token_ids), list(s.logprobs), r, s.inserted)
        for s, r in zip(resp.samples, rewards, strict=True)
    ]
    plain = to_sample([5, 6], [-1.0, -1.0], rewards[0], [False, False])
    assert plain.loss_mask is None
    group = ScoredGroup(
        group_id="c1",
        prompt_id="p",
        task="video",
        policy_version=0,
        prompt_token_ids=list(resp.prompt_token_ids),
        samples=wire,
    )
    back = group_from_fields(group.to_fields())
    batch = pack(prepare_groups([back]).samples, torch.device("cpu"))
    assert batch.response_mask.tolist() == [[0.0 if f else 1.0 for f in flags]] * 3
