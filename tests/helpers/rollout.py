"""Rollout-service test helpers: a ``GenerateRequest`` builder, the teacher-forced log-probs a
sample must match, a health-and-generate check, and the refused requests with their answers
(``BAD_GENERATE``, shared by the transformers and vLLM engine tests)."""

from __future__ import annotations

from typing import Any

import grpc
import torch
from grpc_health.v1 import health_pb2, health_pb2_grpc

from rlvr_world.v1 import rollout_pb2, rollout_pb2_grpc
from services.rollout.testing import ServiceThread

EOS = 1
#: Ids of the tiny LM's tokenizer (``tests.helpers.tiny_lm``).
VOCAB = 300
#: ``max_n`` of the test services.
MAX_N = 8


def request(prompt: str | list[int] = "the door", **sampling: Any) -> rollout_pb2.GenerateRequest:
    """Request ``r1``: 4 samples of 16 tokens at temperature 1, seed 7, unless ``sampling`` says."""
    params = {"n": 4, "temperature": 1.0, "max_tokens": 16, "seed": 7, **sampling}
    req = rollout_pb2.GenerateRequest(
        request_id="r1", sampling=rollout_pb2.SamplingParams(**params)
    )
    if isinstance(prompt, str):
        req.text = prompt
    else:
        req.token_ids.ids.extend(prompt)
    return req


def recompute(model: Any, prompt: list[int], tokens: list[int], temperature: float) -> list[float]:
    """log_softmax(logits / T) of each generated token, the whole sequence in one forward pass."""
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([prompt + tokens])).logits[0, len(prompt) - 1 : -1]
    logp = torch.log_softmax(logits.float() / (temperature or 1.0), dim=-1)
    return logp.gather(-1, torch.tensor(tokens).unsqueeze(-1)).squeeze(-1).tolist()


def assert_serving(svc: ServiceThread, stub: rollout_pb2_grpc.RolloutServiceStub) -> None:
    """Health says SERVING and a one-sample request is answered."""
    with grpc.insecure_channel(svc.grpc_address) as channel:
        health = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest())
    assert health.status == health_pb2.HealthCheckResponse.SERVING
    assert len(stub.Generate(request(n=1, max_tokens=2)).samples) == 1


#: (test id, request, status code, words the detail contains)
BAD_GENERATE: list[tuple[str, rollout_pb2.GenerateRequest, grpc.StatusCode, str]] = [
    ("empty text", request(""), grpc.StatusCode.INVALID_ARGUMENT, "prompt.text is empty"),
    ("empty ids", request([]), grpc.StatusCode.INVALID_ARGUMENT, "prompt.token_ids is empty"),
    (
        "no prompt",
        rollout_pb2.GenerateRequest(sampling=rollout_pb2.SamplingParams(n=1, max_tokens=1)),
        grpc.StatusCode.INVALID_ARGUMENT,
        "prompt: set text or token_ids",
    ),
    ("n=0", request(n=0), grpc.StatusCode.INVALID_ARGUMENT, "sampling.n = 0"),
    (
        "n>max",
        request(n=MAX_N + 1),
        grpc.StatusCode.INVALID_ARGUMENT,
        f"sampling.n = {MAX_N + 1}: must be between 1 and {MAX_N}",
    ),
    ("max_tokens=0", request(max_tokens=0), grpc.StatusCode.INVALID_ARGUMENT, "max_tokens = 0"),
    (
        "id out of vocab",
        request([0, 5, VOCAB, VOCAB + 9]),
        grpc.StatusCode.INVALID_ARGUMENT,
        f"prompt.token_ids.ids[2] = {VOCAB} is outside the vocabulary [0, {VOCAB})",
    ),
    (
        "negative id",
        request([0, -1]),
        grpc.StatusCode.INVALID_ARGUMENT,
        "prompt.token_ids.ids[1] = -1",
    ),
    ("temperature<0", request(temperature=-1), grpc.StatusCode.INVALID_ARGUMENT, "temperature"),
    ("top_p>1", request(top_p=1.5), grpc.StatusCode.INVALID_ARGUMENT, "sampling.top_p"),
    ("empty stop", request(stop=[""]), grpc.StatusCode.INVALID_ARGUMENT, "sampling.stop[0]"),
    (
        "allowed range past vocab",
        request(allowed_tokens=rollout_pb2.TokenRange(begin=2, end=VOCAB + 1)),
        grpc.StatusCode.INVALID_ARGUMENT,
        f"sampling.allowed_tokens ends at {VOCAB + 1}, past the vocabulary size {VOCAB}",
    ),
    (
        "empty allowed range",
        request(allowed_tokens=rollout_pb2.TokenRange(begin=3, end=3)),
        grpc.StatusCode.INVALID_ARGUMENT,
        "sampling.allowed_tokens = [3, 3)",
    ),
    (
        "future version",
        rollout_pb2.GenerateRequest(
            text="x", sampling=rollout_pb2.SamplingParams(n=1, max_tokens=1), min_policy_version=5
        ),
        grpc.StatusCode.FAILED_PRECONDITION,
        "min_policy_version 5 is newer than the served weights (version 0)",
    ),
]
