"""Scored groups on a Redis Stream with a consumer group: bounded, at-least-once, dead-letter.

* ``Producer.push`` appends atomically only while the stream holds fewer than ``max_len``
  entries (a Lua check-and-XADD); otherwise it waits, counting the wait, and raises
  :class:`QueueFull` after ``timeout_s``. ``Producer.close`` ends every wait at once with
  :class:`ProducerClosed` (a push left running in a thread by a cancelled caller would otherwise
  wait out its timeout, and then the client's reconnect retries once the server is gone).
* ``Consumer.read`` first re-reads this consumer's own pending entries (left by a previous run
  with the same name), then new ones. ``Consumer.reclaim`` takes over entries pending longer than
  ``min_idle_ms`` on any consumer (XAUTOCLAIM), e.g. a dead one.
* ``Consumer.ack`` acknowledges *and deletes* entries, so the stream length is the number of
  entries waiting or in flight; the caller acks only after the step that used them is
  checkpointed. Duplicates are the caller's to skip by ``group_id`` (idempotency key).
* Entries that fail validation go to the dead-letter stream with the reason and are acked.
* ``count_stale`` counts entries not yet trained whose policy version is too old.
* A server that restarts keeps the stream and its group (append-only file); one that comes back
  empty (an external Redis that lost its data) makes reads answer NOGROUP, and the consumer
  creates the group again and goes on. Lost connections are retried by the client itself
  (``server.redis_client``); a read whose answer was lost with the connection leaves its entries
  pending for this consumer, and ``reclaim`` hands them over once they are idle.

Does not decide staleness of what it returns, and imports nothing from the trainer.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import redis
from prometheus_client import CollectorRegistry, Counter, Gauge
from redis.typing import EncodableT, FieldT

from rlvr_world.queue.schema import SchemaError, ScoredGroup, group_from_fields, policy_version_of

logger = logging.getLogger(__name__)

_BOUNDED_XADD = """
if redis.call('XLEN', KEYS[1]) >= tonumber(ARGV[1]) then return false end
return redis.call('XADD', KEYS[1], '*', unpack(ARGV, 2))
"""


class QueueFull(RuntimeError):
    """The stream stayed at its maximum length for the whole push timeout."""


class ProducerClosed(RuntimeError):
    """A push on a closed producer (or one waiting for room when it was closed)."""


@dataclass(frozen=True)
class StreamNames:
    """Redis keys of one queue."""

    stream: str = "rlvr:scored_groups"
    group: str = "trainer"
    dead_letter: str = "rlvr:scored_groups:dead"


class QueueMetrics:
    """Prometheus metrics of the queue, registered on the caller's (per-process) registry."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.pushed = Counter("rlvr_queue_pushed_total", "groups appended", registry=registry)
        self.push_waits = Counter(
            "rlvr_queue_push_waits_total", "pushes that waited for room", registry=registry
        )
        self.push_wait_seconds = Counter(
            "rlvr_queue_push_wait_seconds_total", "time producers waited", registry=registry
        )
        self.full_errors = Counter(
            "rlvr_queue_full_errors_total", "pushes that timed out", registry=registry
        )
        self.read = Counter("rlvr_queue_read_total", "entries delivered", registry=registry)
        self.reclaimed = Counter(
            "rlvr_queue_reclaimed_total", "entries taken over by XAUTOCLAIM", registry=registry
        )
        self.acked = Counter("rlvr_queue_acked_total", "entries acknowledged", registry=registry)
        self.dead_letter = Counter(
            "rlvr_queue_dead_letter_total",
            "entries moved to the dead-letter stream",
            ["reason"],
            registry=registry,
        )
        self.depth = Gauge("rlvr_queue_depth", "entries waiting or in flight", registry=registry)


@dataclass(frozen=True)
class Entry:
    """A decoded, valid stream entry."""

    entry_id: str
    group: ScoredGroup


def _decode_id(raw: Any) -> str:
    return raw.decode() if isinstance(raw, bytes) else str(raw)


class Producer:
    """Appends scored groups to a bounded stream."""

    def __init__(
        self, client: redis.Redis, names: StreamNames, max_len: int, metrics: QueueMetrics
    ) -> None:
        if max_len < 1:
            raise ValueError(f"max_len must be >= 1, got {max_len}")
        self._client, self._names, self._max_len, self._m = client, names, max_len, metrics
        self._script = client.register_script(_BOUNDED_XADD)
        self._closed = threading.Event()

    def close(self) -> None:
        """Refuse further pushes and end the waits of running ones (``ProducerClosed``); from
        any thread. Appended entries stay in the stream."""
        self._closed.set()

    @property
    def max_len(self) -> int:
        """The stream's length bound."""
        return self._max_len

    @max_len.setter
    def max_len(self, value: int) -> None:
        """Change the bound (from any thread); waiting pushes use it at their next attempt."""
        if value < 1:
            raise ValueError(f"max_len must be >= 1, got {value}")
        self._max_len = value

    def push_fields(self, fields: Mapping[str, str], timeout_s: float = 30.0) -> str:
        """Append raw fields (used for ``ScoredGroup.to_fields``); wait while the stream is full."""
        args: list[str] = [str(self._max_len)]
        for key, value in fields.items():
            args += [key, value]
        start = time.monotonic()
        waited = False
        while True:
            if self._closed.is_set():
                raise ProducerClosed(f"producer of stream {self._names.stream!r} is closed")
            args[0] = str(self._max_len)
            entry_id = self._script(keys=[self._names.stream], args=args)
            if entry_id is not None:
                break
            if not waited:
                waited = True
                self._m.push_waits.inc()
            if time.monotonic() - start >= timeout_s:
                self._m.full_errors.inc()
                raise QueueFull(
                    f"stream {self._names.stream!r} stayed at max_len={self._max_len} for "
                    f"{timeout_s:.1f}s: the trainer is not keeping up or not running"
                )
            time.sleep(0.02)
        if waited:
            self._m.push_wait_seconds.inc(time.monotonic() - start)
        self._m.pushed.inc()
        return _decode_id(entry_id)

    def push(self, group: ScoredGroup, timeout_s: float = 30.0) -> str:
        """Append one scored group; returns its stream entry id."""
        return self.push_fields(group.to_fields(), timeout_s=timeout_s)


