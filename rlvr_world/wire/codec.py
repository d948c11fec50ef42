"""Core values on the wire: task and status enums, and numpy arrays as ``Tensor`` messages.

A ``Tensor`` (``common.proto``) is raw little-endian C-order bytes plus a shape and a dtype name.
``encode_tensor`` writes one from any array (big-endian or strided input is converted);
``decode_tensor`` reads bytes + shape + dtype back into an array after checking them, raising
``InvalidInput`` whose message starts with the field's name (``frames.shape: ...``), so a server
answers ``INVALID_ARGUMENT`` (gRPC) or 422 (HTTP) with it. What a value *means* (frames in
[0, 1], token ids) is the caller's to check; this module only guarantees a well-formed array.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from rlvr_world.rewards.types import InvalidInput, Status
from rlvr_world.v1 import common_pb2

#: Task names of the core and their proto enum values (read back by the plain int).
TASK_TO_PROTO: dict[str, common_pb2.Task] = {
    "text_game": common_pb2.TASK_TEXT_GAME,
    "web": common_pb2.TASK_WEB,
    "video": common_pb2.TASK_VIDEO,
}
TASK_FROM_PROTO: dict[int, str] = {int(v): k for k, v in TASK_TO_PROTO.items()}
TASKS: tuple[str, ...] = tuple(TASK_TO_PROTO)
#: Reward statuses of the core and their proto enum values.
STATUS_TO_PROTO: dict[Status, common_pb2.RewardStatus] = {
    Status.OK: common_pb2.REWARD_STATUS_OK,
    Status.UNPARSEABLE: common_pb2.REWARD_STATUS_UNPARSEABLE,
    Status.INVALID_INPUT: common_pb2.REWARD_STATUS_INVALID_INPUT,
    Status.TIMEOUT: common_pb2.REWARD_STATUS_TIMEOUT,
    Status.ERROR: common_pb2.REWARD_STATUS_ERROR,
}
STATUS_FROM_PROTO: dict[int, Status] = {int(v): k for k, v in STATUS_TO_PROTO.items()}
#: dtype names a ``Tensor`` may carry.
DTYPES: tuple[str, ...] = ("uint8", "float16", "float32", "float64", "int32", "int64")
#: Largest tensor accepted, in elements (a service's payload limit usually bites first).
MAX_ELEMENTS = 1 << 31


def encode_tensor(arr: np.ndarray) -> common_pb2.Tensor:
    """``arr`` as a ``Tensor``: little-endian, C order, its shape and dtype name."""
    a = np.ascontiguousarray(arr)
    a = a.astype(a.dtype.newbyteorder("<"), copy=False)
    return common_pb2.Tensor(data=a.tobytes(), shape=list(a.shape), dtype=a.dtype.name)


def decode_tensor(data: bytes, shape: Sequence[int], dtype: str, name: str) -> np.ndarray:
    """Bytes + shape + dtype -> a read-only array of that dtype; ``InvalidInput`` naming
    ``name`` for an unknown dtype, a missing or non-positive shape, too many elements, or a byte
    count that does not fill the shape."""
    if dtype not in DTYPES:
        raise InvalidInput(f"{name}.dtype: unsupported {dtype!r}; expected one of {DTYPES}")
    if not shape:
        raise InvalidInput(f"{name}.shape: missing")
    if any(d <= 0 for d in shape):
        raise InvalidInput(f"{name}.shape: every dimension must be positive, got {tuple(shape)}")
    count = math.prod(shape)
    if count > MAX_ELEMENTS:
        raise InvalidInput(f"{name}.shape: {tuple(shape)} has too many elements ({count})")
    np_dtype = np.dtype(dtype).newbyteorder("<")
    need = count * np_dtype.itemsize
    if len(data) != need:
        raise InvalidInput(
            f"{name}.data: {len(data)} bytes, but shape {tuple(shape)} of {dtype} needs {need}"
        )
    return np.frombuffer(data, dtype=np_dtype).reshape(tuple(shape))


def tensor_array(msg: common_pb2.Tensor, name: str) -> np.ndarray:
    """``decode_tensor`` of a ``Tensor`` message."""
    return decode_tensor(msg.data, list(msg.shape), msg.dtype, name)
