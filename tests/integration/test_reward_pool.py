"""The reward service's scoring pool (``services.reward.pool``) with real spawned processes."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from rlvr_world.rewards.types import Status
from rlvr_world.v1 import common_pb2
from services.reward.convert import text_job
from services.reward.engine import RewardEngine
from services.reward.metrics import RewardMetrics
from services.reward.pool import ProcessDied, ScoringPool
from services.reward.settings import RewardSettings
from tests.helpers.pool_work import failing_init, square_or_die

pytestmark = pytest.mark.integration


def test_chunks_come_back_in_their_futures_across_processes() -> None:
    async def run() -> tuple[list[list[int]], int]:
        busy_seen: list[int] = []
        pool = ScoringPool(2, square_or_die, on_change=lambda busy, _: busy_seen.append(busy))
        await pool.start()
        try:
            futures = [pool.submit([i, i + 1, i + 2]) for i in range(0, 60, 3)]
            results = await asyncio.gather(*futures)
            assert pool.outstanding == 0
            return results, max(busy_seen)
        finally:
            pool.close()

    results, max_busy = asyncio.run(run())
    assert [x for chunk in results for x in chunk] == [i * i for i in range(60)]
    assert max_busy == 2  # both processes held work at once


def test_dead_process_fails_only_its_chunks_and_is_replaced() -> None:
    async def run() -> None:
        pool = ScoringPool(1, square_or_die)
        await pool.start()
        try:
            first_pid = pool._procs[0].proc.pid
            doomed = pool.submit([2, -3])  # the process exits with code 3 on the second row
            with pytest.raises(ProcessDied, match="exit code 3"):
                await asyncio.wait_for(doomed, 240)
            later = await asyncio.wait_for(pool.submit([4]), 240)  # waits for the replacement
            assert later == [16]
            assert pool._procs[0].proc.pid != first_pid
        finally:
            pool.close()

    asyncio.run(run())


def test_cancelled_chunk_in_the_backlog_is_never_sent() -> None:
    async def run() -> None:
        pool = ScoringPool(1, square_or_die)
        await pool.start()
        try:
            # two chunks of 8 rows (0.2 s each) fill the process: it holds no more than that
            slow = [pool.submit([25_000] * 8) for _ in range(2)]
            queued = pool.submit([-5])  # would kill the process if it ever ran
            assert not queued.done()
            queued.cancel()
            assert await asyncio.gather(*slow) == [[25_000**2] * 8] * 2
            assert await pool.submit([3]) == [9]
            assert pool._procs[0].proc.exitcode is None  # the same process, never killed
        finally:
            pool.close()

    asyncio.run(run())


def test_close_from_another_thread_stops_every_process() -> None:
    async def run() -> list[int | None]:
        pool = ScoringPool(2, square_or_die)
        await pool.start()
        assert await pool.submit([1, 2]) == [1, 4]
        procs = [w.proc for w in pool._procs]
        closer = threading.Thread(target=pool.close)
        closer.start()
        while closer.is_alive():
            await asyncio.sleep(0.01)  # the loop keeps running while close() waits on it
        with pytest.raises(RuntimeError, match="not running"):
            pool.submit([1])
        return [p.exitcode for p in procs]

    assert asyncio.run(run()) == [0, 0]


def test_engine_metrics_settle_and_a_killed_process_is_replaced() -> None:
    settings = RewardSettings(grpc_port=0, http_port=0, workers=2, deadline_s=240)
    metrics = RewardMetrics()
    diff = "New items:\n[214] link 'View order'\n\nDeleted items:\n[88] button 'Place Order'"
    job = text_job("web_agent", diff, diff, None, "", "")

    async def run() -> None:
        engine = RewardEngine(settings, metrics)
        await engine.start()
        try:
            assert engine._pool is not None
            victim = engine._pool._procs[0].proc
            victim.kill()
            victim.join(60)
            deadline = time.monotonic() + 240
            while victim in [w.proc for w in engine._pool._procs]:
                assert time.monotonic() < deadline, "dead process not replaced"
                await asyncio.sleep(0.05)
            results = await engine.score([job] * 40, timeout_s=240)
            assert {r.status for r in results} == {Status.OK}
            assert metrics.pool_queued._value.get() == 0
            assert metrics.pool_utilisation._value.get() == 0
        finally:
            engine.close()

    asyncio.run(run())


def test_start_fails_when_a_process_cannot_start() -> None:
    async def run() -> None:
        pool = ScoringPool(2, square_or_die, init=failing_init)
        with pytest.raises(RuntimeError, match=r"exit code 7.*while starting"):
            await asyncio.wait_for(pool.start(), 240)
        assert all(not w.proc.is_alive() for w in pool._procs)

    asyncio.run(run())


def test_wire_batch_answers_error_for_a_dead_process_and_the_next_call_is_scored() -> None:
    """``ScoreBatch``'s wire-bytes path: the chunks a killed process held come back ``error`` with
    their request ids, in order; the rest are scored by the replacement process."""
    from rlvr_world.client import verl_request
    from rlvr_world.v1 import reward_pb2
    from services.reward.rawbatch import split_requests

    diff = "New items:\n[214] link 'View order'\n\nDeleted items:\n[88] button 'Place Order'"
    row = {"data_source": "web_agent", "solution_str": diff, "ground_truth": diff}
    data = reward_pb2.ScoreBatchRequest(
        requests=[verl_request(row, f"r{i}") for i in range(256)]
    ).SerializeToString()
    settings = RewardSettings(grpc_port=0, http_port=0, workers=1, deadline_s=240)

    async def run() -> None:
        engine = RewardEngine(settings, RewardMetrics())
        await engine.start()
        try:
            assert engine._pool is not None
            victim = engine._pool._procs[0].proc
            call = asyncio.create_task(engine.score_raw(data, split_requests(data), 240))
            await asyncio.sleep(0)  # the call has written its first chunks to the process
            victim.kill()
            outcome = await call
            assert outcome.rejected is None
            out = reward_pb2.ScoreBatchResponse.FromString(outcome.reply).responses
            assert [r.request_id for r in out] == [f"r{i}" for i in range(256)]
            died = [r for r in out if r.status == common_pb2.REWARD_STATUS_ERROR]
            assert died, "the killed process's chunks should be answered error"
            assert all("scoring process died" in r.message for r in died)
            assert sum(outcome.counts.values()) == 256
            again = await engine.score_raw(data, split_requests(data), 240)
            statuses = {
                r.status for r in reward_pb2.ScoreBatchResponse.FromString(again.reply).responses
            }
            assert statuses == {common_pb2.REWARD_STATUS_OK}
        finally:
            engine.close()

    asyncio.run(run())


def test_wire_batch_scores_video_in_the_service_process_and_late_video_too() -> None:
    """Video requests of a ``ScoreBatch`` never travel to the pool (their task is peeked); one
    whose task is written after other fields (still valid protobuf) is handed back by the pool
    and scored all the same, in its place."""
    import numpy as np

    from rlvr_world.client import frames_request, verl_request
    from rlvr_world.v1 import reward_pb2
    from services.reward.rawbatch import ENTRY_TAG, encode_varint, split_requests

    rng = np.random.default_rng(0)
    pred, target = (rng.integers(0, 256, (1, 8, 8, 3), dtype=np.uint8) for _ in range(2))
    video = [
        frames_request(pred, target, weights={"l1": 1.0}, request_id=f"v{i}") for i in range(3)
    ]
    expected_l1 = float(np.abs(pred / 255.0 - target / 255.0).mean())
    diff = "New items:\n[214] link 'View order'"
    web = verl_request(
        {"data_source": "web_agent", "solution_str": diff, "ground_truth": diff}, "w"
    )
    settings = RewardSettings(grpc_port=0, http_port=0, workers=1, deadline_s=240)

    def reordered(req: reward_pb2.ScoreRequest) -> bytes:
        """``req`` with its task field moved to the end (any field order is valid protobuf)."""
        task = req.task
        body = reward_pb2.ScoreRequest(**{**{f.name: v for f, v in req.ListFields()}, "task": 0})
        raw = body.SerializeToString() + bytes([2 << 3, task])
        return bytes([ENTRY_TAG]) + encode_varint(len(raw)) + raw

    async def run() -> None:
        engine = RewardEngine(settings, RewardMetrics())
        await engine.start()
        try:
            assert engine._pool is not None
            data = reward_pb2.ScoreBatchRequest(requests=video).SerializeToString()
            sent = engine._pool._next_id
            outcome = await engine.score_raw(data, split_requests(data), 240)
            assert engine._pool._next_id == sent  # no chunk went to the pool
            out = reward_pb2.ScoreBatchResponse.FromString(outcome.reply).responses
            assert [r.request_id for r in out] == ["v0", "v1", "v2"]
            assert all(r.metrics["l1"] == pytest.approx(expected_l1) for r in out)

            data = (
                reward_pb2.ScoreBatchRequest(requests=[web]).SerializeToString()
                + reordered(video[0])
                + reward_pb2.ScoreBatchRequest(requests=[video[1], web]).SerializeToString()
            )
            outcome = await engine.score_raw(data, split_requests(data), 240)
            assert outcome.rejected is None
            out = reward_pb2.ScoreBatchResponse.FromString(outcome.reply).responses
            assert [r.request_id for r in out] == ["w", "v0", "v1", "w"]
            assert {r.status for r in out} == {common_pb2.REWARD_STATUS_OK}
            assert out[1].metrics["l1"] == pytest.approx(expected_l1)
            assert outcome.counts == {("video", "ok"): 2, ("web", "ok"): 2}
        finally:
            engine.close()

    asyncio.run(run())
