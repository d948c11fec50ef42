"""The reward service's client SDK, at its public import path.

``RewardClient`` (sync) and ``AsyncRewardClient`` score over gRPC with retries and fail-over;
``verl_request`` and ``frames_request`` build requests from a verl-style row or numpy frames.
The code lives with the other service clients and the codec in ``rlvr_world.wire``
(``rlvr_world.wire.reward``); this module only names it for users::

    from rlvr_world.client import RewardClient
"""

from rlvr_world.wire.reward import (
    TOKEN_ENV,
    AsyncRewardClient,
    RetryPolicy,
    RewardClient,
    RewardServiceUnavailable,
    frames_request,
    json_default,
    split_addresses,
    to_result,
    verl_request,
)

__all__ = [
    "TOKEN_ENV",
    "AsyncRewardClient",
    "RetryPolicy",
    "RewardClient",
    "RewardServiceUnavailable",
    "frames_request",
    "json_default",
    "split_addresses",
    "to_result",
    "verl_request",
]
