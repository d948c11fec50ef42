"""TRL reward function that scores through the reward service.

    from rlvr_world.adapters.trl import RewardServiceFunc
    trainer = GRPOTrainer(..., reward_funcs=[RewardServiceFunc("reward:50051")])

The dataset needs a ``ground_truth`` column and either a ``data_source`` column or
``RewardServiceFunc(default_data_source=...)``; an ``extra_info`` column (dict or JSON) is passed
on (the text game needs its ``data_state``). Completions may be strings or conversational
(``[{"role": "assistant", "content": ...}]``). As TRL's own rewards, it returns one float per
completion, or ``None`` where the reward does not apply: a sample whose score failed (unparseable,
invalid input, timeout, error) gets ``None`` when ``none_on_failure`` (TRL then ignores it), else
the core's reward. The whole group is one ``ScoreBatch`` call.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rlvr_world.client import RewardClient, verl_request


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
        none_on_failure: bool = True,
    ) -> None:
        self.__name__ = "rlvr_reward"  # TRL logs rewards under the function's name
        self._client = RewardClient(address, token=token)
        self.default_data_source = default_data_source
        self.variant = variant
        self.reward_type = reward_type
        self.none_on_failure = none_on_failure

    def __call__(self, completions: Sequence[Any], **kwargs: Any) -> list[float | None]:
        n = len(completions)
        sources = _column(kwargs, "data_source", n, self.default_data_source)
        truths = _column(kwargs, "ground_truth", n)
        extras = _column(kwargs, "extra_info", n)
        requests = []
        for i, completion in enumerate(completions):
            if sources[i] is None or truths[i] is None:
                raise ValueError(f"sample {i}: needs data_source and ground_truth columns")
            row = {
                "data_source": sources[i],
                "solution_str": _text(completion),
                "ground_truth": truths[i],
                "extra_info": extras[i],
                "variant": self.variant,
                "reward_type": self.reward_type,
            }
            requests.append(verl_request(row, str(i)))
        results = self._client.score_batch(requests)
        return [None if (self.none_on_failure and not r.ok) else r.reward for r in results]

    def close(self) -> None:
        self._client.close()
