"""Follow the trainer's published weights in Redis and reload the engine when the version moves.

The trainer SETs the weights message (``rlvr_world.queue.weights``: ``{"version", "path",
"time"}``) under the weights key and PUBLISHes it on the weights channel. The watcher reads
the key at start, then waits for messages on the channel and re-reads the key every ``poll_s``
(a message missed while disconnected is caught by the next read). It reloads when the published
version differs from the last one it loaded and from the one served. A failed load is logged, the
previous weights stay in service, and the same version is tried again after a pause (1 s, doubling
to 30 s) or as soon as a newer one is published: the trainer may publish nothing more until the
rollout serves this version (its staleness gate waits for groups sampled from it), so a load that
failed once for a passing reason (Redis or the network away for a moment) must not stall the
run. Redis being down
is logged and retried with backoff; it never stops the server. The password of a TCP URL comes from
``$RLVR_REDIS_PASSWORD`` (``rlvr_world.queue.server.redis_credentials``); a wrong one is logged
as a refusal each time it is retried.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from rlvr_world.queue.server import redis_credentials
from rlvr_world.queue.weights import WeightsMessage, parse_weights

log = logging.getLogger(__name__)
#: Pause before loading a version again after a failed load, doubling up to the maximum.
RETRY_BASE_S = 1.0
RETRY_MAX_S = 30.0


class PublishedUnknown(Exception):
    """The key holding the trainer's latest version could not be read (Redis down)."""


class WeightsWatcher:
    """An asyncio task that calls ``load(version, path)`` for each new published version, again
    after a pause while it fails (module docstring)."""

    def __init__(
        self,
        *,
        url: str,
        key: str,
        channel: str,
        poll_s: float,
        served: Callable[[], int],
        load: Callable[[int, str], Awaitable[bool]] | None = None,
    ) -> None:
        """``load(version, path)`` (settable after construction, before ``start``) loads one
        published version and says whether it did; ``served()`` is the version in service."""
        self.url, self.key, self.channel, self.poll_s = url, key, channel, poll_s
        self.load = load
        self._served = served
        self._handled: int | None = None
        #: after a failed load of ``_handled``: its attempts so far and when to try again
        self._attempts = 0
        self._retry_at = float("inf")
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Start following the weights in a task of the running event loop."""
        self._task = asyncio.get_running_loop().create_task(self._run(), name="weights-watcher")

    async def stop(self) -> None:
        """Cancel the following task and wait until it has ended."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    async def published_version(self) -> int:
        """The version under the key now (-1 when nothing is published yet);
        ``PublishedUnknown`` when Redis cannot be read."""
        client = aioredis.from_url(self.url, **redis_credentials(self.url))
        try:
            pub = parse_weights(await client.get(self.key))
        except (RedisError, OSError) as exc:
            raise PublishedUnknown(f"redis: {type(exc).__name__}") from None
        finally:
            await client.aclose()
        return -1 if pub is None else pub.version

    async def _consider(self, pub: WeightsMessage | None) -> None:
        if pub is None:
            return
        if pub.version == self._handled and time.monotonic() < self._retry_at:
            return
        if pub.version != self._handled:
            self._handled, self._attempts = pub.version, 0
        self._retry_at = float("inf")
        if pub.version <= self._served():
            return
        if self._attempts == 0:
            log.info("trainer published weights version %d at %s", pub.version, pub.path)
        if self.load is None or await self.load(pub.version, pub.path):
            return
        self._attempts += 1
        pause = min(RETRY_BASE_S * 2 ** (self._attempts - 1), RETRY_MAX_S)
        self._retry_at = time.monotonic() + pause
        log.warning(
            "weights version %d not loaded (attempt %d); trying again in %.0f s",
            pub.version,
            self._attempts,
            pause,
        )

    async def _run(self) -> None:
        backoff = 0.5
        while True:
            try:
                await self._follow()
            except (RedisError, OSError) as exc:
                log.warning(
                    "weights watcher: redis at %s failed (%s: %s); retrying",
                    self.url,
                    type(exc).__name__,
                    exc,
                )
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 30.0)

    async def _follow(self) -> None:
        client = aioredis.from_url(self.url, **redis_credentials(self.url))
        pubsub = client.pubsub()
        try:
            await pubsub.subscribe(self.channel)
            await self._consider(parse_weights(await client.get(self.key)))
            log.info("following weights on %s (key %s)", self.channel, self.key)
            while True:
                msg = await pubsub.get_message(ignore_subscribe_messages=True, timeout=self.poll_s)
                if msg is not None:
                    await self._consider(parse_weights(msg["data"]))
                else:
                    await self._consider(parse_weights(await client.get(self.key)))
        finally:
            await pubsub.aclose()  # type: ignore[no-untyped-call]  # redis: unannotated
            await client.aclose()
