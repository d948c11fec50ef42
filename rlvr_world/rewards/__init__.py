"""Pure reward scorers: text game (JSON state diff), web (accessibility-tree diff F1), video frames.

No I/O, no grpc/fastapi/redis imports. ``rlvr_world.rewards.dispatch`` routes verl-style requests to
the right scorer through an explicit table.
"""

from rlvr_world.rewards.types import InvalidInput, RewardResult, Status

__all__ = ["InvalidInput", "RewardResult", "Status"]
