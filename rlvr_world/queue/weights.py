"""The weights message: how the trainer tells everyone which policy version to serve.

Producer: the trainer (``trainer.loop``), after each checkpoint. Consumers: the rollout service's
watcher (reloads), the orchestrator's staleness gate and the toy producer (read the version).
The trainer SETs the message under ``WEIGHTS_KEY`` (so a late reader finds the latest) and
PUBLISHes the same JSON on ``WEIGHTS_CHANNEL`` (so a subscriber hears it at once):
``{"version": int >= 0, "path": str, "time": float}``, ``path`` the checkpoint folder. Both names
are settings of the trainer (``queue.weights_key`` / ``weights_channel``) and the rollout service
(``--weights-key`` / ``--weights-channel``), whose defaults are these. Bump nothing when adding a
field: readers ignore fields they do not know.

``parse_weights`` never raises: a message that is not one is logged and read as None (a stray
PUBLISH on the channel must not stop a watcher).
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field, ValidationError

if TYPE_CHECKING:
    import redis

logger = logging.getLogger(__name__)

#: Redis key holding the latest message.
WEIGHTS_KEY = "rlvr:weights:latest"
#: Redis channel each message is published on.
WEIGHTS_CHANNEL = "rlvr:weights"
#: A weights message is a short JSON object; anything longer is not one.
MAX_MESSAGE_BYTES = 64 * 1024


class WeightsMessage(BaseModel):
    """One published policy version and where its weights are."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    version: int = Field(ge=0, description="policy version (the trainer's optimizer step)")
    path: str = Field(min_length=1, description="the checkpoint folder")
    time: float = Field(default=0.0, description="when it was published (unix seconds)")


def parse_weights(raw: bytes | str | None) -> WeightsMessage | None:
    """The message in ``raw``, or None when there is none or it is not one (logged)."""
    if raw is None:
        return None
    if len(raw) > MAX_MESSAGE_BYTES:
        logger.warning(
            "ignoring a weights message of %d bytes (over %d)", len(raw), MAX_MESSAGE_BYTES
        )
        return None
    try:
        return WeightsMessage.model_validate_json(raw)
    except ValidationError as exc:
        reason = exc.errors()[0].get("msg", "invalid") if exc.errors() else "invalid"
        logger.warning("ignoring malformed weights message %r: %s", raw[:200], reason)
        return None


def publish_weights(
    client: redis.Redis,
    version: int,
    path: Path,
    *,
    key: str = WEIGHTS_KEY,
    channel: str = WEIGHTS_CHANNEL,
) -> WeightsMessage:
    """SET the message for ``version`` at ``path`` under ``key`` and PUBLISH it on ``channel``
    (``client``: a sync ``redis.Redis``); returns what was published."""
    message = WeightsMessage(version=version, path=str(path.resolve()), time=time.time())
    raw = message.model_dump_json()
    client.set(key, raw)
    client.publish(channel, raw)
    return message


def read_weights(client: redis.Redis, key: str = WEIGHTS_KEY) -> WeightsMessage | None:
    """The latest message under ``key`` (``client``: a sync ``redis.Redis``), None before any."""
    return parse_weights(client.get(key))


def latest_version(client: redis.Redis, key: str = WEIGHTS_KEY) -> int:
    """The latest published version, 0 before the first (the start's weights)."""
    message = read_weights(client, key)
    return 0 if message is None else message.version