class Consumer:
    """Reads scored groups as one named consumer of the stream's consumer group."""

    def __init__(
        self, client: redis.Redis, names: StreamNames, consumer: str, metrics: QueueMetrics
    ) -> None:
        self._client, self._names, self.name, self._m = client, names, consumer, metrics
        self._pending_cursor: str | None = "0"  # own pending history, read once after start
        ensure_group(client, names)

    def _route(self, raw: Sequence[Any]) -> list[Entry]:
        out: list[Entry] = []
        for raw_id, fields in raw:
            entry_id = _decode_id(raw_id)
            if fields is None:  # deleted while pending
                self.ack([entry_id])
                continue
            try:
                out.append(Entry(entry_id, group_from_fields(fields)))
            except SchemaError as exc:
                self.dead_letter(entry_id, fields, exc.reason)
        self._m.read.inc(len(raw))
        return out

    def read(self, n: int, block_ms: int = 1000) -> list[Entry]:
        """Up to n valid entries: own pending ones first (after a restart), then new ones."""
        try:
            return self._read(n, block_ms)
        except redis.ResponseError as exc:
            if "NOGROUP" not in str(exc):
                raise
            logger.warning("consumer group %s is gone (%s); creating it again", self._names, exc)
            ensure_group(self._client, self._names)
            return self._read(n, block_ms)

    def _read(self, n: int, block_ms: int) -> list[Entry]:
        if self._pending_cursor is not None:
            resp: Any = self._client.xreadgroup(
                self._names.group, self.name, {self._names.stream: self._pending_cursor}, count=n
            )
            raw = resp[0][1] if resp else []
            if raw:
                self._pending_cursor = _decode_id(raw[-1][0])
                return self._route(raw)
            self._pending_cursor = None
        resp = self._client.xreadgroup(
            self._names.group, self.name, {self._names.stream: ">"}, count=n, block=block_ms
        )
        return self._route(resp[0][1]) if resp else []

    def reclaim(self, min_idle_ms: int, count: int = 100) -> list[Entry]:
        """Take over entries pending for longer than ``min_idle_ms`` (XAUTOCLAIM)."""
        resp: Any = self._client.xautoclaim(
            self._names.stream, self._names.group, self.name, min_idle_ms, "0-0", count=count
        )
        raw = resp[1]
        if raw:
            self._m.reclaimed.inc(len(raw))
            logger.info("reclaimed %d pending entries into consumer %s", len(raw), self.name)
        return self._route(raw)

    def ack(self, entry_ids: Sequence[str]) -> None:
        """Acknowledge and delete entries (idempotent)."""
        if not entry_ids:
            return
        pipe = self._client.pipeline()
        pipe.xack(self._names.stream, self._names.group, *entry_ids)
        pipe.xdel(self._names.stream, *entry_ids)
        acked, _ = pipe.execute()
        self._m.acked.inc(int(acked))

    def dead_letter(self, entry_id: str, fields: Mapping[Any, Any], reason: str) -> None:
        """Move an entry to the dead-letter stream with its reason, then ack it here."""
        copy: dict[FieldT, EncodableT] = {_decode_id(k): v for k, v in fields.items()}
        copy.update({"dead_reason": reason, "dead_entry_id": entry_id, "dead_at": str(time.time())})
        self._client.xadd(self._names.dead_letter, copy)
        self._m.dead_letter.labels(reason=reason.split(":", maxsplit=1)[0][:40]).inc()
        logger.warning("entry %s moved to %s: %s", entry_id, self._names.dead_letter, reason)
        self.ack([entry_id])

    def depth(self) -> int:
        """Entries waiting or in flight (acked entries are deleted)."""
        depth = int(self._client.xlen(self._names.stream))
        self._m.depth.set(depth)
        return depth


def ensure_group(client: redis.Redis, names: StreamNames) -> None:
    """Create the consumer group (and the stream) if missing."""
    try:
        client.xgroup_create(names.stream, names.group, id="0", mkstream=True)
    except redis.ResponseError as exc:
        if "BUSYGROUP" not in str(exc):
            raise


def count_stale(
    client: redis.Redis, names: StreamNames, current_version: int, max_staleness: int
) -> int:
    """Entries still in the stream (waiting or pending) whose policy version is too old.

    An entry is stale when ``current_version - policy_version > max_staleness``.
    """
    stale = 0
    last = "-"
    while True:
        batch: Any = client.xrange(names.stream, min=last, max="+", count=500)
        if last != "-":
            batch = batch[1:]
        if not batch:
            return stale
        for raw_id, fields in batch:
            version = policy_version_of(fields)
            if version is not None and current_version - version > max_staleness:
                stale += 1
            last = _decode_id(raw_id)
