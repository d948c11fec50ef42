"""The reward client retries a call the server CANCELLED (a worker draining on SIGTERM does that to
calls still in flight) and gives up after its attempts with ``RewardServiceUnavailable``.

A real gRPC server on loopback whose ``Score`` aborts with CANCELLED a set number of times, then
answers; sync and asyncio clients.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from concurrent import futures

import grpc
import pytest

from rlvr_world.client import (
    AsyncRewardClient,
    RetryPolicy,
    RewardClient,
    RewardServiceUnavailable,
    verl_request,
)
from rlvr_world.rewards.types import Status
from rlvr_world.v1 import common_pb2, reward_pb2, reward_pb2_grpc

pytestmark = pytest.mark.integration

FAST = RetryPolicy(attempts=3, initial_s=0.01, max_s=0.02)
ROW = {"data_source": "web_agent", "solution_str": "New items:\nNone", "ground_truth": "x"}


class CancelsFirst(reward_pb2_grpc.RewardServiceServicer):
    """``Score`` answers CANCELLED for the first ``cancels`` calls, then reward 1.0."""

    def __init__(self, cancels: int) -> None:
        self.cancels = cancels
        self.calls = 0
        self._lock = threading.Lock()

    def Score(  # noqa: N802 (gRPC method name)
        self, request: reward_pb2.ScoreRequest, context: grpc.ServicerContext
    ) -> reward_pb2.ScoreResponse:
        with self._lock:
            self.calls += 1
            cancel = self.calls <= self.cancels
        if cancel:
            context.abort(grpc.StatusCode.CANCELLED, "draining")
        return reward_pb2.ScoreResponse(reward=1.0, status=common_pb2.REWARD_STATUS_OK)


@pytest.fixture
def serve() -> Iterator[tuple[CancelsFirst, str]]:
    servicer = CancelsFirst(cancels=0)
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    reward_pb2_grpc.add_RewardServiceServicer_to_server(servicer, server)  # type: ignore[no-untyped-call]
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield servicer, f"127.0.0.1:{port}"
    finally:
        server.stop(0).wait()


def test_sync_client_retries_a_cancelled_call(serve: tuple[CancelsFirst, str]) -> None:
    servicer, address = serve
    servicer.cancels = 2
    with RewardClient(address, retry=FAST) as client:
        result = client.score(verl_request(ROW))
    assert (result.status, result.reward, servicer.calls) == (Status.OK, 1.0, 3)


def test_async_client_retries_a_cancelled_call(serve: tuple[CancelsFirst, str]) -> None:
    servicer, address = serve
    servicer.cancels = 1

    async def score() -> float:
        async with AsyncRewardClient(address, retry=FAST) as client:
            return (await client.score(verl_request(ROW))).reward

    assert asyncio.run(score()) == 1.0
    assert servicer.calls == 2


def test_cancelled_on_every_attempt_is_unavailable_naming_the_code(
    serve: tuple[CancelsFirst, str],
) -> None:
    servicer, address = serve
    servicer.cancels = 10
    with (
        RewardClient(address, retry=FAST) as client,
        pytest.raises(RewardServiceUnavailable) as err,
    ):
        client.score(verl_request(ROW))
    assert servicer.calls == FAST.attempts
    assert "CANCELLED: draining" in str(err.value)
