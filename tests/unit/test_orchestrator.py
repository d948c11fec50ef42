"""Orchestrator pure parts: backoff, retry verdicts, ledger bookkeeping, sample conversion."""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

import pytest

from rlvr_world.apps.orchestrator.config import OrchestratorConfig
from rlvr_world.apps.orchestrator.ledger import Ledger, read_ledger, summarize
from rlvr_world.apps.orchestrator.retry import Backoff, RetriesExhausted, grpc_reason, retry_async
from rlvr_world.apps.orchestrator.worker import classify, to_sample
from rlvr_world.client import RewardServiceUnavailable
from rlvr_world.queue.stream import QueueFull
from rlvr_world.rewards.types import InvalidInput, RewardResult, Status


class _Code:
    def __init__(self, name: str) -> None:
        self.name = name


class FakeRpcError(Exception):
    """Duck-typed like ``grpc.RpcError`` (``code()`` and ``details()``)."""

    def __init__(self, code: str, details: str = "down") -> None:
        super().__init__(details)
        self._code, self._details = _Code(code), details

    def code(self) -> _Code:
        return self._code

    def details(self) -> str:
        return self._details


def test_backoff_grows_exponentially_and_caps() -> None:
    b = Backoff(attempts=5, initial_s=0.5, multiplier=2.0, max_s=3.0, jitter=0.0)
    assert [b.delay(k) for k in range(5)] == [0.5, 1.0, 2.0, 3.0, 3.0]


def test_backoff_jitter_stays_in_band() -> None:
    b = Backoff(initial_s=1.0, jitter=0.25)
    rng = random.Random(1)
    delays = [b.delay(0, rng) for _ in range(200)]
    assert all(0.75 <= d <= 1.25 for d in delays)
    assert max(delays) - min(delays) > 0.2


def test_backoff_rejects_bad_values() -> None:
    with pytest.raises(ValueError, match="attempts"):
        Backoff(attempts=0)
    with pytest.raises(ValueError, match="jitter"):
        Backoff(jitter=1.0)


def _run_retry(errors: list[Exception], attempts: int = 4) -> tuple[str, list[float], list[str]]:
    calls = iter(errors)
    slept: list[float] = []
    reasons: list[str] = []

    async def call() -> str:
        err = next(calls, None)
        if err is not None:
            raise err
        return "done"

    async def sleep(s: float) -> None:
        slept.append(s)

    result = asyncio.run(
        retry_async(
            "generate p1",
            call,
            Backoff(attempts=attempts, initial_s=0.1, jitter=0.0),
            classify,
            on_retry=lambda a, r, d: reasons.append(r),
            sleep=sleep,
        )
    )
    return result, slept, reasons


def test_retry_recovers_after_unavailable() -> None:
    result, slept, reasons = _run_retry([FakeRpcError("UNAVAILABLE"), FakeRpcError("UNAVAILABLE")])
    assert result == "done"
    assert slept == [0.1, 0.2]
    assert reasons == ["UNAVAILABLE: down", "UNAVAILABLE: down"]


def test_retry_gives_up_after_attempts_with_last_reason() -> None:
    with pytest.raises(RetriesExhausted) as info:
        _run_retry([FakeRpcError("DEADLINE_EXCEEDED", "slow")] * 3, attempts=3)
    assert info.value.attempts == 3
    assert info.value.retryable
    assert "DEADLINE_EXCEEDED: slow" in str(info.value)


def test_retry_does_not_retry_invalid_argument() -> None:
    with pytest.raises(RetriesExhausted) as info:
        _run_retry([FakeRpcError("INVALID_ARGUMENT", "prompt.text is empty")])
    assert info.value.attempts == 1
    assert not info.value.retryable
    assert "prompt.text is empty" in info.value.reason


def test_retry_propagates_unclassified_errors() -> None:
    with pytest.raises(KeyError):
        _run_retry([KeyError("bug")])


def test_classify_verdicts() -> None:
    assert classify(RewardServiceUnavailable(["a:1"], 2, None)) is not None
    assert classify(RewardServiceUnavailable(["a:1"], 2, None))[1] is True  # type: ignore[index]
    assert classify(QueueFull("full")) == ("QueueFull: full", True)
    assert classify(InvalidInput("ground_truth: bad")) == (
        "invalid input: ground_truth: bad",
        False,
    )
    assert classify(FakeRpcError("FAILED_PRECONDITION", "old weights"))[1] is True  # type: ignore[index]
    assert grpc_reason(ValueError("x")) is None


def test_ledger_summary_final_states(tmp_path: Path) -> None:
    path = tmp_path / "ledger.jsonl"
    with Ledger(path) as ledger:
        for key in ("a@0", "b@0", "c@0", "d@0"):
            ledger.write("start", key, key[0])
        ledger.write("retry", "a@0", "a", stage="score", reason="UNAVAILABLE")
        ledger.write("pushed", "a@0", "a", entry_id="1-0")
        ledger.write("pushed", "b@0", "b", entry_id="2-0")
        ledger.write("failed", "c@0", "c", reason="INVALID_ARGUMENT: empty")
    with path.open("a") as fh:
        fh.write('{"torn": ')  # a crash mid-line is ignored
    summary = summarize(read_ledger(path))
    assert sorted(summary.pushed) == ["a@0", "b@0"]
    assert summary.failed == {"c@0": "INVALID_ARGUMENT: empty"}
    assert summary.unfinished == ["d@0"]
    assert summary.retried == ["a@0"]
    assert not summary.complete


def test_to_sample_keeps_unparseable_status() -> None:
    """Never an ok zero on the wire: the trainer decides what an unparseable answer trains with."""
    bad = RewardResult(reward=0.0, status=Status.UNPARSEABLE, metrics={}, message="no json")
    kept = to_sample([5, 1], [-0.5, -0.1], bad)
    assert kept.status is Status.UNPARSEABLE and not kept.ok


def test_to_sample_keeps_errors_as_errors() -> None:
    err = RewardResult(reward=0.0, status=Status.ERROR, metrics={}, message="crash")
    sample = to_sample([3], [-1.0], err)
    assert sample.status is Status.ERROR and not sample.ok
    good = RewardResult(reward=1.0, status=Status.OK, metrics={"item_accuracy": 1.0})
    assert to_sample([3], [-1.0], good).reward == 1.0


def test_orchestrator_config_bounds() -> None:
    cfg = OrchestratorConfig(group_size=4, attempts=3, push_attempts=7)
    assert cfg.backoff("score").attempts == 3
    assert cfg.backoff("push").attempts == 7
    assert cfg.sampling(5).seed == 5
    with pytest.raises(ValueError, match="group_size"):
        OrchestratorConfig(group_size=1)
