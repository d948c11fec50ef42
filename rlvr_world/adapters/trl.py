"""TRL reward function that scores through the reward service.

    from rlvr_world.adapters.trl import RewardServiceFunc
    trainer = GRPOTrainer(..., reward_funcs=[RewardServiceFunc("reward:50051")])

The dataset needs a ``ground_truth`` column and either a ``data_source`` column or
``RewardServiceFunc(default_data_source=...)``; an ``extra_info`` column (dict or JSON) is passed
on (the text game needs its ``data_state``). Completions may be strings or conversational
(``[{"role": "assistant", "content": ...}]``). The whole group is one ``ScoreBatch`` call.

What each status becomes (docs/integrations.md#one-rule-for-failures; the same rule as our trainer's
``grpo.unparseable_reward``):

* ``ok``: the service's reward (a wrong answer scores low there: that is the policy's signal);
* ``unparseable``: ``unparseable_reward`` (default 0.0): the policy's own failure, so a policy
  that cannot yet write the answer format still gets a gradient from any peer that can. ``None``
  makes it TRL's "not applicable" instead, as the trainer's ``unparseable_reward: null`` does;
* ``invalid_input``, ``timeout``, ``error`` (the caller's data or the service failed): ``None``,
  TRL's "no verdict", with the reason logged as a warning. A batch the service refuses as a whole
  (one bad request fails ``ScoreBatch``) is scored again one request at a time, so only the bad
  samples get ``None``.

An unreachable service raises ``RewardServiceUnavailable`` (after the client's retries): a
training step is never fed a batch of ``None``. Each call also hands TRL a ``reward_status``
column for its completions table (``log_extra``) and the share of each non-ok status as
``rlvr_reward/<status>_frac`` metrics (``log_metric``), when the trainer passes those hooks.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

from rlvr_world.rewards.types import InvalidInput, RewardResult, Status, failed
from rlvr_world.v1 import reward_pb2
from rlvr_world.wire.reward import RewardClient, verl_request

log = logging.getLogger(__name__)


def _text(completion: Any) -> str:
    if isinstance(completion, str):
        return completion
    if isinstance(completion, list) and completion and isinstance(completion[-1], dict):
        return str(completion[-1].get("content", ""))
    raise TypeError(f"completions: expected str or a list of messages, got {type(completion)}")


def _column(kwargs: dict[str, Any], name: str, n: int, default: Any = None) -> list[Any]:
    values = kwargs.get(name)
    if values is None:
        return [default] * n
    if len(values) != n:
        raise ValueError(f"{name}: {len(values)} values for {n} completions")
    return list(values)


def trl_reward(result: RewardResult, unparseable_reward: float | None) -> float | None:
    """The value TRL gets for one scored sample (module docstring)."""
    if result.status is Status.OK:
        return result.reward
    if result.status is Status.UNPARSEABLE:
        return unparseable_reward
    return None


class RewardServiceFunc:
    """A TRL ``reward_funcs`` entry: ``(completions, **columns) -> list[float | None]``."""

    def __init__(
        self,
        address: str | None = None,
        *,
        token: str | None = None,
        default_data_source: str | None = None,
        variant: str = "",
        reward_type: str = "",
        unparseable_reward: float | None = 0.0,
    ) -> None:
        self.__name__ = "rlvr_reward"  # TRL logs rewards under the function's name
        self._client = RewardClient(address, token=token)
        self.default_data_source = default_data_source
        self.variant = variant
        self.reward_type = reward_type
        self.unparseable_reward = unparseable_reward

    def _requests(
        self, completions: Sequence[Any], kwargs: dict[str, Any]
    ) -> list[reward_pb2.ScoreRequest | RewardResult]:
        """One proto request per completion, or the ``invalid_input`` result of a bad row."""
        n = len(completions)
        if kwargs.get("ground_truth") is None:
            raise ValueError("ground_truth: the dataset needs this column")
        if kwargs.get("data_source") is None and self.default_data_source is None:
            raise ValueError(
                "data_source: the dataset needs this column, or pass "
                "RewardServiceFunc(default_data_source=...)"
            )
        sources = _column(kwargs, "data_source", n, self.default_data_source)
        truths = _column(kwargs, "ground_truth", n)
        extras = _column(kwargs, "extra_info", n)
        out: list[reward_pb2.ScoreRequest | RewardResult] = []
        for i, completion in enumerate(completions):
            row = {
                "data_source": sources[i],
                "solution_str": _text(completion),
                "ground_truth": truths[i],
                "extra_info": extras[i],
                "variant": self.variant,
                "reward_type": self.reward_type,
            }
            try:
                out.append(verl_request(row, str(i)))
            except InvalidInput as exc:
                out.append(failed(Status.INVALID_INPUT, str(exc)))
        return out

    def _score(self, items: list[reward_pb2.ScoreRequest | RewardResult]) -> list[RewardResult]:
        requests = [r for r in items if isinstance(r, reward_pb2.ScoreRequest)]
        try:
            scored = iter(self._client.score_batch(requests) if requests else [])
        except InvalidInput as exc:
            log.warning("reward batch refused (%s); scoring its %d requests one by one",
                        exc, len(requests))  # fmt: skip
            scored = iter([self._one(r) for r in requests])
        return [next(scored) if isinstance(r, reward_pb2.ScoreRequest) else r for r in items]

    def _one(self, request: reward_pb2.ScoreRequest) -> RewardResult:
        try:
            return self._client.score(request)
        except InvalidInput as exc:
            return failed(Status.INVALID_INPUT, str(exc))

    def __call__(self, completions: Sequence[Any], **kwargs: Any) -> list[float | None]:
        results = self._score(self._requests(completions, kwargs))
        rewards = [trl_reward(r, self.unparseable_reward) for r in results]
        for i, res in enumerate(results):
            if res.status not in (Status.OK, Status.UNPARSEABLE):
                log.warning("sample %d: not scored, None for TRL (status %s: %s)",
                            i, res.status.value, res.message or "no message")  # fmt: skip
        _report(results, kwargs.get("log_extra"), kwargs.get("log_metric"))
        return rewards

    def close(self) -> None:
        """Close the reward client's channels."""
        self._client.close()


def _report(
    results: Sequence[RewardResult],
    log_extra: Callable[[str, list[Any]], None] | None,
    log_metric: Callable[[str, float], None] | None,
) -> None:
    """Statuses into TRL's completions table and per-status shares into its metrics."""
    if log_extra is not None:
        log_extra("reward_status", [r.status.value for r in results])
    if log_metric is not None and results:
        for status in Status:
            if status is not Status.OK:
                share = sum(r.status is status for r in results) / len(results)
                log_metric(f"rlvr_reward/{status.value}_frac", share)
