"""Exponential backoff with jitter: the wait between the tries of a call that may succeed later.

``Backoff.delay(k)`` is ``initial_s * multiplier**k`` capped at ``max_s``, times a factor drawn
uniformly from ``[1 - jitter, 1 + jitter]``; ``attempts`` counts the first try. One policy for
every caller: the orchestrator's retries (``rlvr_world.apps.orchestrator.retry``, these defaults)
and the reward client's (``rlvr_world.wire.reward.RetryPolicy``, tighter defaults). What it does
not do: run the loop (each caller sleeps its own way: ``time.sleep``, ``asyncio.sleep``) or decide
which errors are worth another try.
"""

from __future__ import annotations

import random
from dataclasses import dataclass


@dataclass(frozen=True)
class Backoff:
    """Exponential backoff with jitter; ``attempts`` counts the first try."""

    attempts: int = 8
    initial_s: float = 0.2
    multiplier: float = 2.0
    max_s: float = 5.0
    jitter: float = 0.25

    def __post_init__(self) -> None:
        if self.attempts < 1:
            raise ValueError(f"attempts must be >= 1, got {self.attempts}")
        if self.initial_s < 0 or self.max_s < 0 or self.multiplier < 1:
            raise ValueError("initial_s and max_s must be >= 0 and multiplier >= 1")
        if not 0 <= self.jitter < 1:
            raise ValueError(f"jitter must be in [0, 1), got {self.jitter}")

    def delay(self, attempt: int, rng: random.Random | None = None) -> float:
        """Seconds to wait after failed try number ``attempt`` (0-based)."""
        base = min(self.max_s, self.initial_s * self.multiplier**attempt)
        spread = (rng or random).uniform(-self.jitter, self.jitter)
        return base * (1.0 + spread)
