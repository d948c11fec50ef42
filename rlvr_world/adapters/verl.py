"""verl reward function that scores through the reward service (one line of verl config).

    custom_reward_function:
      path: /path/to/site-packages/rlvr_world/adapters/verl.py   # or python -c 'import ...; print'
      name: compute_score
      reward_kwargs:            # all optional
        address: reward:50051   # default: env RLVR_REWARD_ADDRESS, else 127.0.0.1:50051
        metric_keys: [f1]       # metrics to log; missing ones are NaN (verl needs equal keys)
        unparseable_reward: 0.0 # what an unparseable answer scores (default 0.0)
        failure_reward: null    # see below; null (default) raises

``compute_score`` is a coroutine, so verl's reward loop (``reward.num_workers`` Ray workers, each
awaiting ``asyncio.gather`` over its chunk) awaits it without a thread. It returns
``{"score", "reward_ok", "reward_status", *metric_keys}``: the same keys for every sample, as
verl stacks them across the batch. What each status becomes
(docs/integrations.md#one-rule-for-failures):

* ``ok``: the service's reward (a wrong answer scores low there);
* ``unparseable``: ``unparseable_reward`` (default 0.0, as our trainer's
  ``grpo.unparseable_reward``): the policy's own failure is a training signal;
* ``invalid_input``, ``timeout``, ``error`` (the caller's data or the service failed): verl has no
  "no verdict" (its reward is a tensor), so ``RewardNotScored`` is raised, naming the status and
  the reason, and the step fails loudly; ``failure_reward: <float>`` scores them with that value
  instead, each logged as a warning (``reward_ok`` 0 and ``reward_status`` keep them visible in
  verl's logs).

An unreachable service raises ``RewardServiceUnavailable`` after the client's retries (a training
step is never fed silent zeros). Token: env ``RLVR_REWARD_API_TOKEN`` or ``token=``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
from collections.abc import Sequence
from typing import Any

from rlvr_world.adapters.errors import RewardNotScored
from rlvr_world.rewards.types import RewardResult, Status, failed
from rlvr_world.wire.reward import AsyncRewardClient, json_default

__all__ = ["RewardNotScored", "compute_score", "verl_score"]
log = logging.getLogger(__name__)
_CLIENTS: dict[tuple[str | None, str | None, int], AsyncRewardClient] = {}


def _client(address: str | None, token: str | None) -> AsyncRewardClient:
    """One client per (address, token, event loop): grpc.aio channels belong to their loop."""
    key = (address, token, id(asyncio.get_running_loop()))
    if key not in _CLIENTS:
        _CLIENTS[key] = AsyncRewardClient(address, token=token)
    return _CLIENTS[key]


def verl_score(
    result: RewardResult, unparseable_reward: float, failure_reward: float | None, data_source: str
) -> float:
    """The ``score`` verl gets for one result (module docstring); raises ``RewardNotScored``."""
    if result.status is Status.OK:
        return result.reward
    if result.status is Status.UNPARSEABLE:
        return unparseable_reward
    if failure_reward is None:
        log.error("%s sample not scored: %s: %s", data_source, result.status.value, result.message)
        raise RewardNotScored(
            f"reward service could not score a {data_source} sample: status "
            f"{result.status.value}: {result.message or 'no message'} (set reward_kwargs."
            "failure_reward to score such samples with a fixed value instead)"
        )
    log.warning("%s sample not scored (%s: %s); failure_reward %s",
                data_source, result.status.value, result.message, failure_reward)  # fmt: skip
    return failure_reward


# verl calls it with the four sample fields, then the config's reward_kwargs as keywords.
async def compute_score(  # noqa: PLR0913 (verl's reward-function signature)
    data_source: str,
    solution_str: str,
    ground_truth: str,
    extra_info: dict[str, Any] | None = None,
    *,
    address: str | None = None,
    token: str | None = None,
    metric_keys: Sequence[str] = (),
    variant: str = "",
    reward_type: str = "",
    unparseable_reward: float = 0.0,
    failure_reward: float | None = None,
    **_: Any,
) -> dict[str, Any]:
    """Score one verl sample through the service; see the module docstring."""
    try:
        extra = json.dumps(extra_info, default=json_default) if extra_info is not None else None
    except (TypeError, ValueError) as exc:
        result = failed(Status.INVALID_INPUT, str(exc))
    else:
        row = {
            "data_source": data_source,
            "solution_str": solution_str,
            "ground_truth": ground_truth,
            "extra_info": extra,
            "variant": variant,
            "reward_type": reward_type,
        }
        result = await _client(address, token).score_verl(row)
    out: dict[str, Any] = {
        "score": verl_score(result, unparseable_reward, failure_reward, data_source),
        "reward_ok": 1.0 if result.ok else 0.0,
        "reward_status": result.status.value,
    }
    for key in metric_keys:
        out[key] = float(result.metrics.get(key, math.nan))
    return out
