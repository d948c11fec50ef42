"""Result type shared by every scorer.

Producer: the scorers in ``rlvr_world.rewards``. Consumers: the dispatcher, the CLI, the reward
service (mapped onto ``rlvr_world.v1.ScoreResponse``) and the trainer's queue entries.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any


class Status(StrEnum):
    """Outcome of scoring one prediction (same names as ``RewardStatus`` in common.proto)."""

    OK = "ok"
    UNPARSEABLE = "unparseable"
    INVALID_INPUT = "invalid_input"
    TIMEOUT = "timeout"
    ERROR = "error"


@dataclass(frozen=True)
class RewardResult:
    """The scalar reward, how it was obtained, and named metrics.

    ``reward`` is always finite. For ``paper`` variants a failed parse keeps the reference's reward
    (0.0) but the status says why, so a failure is never an ``ok`` zero.
    """

    reward: float
    status: Status
    metrics: Mapping[str, float] = field(default_factory=dict)
    message: str = ""
    #: Video scored with a patch grid: the reward of each (frame, row, column) cell, C order;
    #: empty otherwise (``rlvr_world.rewards.video.patch_rewards``).
    patch_rewards: tuple[float, ...] = ()

    def __post_init__(self) -> None:
        if not math.isfinite(self.reward):
            raise ValueError(f"reward must be finite, got {self.reward!r}")
        object.__setattr__(self, "patch_rewards", tuple(float(r) for r in self.patch_rewards))
        if not all(math.isfinite(r) for r in self.patch_rewards):
            raise ValueError("patch_rewards must be finite")

    @property
    def ok(self) -> bool:
        """Whether the prediction was scored (status ``ok``)."""
        return self.status is Status.OK

    def to_dict(self) -> dict[str, Any]:
        """The JSON form: reward, status, metrics, and the message and patch rewards when set."""
        out: dict[str, Any] = {
            "reward": self.reward,
            "status": self.status.value,
            "metrics": dict(self.metrics),
        }
        if self.message:
            out["message"] = self.message
        if self.patch_rewards:
            out["patch_rewards"] = list(self.patch_rewards)
        return out


def failed(status: Status, message: str, reward: float = 0.0) -> RewardResult:
    """A result for a prediction that could not be scored."""
    return RewardResult(reward=reward, status=status, metrics={}, message=message)


class InvalidInput(ValueError):
    """Raised by scorers for a malformed *reference* or options (not a bad prediction)."""
