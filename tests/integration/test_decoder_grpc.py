"""Decoder service over real gRPC on loopback with a tokenizer built offline: keep/skip special
tokens as the reference decodes, batches, refused inputs, and DecodeFrames refused
when no video tokenizer is loaded (frames are tested in test_decoder_frames.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from rlvr_world.v1 import decoder_pb2, decoder_pb2_grpc
from services.decoder.settings import DecoderSettings
from services.decoder.testing import ServiceThread
from tests.helpers.tiny_lm import tiny_tokenizer

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("tokenizer")
    tiny_tokenizer().save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def tokenizer(tokenizer_dir: Path) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tokenizer_dir)


@pytest.fixture(scope="module")
def svc(tokenizer_dir: Path) -> Iterator[ServiceThread]:
    with ServiceThread(
        DecoderSettings(tokenizer=str(tokenizer_dir), grpc_port=0, max_batch=4)
    ) as s:
        yield s


@pytest.fixture(scope="module")
def stub(svc: ServiceThread) -> Iterator[decoder_pb2_grpc.DecoderServiceStub]:
    with grpc.insecure_channel(svc.grpc_address) as channel:
        yield decoder_pb2_grpc.DecoderServiceStub(channel)  # type: ignore[no-untyped-call]


def assert_serving(svc: ServiceThread, stub: decoder_pb2_grpc.DecoderServiceStub) -> None:
    with grpc.insecure_channel(svc.grpc_address) as channel:
        health = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest())
    assert health.status == health_pb2.HealthCheckResponse.SERVING
    assert stub.DecodeText(decoder_pb2.DecodeTextRequest(token_ids=[5, 6])).text


def test_keep_decodes_like_the_reference_and_skip_drops_special_tokens(
    stub: decoder_pb2_grpc.DecoderServiceStub, tokenizer: Any
) -> None:
    ids = tokenizer('{"modified": {"door": "open"}}')["input_ids"] + [tokenizer.eos_token_id]
    keep = stub.DecodeText(decoder_pb2.DecodeTextRequest(request_id="a", token_ids=ids))
    assert keep.request_id == "a"
    assert keep.text == tokenizer.decode(ids)  # the reference: no skip_special_tokens
    assert keep.text == '<|bos|>{"modified": {"door": "open"}}<|eos|>'
    explicit = stub.DecodeText(decoder_pb2.DecodeTextRequest(token_ids=ids, special_tokens="keep"))
    assert explicit.text == keep.text
    skip = stub.DecodeText(decoder_pb2.DecodeTextRequest(token_ids=ids, special_tokens="skip"))
    assert skip.text == '{"modified": {"door": "open"}}'


def test_batch_answers_in_order(stub: decoder_pb2_grpc.DecoderServiceStub, tokenizer: Any) -> None:
    texts = ["the kettle", "New items: [button] Submit", ""]
    reqs = [
        decoder_pb2.DecodeTextRequest(
            request_id=str(i), token_ids=tokenizer(t)["input_ids"], special_tokens="skip"
        )
        for i, t in enumerate(texts)
    ]
    out = stub.DecodeTextBatch(decoder_pb2.DecodeTextBatchRequest(requests=reqs))
    assert [(r.request_id, r.text) for r in out.responses] == [
        ("0", texts[0]),
        ("1", texts[1]),
        ("2", ""),
    ]


def test_info_names_the_tokenizer(
    stub: decoder_pb2_grpc.DecoderServiceStub, tokenizer_dir: Path
) -> None:
    info = stub.Info(decoder_pb2.DecoderInfoRequest())
    assert (info.tokenizer, info.vocab_size, info.visual_codebook_size) == (
        str(tokenizer_dir),
        300,
        0,
    )


BAD = [
    pytest.param(
        "DecodeText",
        decoder_pb2.DecodeTextRequest(token_ids=[3, 299, 300, 301]),
        grpc.StatusCode.INVALID_ARGUMENT,
        "token_ids[2] = 300 is outside the vocabulary [0, 300)",
        id="id-out-of-vocab",
    ),
    pytest.param(
        "DecodeText",
        decoder_pb2.DecodeTextRequest(token_ids=[-4]),
        grpc.StatusCode.INVALID_ARGUMENT,
        "token_ids[0] = -4",
        id="negative-id",
    ),
    pytest.param(
        "DecodeText",
        decoder_pb2.DecodeTextRequest(token_ids=[3], special_tokens="strip"),
        grpc.StatusCode.INVALID_ARGUMENT,
        "special_tokens = 'strip': must be 'keep' or 'skip'",
        id="bad-mode",
    ),
    pytest.param(
        "DecodeTextBatch",
        decoder_pb2.DecodeTextBatchRequest(
            requests=[
                decoder_pb2.DecodeTextRequest(token_ids=[3]),
                decoder_pb2.DecodeTextRequest(token_ids=[3, 4, 1000]),
            ]
        ),
        grpc.StatusCode.INVALID_ARGUMENT,
        "requests[1].token_ids[2] = 1000",
        id="batch-bad-id",
    ),
    pytest.param(
        "DecodeTextBatch",
        decoder_pb2.DecodeTextBatchRequest(
            requests=[decoder_pb2.DecodeTextRequest(token_ids=[3], special_tokens="x")]
        ),
        grpc.StatusCode.INVALID_ARGUMENT,
        "requests[0].special_tokens = 'x'",
        id="batch-bad-mode",
    ),
    pytest.param(
        "DecodeTextBatch",
        decoder_pb2.DecodeTextBatchRequest(requests=[decoder_pb2.DecodeTextRequest()] * 5),
        grpc.StatusCode.INVALID_ARGUMENT,
        "requests: 5 in one batch, over max_batch 4",
        id="batch-too-big",
    ),
    pytest.param(
        "DecodeFrames",
        decoder_pb2.DecodeFramesRequest(token_ids=[1, 2, 3, 4], num_frames=1),
        grpc.StatusCode.FAILED_PRECONDITION,
        "no video tokenizer is loaded; start the decoder with --video-tokenizer",
        id="frames",
    ),
]


@pytest.mark.parametrize(("method", "req", "code", "message"), BAD)
def test_bad_requests_get_a_clear_status_and_the_service_stays_healthy(
    svc: ServiceThread, method: str, req: Any, code: grpc.StatusCode, message: str
) -> None:
    with grpc.insecure_channel(svc.grpc_address) as channel:
        stub = decoder_pb2_grpc.DecoderServiceStub(channel)  # type: ignore[no-untyped-call]
        with pytest.raises(grpc.RpcError) as err:
            getattr(stub, method)(req)
        assert err.value.code() == code
        assert message in (err.value.details() or "")
        assert_serving(svc, stub)
