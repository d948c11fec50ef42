"""Wire schema of one scored group: the entry that travels on the Redis Stream.

Producer: the orchestrator / rollout worker (one entry per prompt, after its G samples are
generated and scored). Consumer: the GRPO trainer (``trainer/``), which turns groups into
advantages and a policy loss.

A stream entry carries three small routing fields next to the JSON payload, so the queue can
count stale entries and route bad ones without decoding the payload:

``schema_version``, ``group_id``, ``policy_version``, ``payload`` (JSON of :class:`ScoredGroup`).

This module validates; it does not talk to Redis (see ``rlvr_world.queue.stream``).
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Mapping
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from rlvr_world.rewards.types import Status

SCHEMA_VERSION = 1
"""Bump when a field changes meaning; consumers reject other versions (dead-letter)."""

#: How far above 0 an ok sample's log-prob may lie (float rounding in the engine).
LOGPROB_TOLERANCE = 1e-6

TokenId = Annotated[int, Field(ge=0)]
MaskBit = Annotated[int, Field(ge=0, le=1)]


class SchemaError(ValueError):
    """A stream entry that cannot be trained on; ``reason`` is short and names the field."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class ScoredSample(BaseModel):
    """One sampled response: tokens, behaviour log-probs (one per token), reward and status,
    optionally which tokens the trainer leaves out of the loss (``loss_mask``), whether it was
    cut at the token limit (``truncated``) and a reward per token (``token_rewards``)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    token_ids: list[TokenId] = Field(min_length=1, description="response token ids")
    logprobs: list[float] = Field(
        min_length=1, description="behaviour log-prob of each response token (same length)"
    )
    reward: float | None = Field(
        description="scalar reward; must be finite when status is ok, may be null otherwise"
    )
    status: Status = Field(description="reward status; samples not ok are excluded from GRPO")
    metrics: dict[str, float] = Field(default_factory=dict, description="named reward metrics")
    loss_mask: list[MaskBit] | None = Field(
        default=None,
        description=(
            "per response token: 1 trained, 0 left out of the loss (e.g. tokens the rollout "
            "forced, such as a video model's ground-truth actions); null: every token trained"
        ),
    )
    truncated: bool = Field(
        default=False,
        description=(
            "the sample hit max_tokens before its end-of-sequence token, although the request "
            "let it stop (never set when the request ignored EOS, as video rollouts do); the "
            "trainer's grpo.truncated_reward decides what it trains with"
        ),
    )

    token_rewards: list[float] | None = Field(
        default=None,
        description=(
            "per response token, that token's own share of the reward (a single-step video "
            "frame scored per patch: token k gets patch k's reward); null: one reward for the "
            "whole sample. Used by the trainer's grpo.token_credit"
        ),
    )

    @model_validator(mode="after")
    def _check(self) -> ScoredSample:
        if len(self.token_ids) != len(self.logprobs):
            raise ValueError(
                f"token_ids has {len(self.token_ids)} entries but logprobs has "
                f"{len(self.logprobs)}: one behaviour log-prob per response token is required"
            )
        if self.loss_mask is not None and len(self.loss_mask) != len(self.token_ids):
            raise ValueError(
                f"loss_mask has {len(self.loss_mask)} entries but token_ids has "
                f"{len(self.token_ids)}: one mask bit per response token is required"
            )
        if self.token_rewards is not None:
            if len(self.token_rewards) != len(self.token_ids):
                raise ValueError(
                    f"token_rewards has {len(self.token_rewards)} entries but token_ids has "
                    f"{len(self.token_ids)}: one reward per response token is required"
                )
            if not all(math.isfinite(r) for r in self.token_rewards):
                raise ValueError("token_rewards must be finite")
        if self.status is Status.OK:
            if self.reward is None or not math.isfinite(self.reward):
                raise ValueError(f"reward must be finite when status is ok, got {self.reward!r}")
            if not all(math.isfinite(lp) and lp <= LOGPROB_TOLERANCE for lp in self.logprobs):
                raise ValueError("logprobs must be finite and <= 0 when status is ok")
        return self

    @property
    def ok(self) -> bool:
        """Whether the sample was scored (then its reward is finite)."""
        return self.status is Status.OK


class ScoredGroup(BaseModel):
    """G samples of one prompt, generated by the policy at ``policy_version``."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    schema_version: int = Field(default=SCHEMA_VERSION, description="wire schema version")
    group_id: str = Field(min_length=1, max_length=200, description="idempotency key")
    prompt_id: str = Field(min_length=1, max_length=500, description="dataset id of the prompt")
    task: str = Field(min_length=1, max_length=64, description="text_game | web | video | ...")
    policy_version: int = Field(ge=0, description="trainer step of the weights that sampled it")
    prompt_token_ids: list[TokenId] = Field(min_length=1, description="prompt token ids")
    samples: list[ScoredSample] = Field(min_length=1, description="the G scored samples")
    created_at: float = Field(default_factory=time.time, description="unix time of creation")

    @model_validator(mode="after")
    def _check_version(self) -> ScoredGroup:
        if self.schema_version != SCHEMA_VERSION:
            raise ValueError(
                f"schema_version {self.schema_version} is not supported (expected {SCHEMA_VERSION})"
            )
        return self

    def to_fields(self) -> dict[str, str]:
        """The stream entry fields (all strings) for XADD."""
        return {
            "schema_version": str(self.schema_version),
            "group_id": self.group_id,
            "policy_version": str(self.policy_version),
            "payload": self.model_dump_json(),
        }


def _text(fields: Mapping[Any, Any], name: str) -> str:
    raw = fields.get(name, fields.get(name.encode()))
    if raw is None:
        raise SchemaError(f"missing field {name!r}")
    return raw.decode() if isinstance(raw, bytes) else str(raw)


def _first_error(err: ValidationError) -> str:
    first = err.errors()[0]
    loc = ".".join(str(p) for p in first["loc"]) or "payload"
    return f"invalid {loc}: {first['msg']}"


def group_from_fields(fields: Mapping[Any, Any]) -> ScoredGroup:
    """Decode and validate a stream entry; raise :class:`SchemaError` with a short reason."""
    version = _text(fields, "schema_version")
    if version != str(SCHEMA_VERSION):
        raise SchemaError(
            f"schema_version {version!r} is not supported (expected {SCHEMA_VERSION})"
        )
    payload = _text(fields, "payload")
    try:
        data = json.loads(payload)
    except json.JSONDecodeError as exc:
        raise SchemaError(f"payload is not JSON: {exc.msg} at char {exc.pos}") from exc
    if not isinstance(data, dict):
        raise SchemaError(f"payload must be a JSON object, got {type(data).__name__}")
    try:
        group = ScoredGroup.model_validate(data)
    except ValidationError as exc:
        raise SchemaError(_first_error(exc)) from exc
    if group.group_id != _text(fields, "group_id"):
        raise SchemaError("group_id field does not match payload.group_id")
    return group


def policy_version_of(fields: Mapping[Any, Any]) -> int | None:
    """The routing ``policy_version`` of an entry, or None when absent or not an int."""
    try:
        return int(_text(fields, "policy_version"))
    except (SchemaError, ValueError):
        return None
