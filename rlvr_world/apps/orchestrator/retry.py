"""Retries with exponential backoff for calls to services that may be down or restarting.

``Backoff`` (``rlvr_world.backoff``, re-exported here) is the wait between tries: ``initial_s *
multiplier**k`` capped at ``max_s`` with +-``jitter``. ``retry_async`` runs a coroutine factory
until it succeeds, the error is not retryable (``classify`` returns None), or ``attempts`` are used
up; it raises ``RetriesExhausted`` naming the last reason. ``grpc_reason`` classifies gRPC errors:
``UNAVAILABLE``, ``DEADLINE_EXCEEDED`` and ``CANCELLED`` (a service down, restarting, draining or
overloaded) and ``FAILED_PRECONDITION`` (the rollout's weights are older than the staleness bound
allows: wait for the reload) are retried; everything else (``INVALID_ARGUMENT``, ``INTERNAL``, ...)
is not, so a bad prompt fails fast with its reason.
No grpc import here: errors are duck-typed on ``code()``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import TypeVar

from rlvr_world.backoff import Backoff

# Backoff is the core's (the reward client's policy too), re-exported for the orchestrator
__all__ = ["RETRYABLE_CODES", "Backoff", "RetriesExhausted", "grpc_reason", "retry_async"]

logger = logging.getLogger(__name__)

T = TypeVar("T")

#: gRPC status names that mean "try again later".
RETRYABLE_CODES = frozenset(
    {"UNAVAILABLE", "DEADLINE_EXCEEDED", "CANCELLED", "FAILED_PRECONDITION"}
)


class RetriesExhausted(RuntimeError):
    """Every attempt failed (or one failed with an error that is not retried)."""

    def __init__(self, what: str, attempts: int, reason: str, retryable: bool) -> None:
        kind = "retryable" if retryable else "not retryable"
        super().__init__(f"{what}: failed after {attempts} attempt(s) ({kind}): {reason}")
        self.what, self.attempts, self.reason, self.retryable = what, attempts, reason, retryable


def grpc_reason(exc: BaseException) -> tuple[str, bool] | None:
    """``(reason, retryable)`` for a gRPC error (anything with ``code()``), else None."""
    code = getattr(exc, "code", None)
    if not callable(code):
        return None
    try:
        name = str(code().name)
    except AttributeError:
        return None
    details = getattr(exc, "details", None)
    detail = str(details()) if callable(details) else str(exc)
    return f"{name}: {detail}", name in RETRYABLE_CODES


Classify = Callable[[BaseException], tuple[str, bool] | None]
OnRetry = Callable[[int, str, float], None]


async def retry_async(
    what: str,
    call: Callable[[], Awaitable[T]],
    backoff: Backoff,
    classify: Classify,
    *,
    on_retry: OnRetry | None = None,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
) -> T:
    """Run ``call()`` until it succeeds; see the module docstring.

    ``classify(exc)`` returns ``(reason, retryable)`` for errors this policy handles; errors it
    returns None for propagate unchanged. ``on_retry(attempt, reason, delay)`` is called before
    each wait (metrics, ledger)."""
    for attempt in range(backoff.attempts):
        try:
            return await call()
        except Exception as exc:  # classified below; unknown errors re-raised
            verdict = classify(exc)
            if verdict is None:
                raise
            reason, retryable = verdict
            if not retryable:
                raise RetriesExhausted(what, attempt + 1, reason, retryable=False) from exc
            if attempt + 1 == backoff.attempts:
                raise RetriesExhausted(what, attempt + 1, reason, retryable=True) from exc
            delay = backoff.delay(attempt)
            logger.warning("%s failed (%s); retry %d in %.2fs", what, reason, attempt + 1, delay)
            if on_retry is not None:
                on_retry(attempt, reason, delay)
            await sleep(delay)
    raise AssertionError("unreachable: the loop returns or raises")
