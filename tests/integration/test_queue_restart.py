"""The supervised embedded Redis: killed under load, it comes back on the same address with every
acknowledged write, and the producer and consumer ride it out without an error."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from rlvr_world.queue.schema import ScoredGroup
from rlvr_world.queue.server import REDIS_URL_ENV, socket_path, start_embedded
from rlvr_world.queue.stream import Consumer, Producer, QueueMetrics, StreamNames
from tests.helpers.waiting import wait_until

pytestmark = pytest.mark.integration


def _group(gid: str) -> ScoredGroup:
    return ScoredGroup.model_validate(
        {
            "group_id": gid,
            "prompt_id": "p",
            "task": "text_game",
            "policy_version": 0,
            "prompt_token_ids": [1, 2],
            "samples": [
                {"token_ids": [3], "logprobs": [-0.5], "reward": 1.0, "status": "ok"},
                {"token_ids": [4], "logprobs": [-0.7], "reward": 0.0, "status": "ok"},
            ],
        }
    )


class _Load:
    """A producer thread pushing ``n`` groups and a consumer thread reading and acking them as
    the trainer does (reclaiming its own idle pending entries); errors are collected. The producer
    stops after a quarter until the server has been killed, so the kill always lands mid-run."""

    def __init__(self, producer: Producer, consumer: Consumer, n: int) -> None:
        self.producer, self.consumer, self.n = producer, consumer, n
        self.pushed: list[str] = []
        self.consumed: list[str] = []
        self.errors: list[BaseException] = []
        self.halfway = threading.Event()
        self.killed = threading.Event()
        self.done = threading.Event()
        self.threads = [
            threading.Thread(target=self.produce),
            threading.Thread(target=self.consume),
        ]

    def produce(self) -> None:
        try:
            for i in range(self.n):
                self.producer.push(_group(f"g{i}"))
                self.pushed.append(f"g{i}")
                if len(self.pushed) == self.n // 4:
                    self.halfway.set()
                    if not self.killed.wait(240):
                        raise AssertionError("the server was never killed")
        except BaseException as exc:  # the test fails on any
            self.errors.append(exc)
        finally:
            self.done.set()

    def consume(self) -> None:
        try:
            while not (self.done.is_set() and len(set(self.consumed)) >= len(self.pushed)):
                entries = self.consumer.read(20, block_ms=100)
                if not entries:  # a read whose answer died with the server is pending here
                    entries = self.consumer.reclaim(min_idle_ms=500)
                self.consumed.extend(e.group.group_id for e in entries)
                self.consumer.ack([e.entry_id for e in entries])
        except BaseException as exc:
            self.errors.append(exc)

    def run_killing(self, kill: Callable[[], object]) -> None:
        for t in self.threads:
            t.start()
        assert self.halfway.wait(240)
        kill()
        self.killed.set()
        for t in self.threads:
            t.join(timeout=240)
        self.done.set()
        assert not any(t.is_alive() for t in self.threads)


def test_killed_redis_restarts_on_the_same_address_and_loses_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(REDIS_URL_ENV, raising=False)
    handle = start_embedded(tmp_path / "redis")
    assert handle.embedded is not None
    url, first_pid = handle.url, handle.embedded.pid
    names = StreamNames()
    metrics = QueueMetrics(CollectorRegistry())
    load = _Load(
        Producer(handle.client, names, max_len=10_000, metrics=metrics),
        Consumer(handle.client, names, "trainer-0", metrics),
        400,
    )
    try:
        load.run_killing(handle.embedded.kill)
        assert load.errors == []
        embedded = handle.embedded
        # the producer got through, so the server is back; the watchdog records that just after
        wait_until(lambda: embedded.restarts, "the watchdog to record the restart")
        assert len(handle.embedded.restarts) == 1
        died, back = handle.embedded.restarts[0]
        assert back > died
        assert handle.url == url == f"unix://{socket_path(tmp_path / 'redis')}"
        assert handle.embedded.pid != first_pid
        assert len(load.pushed) == 400
        assert set(load.consumed) == set(load.pushed)  # at-least-once: none lost
        assert handle.client.xlen(names.stream) == 0
    finally:
        load.done.set()
        handle.close()


def test_a_long_run_directory_gets_a_short_fixed_socket(tmp_path: Path) -> None:
    deep = tmp_path / ("d" * 60) / ("e" * 60)
    sock = socket_path(deep)
    assert len(str(sock)) <= 100 and sock == socket_path(deep)
    assert socket_path(tmp_path) == tmp_path.resolve() / "redis.sock"
