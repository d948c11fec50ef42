from rlvr_world.v1 import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class DecodeTextRequest(_message.Message):
    __slots__ = ("request_id", "token_ids", "special_tokens")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    SPECIAL_TOKENS_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    token_ids: _containers.RepeatedScalarFieldContainer[int]
    special_tokens: str
    def __init__(self, request_id: _Optional[str] = ..., token_ids: _Optional[_Iterable[int]] = ..., special_tokens: _Optional[str] = ...) -> None: ...

class DecodeTextResponse(_message.Message):
    __slots__ = ("request_id", "text")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    text: str
    def __init__(self, request_id: _Optional[str] = ..., text: _Optional[str] = ...) -> None: ...

class DecodeTextBatchRequest(_message.Message):
    __slots__ = ("requests",)
    REQUESTS_FIELD_NUMBER: _ClassVar[int]
    requests: _containers.RepeatedCompositeFieldContainer[DecodeTextRequest]
    def __init__(self, requests: _Optional[_Iterable[_Union[DecodeTextRequest, _Mapping]]] = ...) -> None: ...

class DecodeTextBatchResponse(_message.Message):
    __slots__ = ("responses",)
    RESPONSES_FIELD_NUMBER: _ClassVar[int]
    responses: _containers.RepeatedCompositeFieldContainer[DecodeTextResponse]
    def __init__(self, responses: _Optional[_Iterable[_Union[DecodeTextResponse, _Mapping]]] = ...) -> None: ...

class DecodeFramesRequest(_message.Message):
    __slots__ = ("request_id", "token_ids", "num_frames", "context_token_ids")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    NUM_FRAMES_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    token_ids: _containers.RepeatedScalarFieldContainer[int]
    num_frames: int
    context_token_ids: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, request_id: _Optional[str] = ..., token_ids: _Optional[_Iterable[int]] = ..., num_frames: _Optional[int] = ..., context_token_ids: _Optional[_Iterable[int]] = ...) -> None: ...

class DecodeFramesResponse(_message.Message):
    __slots__ = ("request_id", "frames")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    FRAMES_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    frames: _common_pb2.Tensor
    def __init__(self, request_id: _Optional[str] = ..., frames: _Optional[_Union[_common_pb2.Tensor, _Mapping]] = ...) -> None: ...

class DecoderInfoRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class DecoderInfoResponse(_message.Message):
    __slots__ = ("tokenizer", "vocab_size", "visual_codebook_size", "tokens_per_frame", "frame_shape", "video_tokenizer_kind", "context_tokens", "context_codebook_size")
    TOKENIZER_FIELD_NUMBER: _ClassVar[int]
    VOCAB_SIZE_FIELD_NUMBER: _ClassVar[int]
    VISUAL_CODEBOOK_SIZE_FIELD_NUMBER: _ClassVar[int]
    TOKENS_PER_FRAME_FIELD_NUMBER: _ClassVar[int]
    FRAME_SHAPE_FIELD_NUMBER: _ClassVar[int]
    VIDEO_TOKENIZER_KIND_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_CODEBOOK_SIZE_FIELD_NUMBER: _ClassVar[int]
    tokenizer: str
    vocab_size: int
    visual_codebook_size: int
    tokens_per_frame: int
    frame_shape: _containers.RepeatedScalarFieldContainer[int]
    video_tokenizer_kind: str
    context_tokens: int
    context_codebook_size: int
    def __init__(self, tokenizer: _Optional[str] = ..., vocab_size: _Optional[int] = ..., visual_codebook_size: _Optional[int] = ..., tokens_per_frame: _Optional[int] = ..., frame_shape: _Optional[_Iterable[int]] = ..., video_tokenizer_kind: _Optional[str] = ..., context_tokens: _Optional[int] = ..., context_codebook_size: _Optional[int] = ...) -> None: ...
