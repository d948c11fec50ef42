"""Per-step group diagnostics, hand-computed."""

from __future__ import annotations

import pytest

from rlvr_world.grpo.diagnostics import group_diagnostics
from rlvr_world.queue.schema import ScoredGroup, ScoredSample
from rlvr_world.rewards.types import Status


def _s(n: int, status: Status = Status.OK, *, truncated: bool = False) -> ScoredSample:
    reward = 1.0 if status is Status.OK else None
    return ScoredSample(
        token_ids=[3] * n, logprobs=[-0.1] * n, reward=reward, status=status, truncated=truncated
    )


def _g(version: int, samples: list[ScoredSample]) -> ScoredGroup:
    return ScoredGroup(
        group_id=f"g{version}-{len(samples)}",
        prompt_id="p",
        task="text_game",
        policy_version=version,
        prompt_token_ids=[1],
        samples=samples,
    )


def test_counts_statuses_truncation_lengths_and_ages() -> None:
    groups = [
        _g(5, [_s(2), _s(4, Status.UNPARSEABLE), _s(6, truncated=True)]),
        _g(3, [_s(8), _s(10, Status.TIMEOUT)]),
    ]
    d = group_diagnostics(groups, step=6)
    assert d["samples"] == 5
    assert d["status_ok"] == 3  # two in the first group (one of them truncated), one in the second
    assert d["status_unparseable"] == 1
    assert d["status_timeout"] == 1
    assert d["status_error"] == 0 and d["status_invalid_input"] == 0
    assert d["truncated"] == 1
    assert d["response_len_mean"] == pytest.approx((2 + 4 + 6 + 8 + 10) / 5)
    assert d["sample_age_mean"] == pytest.approx(((6 - 5) + (6 - 3)) / 2)
    assert d["sample_age_max"] == 3


def test_no_groups_gives_zeros_not_errors() -> None:
    d = group_diagnostics([], step=0)
    assert d["samples"] == 0 and d["response_len_mean"] == 0 and d["sample_age_max"] == 0
