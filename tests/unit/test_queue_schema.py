"""Scored-group wire schema: round trip and clear errors for bad entries."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest

from rlvr_world.queue.schema import (
    SCHEMA_VERSION,
    SchemaError,
    ScoredGroup,
    ScoredSample,
    group_from_fields,
    policy_version_of,
)
from rlvr_world.rewards.types import Status


def _group(**overrides: Any) -> ScoredGroup:
    data: dict[str, Any] = {
        "group_id": "g1",
        "prompt_id": "p1",
        "task": "video",
        "policy_version": 3,
        "prompt_token_ids": [1, 2, 3],
        "samples": [
            {"token_ids": [4, 5], "logprobs": [-0.1, -2.0], "reward": 0.5, "status": "ok"},
            {"token_ids": [6], "logprobs": [-0.3], "reward": None, "status": "timeout"},
        ],
    }
    data.update(overrides)
    return ScoredGroup.model_validate(data)


def test_round_trip_through_stream_fields() -> None:
    group = _group()
    fields = group.to_fields()
    assert fields["schema_version"] == str(SCHEMA_VERSION)
    assert policy_version_of(fields) == 3
    back = group_from_fields({k.encode(): v.encode() for k, v in fields.items()})
    assert back == group
    assert back.samples[1].status is Status.TIMEOUT and not back.samples[1].ok


def test_mismatched_token_and_logprob_lengths_rejected() -> None:
    with pytest.raises(ValueError, match="one behaviour log-prob per response token"):
        ScoredSample(token_ids=[1, 2], logprobs=[-0.1], reward=1.0, status=Status.OK)


def test_nan_reward_with_ok_status_rejected() -> None:
    with pytest.raises(ValueError, match="reward must be finite when status is ok"):
        ScoredSample(token_ids=[1], logprobs=[-0.1], reward=math.nan, status=Status.OK)
    failed = ScoredSample(token_ids=[1], logprobs=[-0.1], reward=math.nan, status=Status.ERROR)
    assert not failed.ok


def test_wrong_schema_version_rejected_with_reason() -> None:
    fields = _group().to_fields()
    fields["schema_version"] = "99"
    with pytest.raises(SchemaError, match="schema_version '99' is not supported"):
        group_from_fields(fields)
    payload = json.loads(fields["payload"])
    payload["schema_version"] = 2
    with pytest.raises(ValueError, match="schema_version 2 is not supported"):
        ScoredGroup.model_validate(payload)


def test_malformed_payload_reasons_name_the_problem() -> None:
    good = _group().to_fields()
    with pytest.raises(SchemaError, match="payload is not JSON"):
        group_from_fields({**good, "payload": "{not json"})
    with pytest.raises(SchemaError, match="missing field 'payload'"):
        group_from_fields({k: v for k, v in good.items() if k != "payload"})
    bad = json.loads(good["payload"])
    bad["samples"][0]["logprobs"] = [-0.1]
    with pytest.raises(SchemaError, match=r"invalid samples\.0: .*one behaviour log-prob"):
        group_from_fields({**good, "payload": json.dumps(bad)})
    with pytest.raises(SchemaError, match="group_id field does not match"):
        group_from_fields({**good, "group_id": "other"})
    assert policy_version_of({"policy_version": "x"}) is None


def test_unknown_fields_and_negative_tokens_rejected() -> None:
    with pytest.raises(ValueError, match="extra"):
        _group(surprise=1)
    with pytest.raises(ValueError, match="greater than or equal to 0"):
        _group(prompt_token_ids=[-1])


def test_loss_mask_round_trips_and_defaults_to_none() -> None:
    masked = {
        "token_ids": [4, 5, 6],
        "logprobs": [-0.1, 0.0, -2.0],
        "reward": 0.5,
        "status": "ok",
        "loss_mask": [1, 0, 1],
    }
    group = _group(
        samples=[masked, {"token_ids": [7], "logprobs": [-0.3], "reward": 1.0, "status": "ok"}]
    )
    back = group_from_fields(group.to_fields())
    assert back == group
    assert back.samples[0].loss_mask == [1, 0, 1]
    assert back.samples[1].loss_mask is None


def test_loss_mask_of_the_wrong_length_or_values_is_refused_with_the_field() -> None:
    good = _group().to_fields()
    bad = json.loads(good["payload"])
    bad["samples"][0]["loss_mask"] = [1]
    with pytest.raises(SchemaError, match="loss_mask has 1 entries but token_ids has 2"):
        group_from_fields({**good, "payload": json.dumps(bad)})
    bad["samples"][0]["loss_mask"] = [1, 2]
    with pytest.raises(SchemaError, match=r"invalid samples\.0\.loss_mask\.1"):
        group_from_fields({**good, "payload": json.dumps(bad)})
