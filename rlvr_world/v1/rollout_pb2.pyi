from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class SamplingParams(_message.Message):
    __slots__ = ("n", "temperature", "top_p", "top_k", "max_tokens", "ignore_eos", "seed", "stop", "allowed_tokens", "segment_tokens")
    N_FIELD_NUMBER: _ClassVar[int]
    TEMPERATURE_FIELD_NUMBER: _ClassVar[int]
    TOP_P_FIELD_NUMBER: _ClassVar[int]
    TOP_K_FIELD_NUMBER: _ClassVar[int]
    MAX_TOKENS_FIELD_NUMBER: _ClassVar[int]
    IGNORE_EOS_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    STOP_FIELD_NUMBER: _ClassVar[int]
    ALLOWED_TOKENS_FIELD_NUMBER: _ClassVar[int]
    SEGMENT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    n: int
    temperature: float
    top_p: float
    top_k: int
    max_tokens: int
    ignore_eos: bool
    seed: int
    stop: _containers.RepeatedScalarFieldContainer[str]
    allowed_tokens: TokenRange
    segment_tokens: int
    def __init__(self, n: _Optional[int] = ..., temperature: _Optional[float] = ..., top_p: _Optional[float] = ..., top_k: _Optional[int] = ..., max_tokens: _Optional[int] = ..., ignore_eos: _Optional[bool] = ..., seed: _Optional[int] = ..., stop: _Optional[_Iterable[str]] = ..., allowed_tokens: _Optional[_Union[TokenRange, _Mapping]] = ..., segment_tokens: _Optional[int] = ...) -> None: ...

class TokenRange(_message.Message):
    __slots__ = ("begin", "end")
    BEGIN_FIELD_NUMBER: _ClassVar[int]
    END_FIELD_NUMBER: _ClassVar[int]
    begin: int
    end: int
    def __init__(self, begin: _Optional[int] = ..., end: _Optional[int] = ...) -> None: ...

class GenerateRequest(_message.Message):
    __slots__ = ("request_id", "text", "token_ids", "sampling", "min_policy_version", "inserts")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    SAMPLING_FIELD_NUMBER: _ClassVar[int]
    MIN_POLICY_VERSION_FIELD_NUMBER: _ClassVar[int]
    INSERTS_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    text: str
    token_ids: TokenIds
    sampling: SamplingParams
    min_policy_version: int
    inserts: _containers.RepeatedCompositeFieldContainer[TokenIds]
    def __init__(self, request_id: _Optional[str] = ..., text: _Optional[str] = ..., token_ids: _Optional[_Union[TokenIds, _Mapping]] = ..., sampling: _Optional[_Union[SamplingParams, _Mapping]] = ..., min_policy_version: _Optional[int] = ..., inserts: _Optional[_Iterable[_Union[TokenIds, _Mapping]]] = ...) -> None: ...

class TokenIds(_message.Message):
    __slots__ = ("ids",)
    IDS_FIELD_NUMBER: _ClassVar[int]
    ids: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, ids: _Optional[_Iterable[int]] = ...) -> None: ...

class Sample(_message.Message):
    __slots__ = ("token_ids", "logprobs", "finish_reason", "text", "inserted")
    TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    LOGPROBS_FIELD_NUMBER: _ClassVar[int]
    FINISH_REASON_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    INSERTED_FIELD_NUMBER: _ClassVar[int]
    token_ids: _containers.RepeatedScalarFieldContainer[int]
    logprobs: _containers.RepeatedScalarFieldContainer[float]
    finish_reason: str
    text: str
    inserted: _containers.RepeatedScalarFieldContainer[bool]
    def __init__(self, token_ids: _Optional[_Iterable[int]] = ..., logprobs: _Optional[_Iterable[float]] = ..., finish_reason: _Optional[str] = ..., text: _Optional[str] = ..., inserted: _Optional[_Iterable[bool]] = ...) -> None: ...

class GenerateResponse(_message.Message):
    __slots__ = ("request_id", "prompt_token_ids", "samples", "policy_version")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    PROMPT_TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    SAMPLES_FIELD_NUMBER: _ClassVar[int]
    POLICY_VERSION_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    prompt_token_ids: _containers.RepeatedScalarFieldContainer[int]
    samples: _containers.RepeatedCompositeFieldContainer[Sample]
    policy_version: int
    def __init__(self, request_id: _Optional[str] = ..., prompt_token_ids: _Optional[_Iterable[int]] = ..., samples: _Optional[_Iterable[_Union[Sample, _Mapping]]] = ..., policy_version: _Optional[int] = ...) -> None: ...

class LoadWeightsRequest(_message.Message):
    __slots__ = ("version", "path")
    VERSION_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    version: int
    path: str
    def __init__(self, version: _Optional[int] = ..., path: _Optional[str] = ...) -> None: ...

class LoadWeightsResponse(_message.Message):
    __slots__ = ("version", "seconds")
    VERSION_FIELD_NUMBER: _ClassVar[int]
    SECONDS_FIELD_NUMBER: _ClassVar[int]
    version: int
    seconds: float
    def __init__(self, version: _Optional[int] = ..., seconds: _Optional[float] = ...) -> None: ...

class EngineInfoRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class EngineInfoResponse(_message.Message):
    __slots__ = ("engine", "model", "policy_version", "vocab_size")
    ENGINE_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    POLICY_VERSION_FIELD_NUMBER: _ClassVar[int]
    VOCAB_SIZE_FIELD_NUMBER: _ClassVar[int]
    engine: str
    model: str
    policy_version: int
    vocab_size: int
    def __init__(self, engine: _Optional[str] = ..., model: _Optional[str] = ..., policy_version: _Optional[int] = ..., vocab_size: _Optional[int] = ...) -> None: ...
