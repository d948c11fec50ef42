from rlvr_world.v1 import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class VideoOptions(_message.Message):
    __slots__ = ("weights", "aggregation", "gamma", "repetition_penalty", "repetition_threshold", "lpips_net", "patch_grid")
    class WeightsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    WEIGHTS_FIELD_NUMBER: _ClassVar[int]
    AGGREGATION_FIELD_NUMBER: _ClassVar[int]
    GAMMA_FIELD_NUMBER: _ClassVar[int]
    REPETITION_PENALTY_FIELD_NUMBER: _ClassVar[int]
    REPETITION_THRESHOLD_FIELD_NUMBER: _ClassVar[int]
    LPIPS_NET_FIELD_NUMBER: _ClassVar[int]
    PATCH_GRID_FIELD_NUMBER: _ClassVar[int]
    weights: _containers.ScalarMap[str, float]
    aggregation: str
    gamma: float
    repetition_penalty: float
    repetition_threshold: float
    lpips_net: str
    patch_grid: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, weights: _Optional[_Mapping[str, float]] = ..., aggregation: _Optional[str] = ..., gamma: _Optional[float] = ..., repetition_penalty: _Optional[float] = ..., repetition_threshold: _Optional[float] = ..., lpips_net: _Optional[str] = ..., patch_grid: _Optional[_Iterable[int]] = ...) -> None: ...

class ScoreOptions(_message.Message):
    __slots__ = ("variant", "reward_type", "video")
    VARIANT_FIELD_NUMBER: _ClassVar[int]
    REWARD_TYPE_FIELD_NUMBER: _ClassVar[int]
    VIDEO_FIELD_NUMBER: _ClassVar[int]
    variant: str
    reward_type: str
    video: VideoOptions
    def __init__(self, variant: _Optional[str] = ..., reward_type: _Optional[str] = ..., video: _Optional[_Union[VideoOptions, _Mapping]] = ...) -> None: ...

class ScoreRequest(_message.Message):
    __slots__ = ("request_id", "task", "text", "frames", "ground_truth", "target_frames", "previous_frame", "extra_info_json", "options", "actions", "states")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    TASK_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    FRAMES_FIELD_NUMBER: _ClassVar[int]
    GROUND_TRUTH_FIELD_NUMBER: _ClassVar[int]
    TARGET_FRAMES_FIELD_NUMBER: _ClassVar[int]
    PREVIOUS_FRAME_FIELD_NUMBER: _ClassVar[int]
    EXTRA_INFO_JSON_FIELD_NUMBER: _ClassVar[int]
    OPTIONS_FIELD_NUMBER: _ClassVar[int]
    ACTIONS_FIELD_NUMBER: _ClassVar[int]
    STATES_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    task: _common_pb2.Task
    text: str
    frames: _common_pb2.Tensor
    ground_truth: str
    target_frames: _common_pb2.Tensor
    previous_frame: _common_pb2.Tensor
    extra_info_json: str
    options: ScoreOptions
    actions: _common_pb2.Tensor
    states: _common_pb2.Tensor
    def __init__(self, request_id: _Optional[str] = ..., task: _Optional[_Union[_common_pb2.Task, str]] = ..., text: _Optional[str] = ..., frames: _Optional[_Union[_common_pb2.Tensor, _Mapping]] = ..., ground_truth: _Optional[str] = ..., target_frames: _Optional[_Union[_common_pb2.Tensor, _Mapping]] = ..., previous_frame: _Optional[_Union[_common_pb2.Tensor, _Mapping]] = ..., extra_info_json: _Optional[str] = ..., options: _Optional[_Union[ScoreOptions, _Mapping]] = ..., actions: _Optional[_Union[_common_pb2.Tensor, _Mapping]] = ..., states: _Optional[_Union[_common_pb2.Tensor, _Mapping]] = ...) -> None: ...

class ScoreResponse(_message.Message):
    __slots__ = ("request_id", "reward", "status", "metrics", "message", "patch_rewards")
    class MetricsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    REWARD_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    METRICS_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    PATCH_REWARDS_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    reward: float
    status: _common_pb2.RewardStatus
    metrics: _containers.ScalarMap[str, float]
    message: str
    patch_rewards: _containers.RepeatedScalarFieldContainer[float]
    def __init__(self, request_id: _Optional[str] = ..., reward: _Optional[float] = ..., status: _Optional[_Union[_common_pb2.RewardStatus, str]] = ..., metrics: _Optional[_Mapping[str, float]] = ..., message: _Optional[str] = ..., patch_rewards: _Optional[_Iterable[float]] = ...) -> None: ...

class ScoreBatchRequest(_message.Message):
    __slots__ = ("requests",)
    REQUESTS_FIELD_NUMBER: _ClassVar[int]
    requests: _containers.RepeatedCompositeFieldContainer[ScoreRequest]
    def __init__(self, requests: _Optional[_Iterable[_Union[ScoreRequest, _Mapping]]] = ...) -> None: ...

class ScoreBatchResponse(_message.Message):
    __slots__ = ("responses",)
    RESPONSES_FIELD_NUMBER: _ClassVar[int]
    responses: _containers.RepeatedCompositeFieldContainer[ScoreResponse]
    def __init__(self, responses: _Optional[_Iterable[_Union[ScoreResponse, _Mapping]]] = ...) -> None: ...
