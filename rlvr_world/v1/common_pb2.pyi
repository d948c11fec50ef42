from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable
from typing import ClassVar as _ClassVar, Optional as _Optional

DESCRIPTOR: _descriptor.FileDescriptor

class RewardStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    REWARD_STATUS_UNSPECIFIED: _ClassVar[RewardStatus]
    REWARD_STATUS_OK: _ClassVar[RewardStatus]
    REWARD_STATUS_UNPARSEABLE: _ClassVar[RewardStatus]
    REWARD_STATUS_INVALID_INPUT: _ClassVar[RewardStatus]
    REWARD_STATUS_TIMEOUT: _ClassVar[RewardStatus]
    REWARD_STATUS_ERROR: _ClassVar[RewardStatus]

class Task(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TASK_UNSPECIFIED: _ClassVar[Task]
    TASK_TEXT_GAME: _ClassVar[Task]
    TASK_WEB: _ClassVar[Task]
    TASK_VIDEO: _ClassVar[Task]
REWARD_STATUS_UNSPECIFIED: RewardStatus
REWARD_STATUS_OK: RewardStatus
REWARD_STATUS_UNPARSEABLE: RewardStatus
REWARD_STATUS_INVALID_INPUT: RewardStatus
REWARD_STATUS_TIMEOUT: RewardStatus
REWARD_STATUS_ERROR: RewardStatus
TASK_UNSPECIFIED: Task
TASK_TEXT_GAME: Task
TASK_WEB: Task
TASK_VIDEO: Task

class Tensor(_message.Message):
    __slots__ = ("data", "shape", "dtype")
    DATA_FIELD_NUMBER: _ClassVar[int]
    SHAPE_FIELD_NUMBER: _ClassVar[int]
    DTYPE_FIELD_NUMBER: _ClassVar[int]
    data: bytes
    shape: _containers.RepeatedScalarFieldContainer[int]
    dtype: str
    def __init__(self, data: _Optional[bytes] = ..., shape: _Optional[_Iterable[int]] = ..., dtype: _Optional[str] = ...) -> None: ...
