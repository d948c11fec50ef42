"""verl reward function that scores through the reward service (one line of verl config).

    custom_reward_function:
      path: /path/to/site-packages/rlvr_world/adapters/verl.py   # or python -c 'import ...; print'
      name: compute_score
      reward_kwargs:            # all optional
        address: reward:50051   # default: env RLVR_REWARD_ADDRESS, else 127.0.0.1:50051
        metric_keys: [f1]       # metrics to log; missing ones are NaN (verl needs equal keys)

``compute_score`` is a coroutine, so verl's reward loop awaits it without a thread. It returns
``{"score", "reward_ok", "reward_status", *metric_keys}``: the same keys for every sample, as
verl stacks them across the batch. A sample that could not be scored keeps the core's reward
(``reward_ok`` 0, ``reward_status`` says why); an unreachable service raises
``RewardServiceUnavailable`` (a training step is never fed silent zeros). Token: env
``RLVR_REWARD_API_TOKEN`` or ``token=``.
"""

from __future__ import annotations

import asyncio
import json
import math
from collections.abc import Sequence
from typing import Any

from rlvr_world.client import AsyncRewardClient, json_default

_CLIENTS: dict[tuple[str | None, str | None, int], AsyncRewardClient] = {}


def _client(address: str | None, token: str | None) -> AsyncRewardClient:
    """One client per (address, token, event loop): grpc.aio channels belong to their loop."""
    key = (address, token, id(asyncio.get_running_loop()))
    if key not in _CLIENTS:
        _CLIENTS[key] = AsyncRewardClient(address, token=token)
    return _CLIENTS[key]


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
    **_: Any,
) -> dict[str, Any]:
    """Score one verl sample through the service; see the module docstring."""
    row = {
        "data_source": data_source,
        "solution_str": solution_str,
        "ground_truth": ground_truth,
        "extra_info": json.dumps(extra_info, default=json_default)
        if extra_info is not None
        else None,
        "variant": variant,
        "reward_type": reward_type,
    }
    result = await _client(address, token).score_verl(row)
    out: dict[str, Any] = {
        "score": result.reward,
        "reward_ok": 1.0 if result.ok else 0.0,
        "reward_status": result.status.value,
    }
    for key in metric_keys:
        out[key] = float(result.metrics.get(key, math.nan))
    return out
