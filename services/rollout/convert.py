"""Wire (``rollout.proto``) to engine types and back, with the request checks of the server.

``params_from_proto`` raises ``InvalidRequest`` with the field name for values out of range; the
zero-value conventions are listed in ``services.rollout.engine``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from rlvr_world.v1 import rollout_pb2
from services.rollout.engine import (
    EngineInfo,
    Generation,
    InvalidRequest,
    SamplingParams,
    plan_segments,
)


def params_from_proto(
    msg: rollout_pb2.SamplingParams,
    max_n: int,
    max_tokens: int,
    inserts: Sequence[rollout_pb2.TokenIds] = (),
) -> SamplingParams:
    """Validated sampling parameters; ``max_n``/``max_tokens`` are the server's limits (the
    forced ``inserts`` of the request count against ``max_tokens`` too). Inserted ids are checked
    against the vocabulary by the engine."""
    if not 1 <= msg.n <= max_n:
        raise InvalidRequest(f"sampling.n = {msg.n}: must be between 1 and {max_n}")
    if not 1 <= msg.max_tokens <= max_tokens:
        raise InvalidRequest(
            f"sampling.max_tokens = {msg.max_tokens}: must be between 1 and {max_tokens}"
        )
    if not math.isfinite(msg.temperature) or msg.temperature < 0:
        raise InvalidRequest(f"sampling.temperature = {msg.temperature}: must be >= 0")
    if not math.isfinite(msg.top_p) or not 0 <= msg.top_p <= 1:
        raise InvalidRequest(f"sampling.top_p = {msg.top_p}: must be in [0, 1] (0: off)")
    if msg.top_k < -1:
        raise InvalidRequest(f"sampling.top_k = {msg.top_k}: must be >= -1 (-1 or 0: off)")
    for index, stop in enumerate(msg.stop):
        if not stop:
            raise InvalidRequest(f"sampling.stop[{index}] is empty")
    allowed: tuple[int, int] | None = None
    if msg.HasField("allowed_tokens"):
        begin, end = msg.allowed_tokens.begin, msg.allowed_tokens.end
        if not 0 <= begin < end:
            raise InvalidRequest(
                f"sampling.allowed_tokens = [{begin}, {end}): need 0 <= begin < end"
            )
        allowed = (begin, end)
    runs = tuple(tuple(int(t) for t in run.ids) for run in inserts)
    forced = sum(len(run) for run in runs)
    if forced > max_tokens:
        raise InvalidRequest(
            f"inserts: {forced} forced tokens in all, more than the server limit {max_tokens}"
        )
    params = SamplingParams(
        n=msg.n,
        temperature=msg.temperature,
        top_p=msg.top_p if msg.top_p > 0 else 1.0,
        top_k=msg.top_k if msg.top_k > 0 else -1,
        max_tokens=msg.max_tokens,
        ignore_eos=msg.ignore_eos,
        seed=msg.seed if msg.seed != 0 else None,
        stop=tuple(msg.stop),
        allowed_tokens=allowed,
        segment_tokens=msg.segment_tokens,
        inserts=runs,
    )
    plan_segments(params)
    return params


def prompt_from_proto(msg: rollout_pb2.GenerateRequest) -> str | list[int]:
    """The prompt text or ids; ``InvalidRequest`` when neither is set."""
    which = msg.WhichOneof("prompt")
    if which == "text":
        return msg.text
    if which == "token_ids":
        return list(msg.token_ids.ids)
    raise InvalidRequest("prompt: set text or token_ids")


def generation_to_proto(request_id: str, gen: Generation) -> rollout_pb2.GenerateResponse:
    """The ``GenerateResponse`` of ``gen`` for the request ``request_id``."""
    return rollout_pb2.GenerateResponse(
        request_id=request_id,
        prompt_token_ids=gen.prompt_token_ids,
        samples=[
            rollout_pb2.Sample(
                token_ids=s.token_ids,
                logprobs=s.logprobs,
                finish_reason=s.finish_reason,
                text=s.text,
                inserted=s.inserted,
            )
            for s in gen.samples
        ],
        policy_version=gen.policy_version,
    )


def info_to_proto(info: EngineInfo) -> rollout_pb2.EngineInfoResponse:
    """The ``EngineInfoResponse`` of ``info`` (``info.extra`` is not on the wire)."""
    return rollout_pb2.EngineInfoResponse(
        engine=info.engine,
        model=info.model,
        policy_version=info.policy_version,
        vocab_size=info.vocab_size,
    )
