"""DecodeFrames over real gRPC on loopback with a per-frame and a compressive video tokenizer saved
to disk: frames equal the tokenizer's own decoding (the compressive one's depend on the context
tokens sent), Info reports the codebooks, and every bad visual-token request gets INVALID_ARGUMENT
naming the problem while the service stays healthy."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import grpc
import numpy as np
import pytest
import torch
from grpc_health.v1 import health_pb2, health_pb2_grpc

from rlvr_world.v1 import decoder_pb2, decoder_pb2_grpc
from rlvr_world.video.compressive import CompressiveConfig, CompressiveTokenizer
from rlvr_world.video.tokenizer import FrameTokenizer, TokenizerConfig
from services.decoder.settings import DecoderSettings
from services.decoder.testing import ServiceThread
from tests.helpers.tiny_lm import tiny_tokenizer

pytestmark = pytest.mark.integration

CONFIG = TokenizerConfig(
    image_size=16, channels=(8, 16), downsample=4, levels=(4, 3), norm_groups=4
)
CODES, PER_FRAME = 12, 16  # 4 x 3 codes; (16 / 4)^2 tokens per frame


@pytest.fixture(scope="module")
def video_tokenizer(tmp_path_factory: pytest.TempPathFactory) -> Path:
    torch.manual_seed(0)
    folder = tmp_path_factory.mktemp("video_tokenizer")
    FrameTokenizer(CONFIG).save(folder)
    return folder


def serve(factory: pytest.TempPathFactory, video_tokenizer: Path) -> Iterator[ServiceThread]:
    """The decoder service with a text tokenizer and ``video_tokenizer``: micro-batches of 3
    frames, at most 8 frames a request."""
    text = factory.mktemp("tokenizer")
    tiny_tokenizer().save_pretrained(text)
    settings = DecoderSettings(
        tokenizer=str(text),
        video_tokenizer=str(video_tokenizer),
        grpc_port=0,
        frame_batch=3,
        max_frames=8,
    )
    with ServiceThread(settings) as s:
        yield s


def stub_of(svc: ServiceThread) -> Iterator[decoder_pb2_grpc.DecoderServiceStub]:
    with grpc.insecure_channel(svc.grpc_address) as channel:
        yield decoder_pb2_grpc.DecoderServiceStub(channel)  # type: ignore[no-untyped-call]


@pytest.fixture(scope="module")
def svc(tmp_path_factory: pytest.TempPathFactory, video_tokenizer: Path) -> Iterator[ServiceThread]:
    yield from serve(tmp_path_factory, video_tokenizer)


@pytest.fixture(scope="module")
def stub(svc: ServiceThread) -> Iterator[decoder_pb2_grpc.DecoderServiceStub]:
    yield from stub_of(svc)


def frames_of(resp: decoder_pb2.DecodeFramesResponse) -> np.ndarray:
    t = resp.frames
    return np.frombuffer(t.data, dtype=t.dtype).reshape(tuple(t.shape))


def test_frames_equal_the_tokenizers_own_decoding_across_micro_batches(
    stub: decoder_pb2_grpc.DecoderServiceStub, video_tokenizer: Path
) -> None:
    ids = np.random.default_rng(0).integers(0, CODES, size=(7, PER_FRAME))  # 7 frames, batch 3
    resp = stub.DecodeFrames(
        decoder_pb2.DecodeFramesRequest(
            request_id="f1", token_ids=ids.ravel().tolist(), num_frames=7
        )
    )
    frames = frames_of(resp)
    assert resp.request_id == "f1" and frames.shape == (7, 16, 16, 3)
    assert frames.dtype == np.float32 and frames.min() >= 0.0 and frames.max() <= 1.0
    expected = FrameTokenizer.load(video_tokenizer).decode_tokens(ids)
    np.testing.assert_allclose(frames, expected, atol=1e-5)
    assert np.abs(frames[0] - frames[1]).max() > 0  # different tokens, different frames


def test_info_reports_the_visual_codebook(stub: decoder_pb2_grpc.DecoderServiceStub) -> None:
    info = stub.Info(decoder_pb2.DecoderInfoRequest())
    assert (info.visual_codebook_size, info.tokens_per_frame) == (CODES, PER_FRAME)
    assert list(info.frame_shape) == [16, 16, 3]


def req(ids: list[int], num_frames: int, context: list[int]) -> decoder_pb2.DecodeFramesRequest:
    return decoder_pb2.DecodeFramesRequest(
        token_ids=ids, num_frames=num_frames, context_token_ids=context
    )


BAD = [
    (req([1] * (PER_FRAME - 1), 1, []), f"token_ids: {PER_FRAME - 1} ids for num_frames 1"),
    (req([1] * PER_FRAME, 2, []), f"expected 2 x {PER_FRAME} tokens per frame"),
    (req([0] * 5 + [CODES] + [0] * (PER_FRAME - 6), 1, []), f"token_ids[5] = {CODES} is outside"),
    (req([-1] + [0] * (PER_FRAME - 1), 1, []), "token_ids[0] = -1 is outside the visual codebook"),
    (req([], 0, []), "num_frames = 0: must be between 1 and 8"),
    (req([0] * PER_FRAME * 9, 9, []), "num_frames = 9: must be between 1 and 8"),
    (req([0] * PER_FRAME, 1, [3, 4]), "context_token_ids: 2 given, but the loaded tokenizer is"),
]


@pytest.mark.parametrize(("request_", "message"), BAD)
def test_bad_visual_tokens_get_invalid_argument_and_the_service_stays_healthy(
    svc: ServiceThread,
    stub: decoder_pb2_grpc.DecoderServiceStub,
    request_: decoder_pb2.DecodeFramesRequest,
    message: str,
) -> None:
    req = request_
    with pytest.raises(grpc.RpcError) as err:
        stub.DecodeFrames(req)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert message in (err.value.details() or "")
    with grpc.insecure_channel(svc.grpc_address) as channel:
        health = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest())
    assert health.status == health_pb2.HealthCheckResponse.SERVING
    ok = stub.DecodeFrames(decoder_pb2.DecodeFramesRequest(token_ids=[0] * PER_FRAME, num_frames=1))
    assert frames_of(ok).shape == (1, 16, 16, 3)


def test_a_missing_video_tokenizer_directory_fails_at_start(tmp_path: Path) -> None:
    from services.decoder.frames import FrameDecoder

    with pytest.raises(FileNotFoundError, match="video tokenizer directory"):
        FrameDecoder(str(tmp_path / "absent"))


# Compressive tokenizer: dynamics tokens decoded against one context frame's tokens

CTX_CONFIG = CompressiveConfig(
    image_size=16,
    context_channels=(8,),
    context_downsample=2,
    context_levels=(4, 3),
    dynamics_channels=(8,),
    dynamics_downsample=2,
    patch=2,
    dynamics_levels=(3, 3),
    norm_groups=4,
)
CTX_CODES, CTX_PER_FRAME = 12, 64  # (16 / 2)^2 context tokens of 4 x 3 codes
DYN_CODES, DYN_PER_FRAME = 9, 16  # (16 / 2 / 2)^2 dynamics tokens of 3 x 3 codes


@pytest.fixture(scope="module")
def compressive_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    torch.manual_seed(0)
    folder = tmp_path_factory.mktemp("compressive")
    CompressiveTokenizer(CTX_CONFIG).save(folder)
    return folder


@pytest.fixture(scope="module")
def ctx_svc(
    tmp_path_factory: pytest.TempPathFactory, compressive_dir: Path
) -> Iterator[ServiceThread]:
    yield from serve(tmp_path_factory, compressive_dir)


@pytest.fixture(scope="module")
def ctx_stub(ctx_svc: ServiceThread) -> Iterator[decoder_pb2_grpc.DecoderServiceStub]:
    yield from stub_of(ctx_svc)


def test_compressive_frames_equal_the_tokenizers_decoding_and_depend_on_the_context(
    ctx_stub: decoder_pb2_grpc.DecoderServiceStub, compressive_dir: Path
) -> None:
    rng = np.random.default_rng(1)
    dyn = rng.integers(0, DYN_CODES, size=(5, DYN_PER_FRAME))  # 5 frames, micro-batch 3
    ctx_a, ctx_b = rng.integers(0, CTX_CODES, size=(2, CTX_PER_FRAME))
    got = [
        frames_of(
            ctx_stub.DecodeFrames(
                req(dyn.ravel().tolist(), 5, ctx.tolist()),
            )
        )
        for ctx in (ctx_a, ctx_b)
    ]
    model = CompressiveTokenizer.load(compressive_dir)
    for frames, ctx in zip(got, (ctx_a, ctx_b), strict=True):
        assert frames.shape == (5, 16, 16, 3) and frames.dtype == np.float32
        expected = model.decode_future(ctx[None], dyn[None])[0]
        np.testing.assert_allclose(frames, expected, atol=1e-5)
    assert np.abs(got[0] - got[1]).max() > 1e-4  # same dynamics tokens, another context


def test_compressive_info_reports_both_codebooks(
    ctx_stub: decoder_pb2_grpc.DecoderServiceStub,
) -> None:
    info = ctx_stub.Info(decoder_pb2.DecoderInfoRequest())
    assert info.video_tokenizer_kind == "compressive_tokenizer"
    assert (info.visual_codebook_size, info.tokens_per_frame) == (DYN_CODES, DYN_PER_FRAME)
    assert (info.context_codebook_size, info.context_tokens) == (CTX_CODES, CTX_PER_FRAME)
    assert list(info.frame_shape) == [16, 16, 3]


CTX_OK = [0] * CTX_PER_FRAME
CTX_BAD = [
    (req([0] * DYN_PER_FRAME, 1, []), "context_token_ids: 0 given; the compressive tokenizer"),
    (req([0] * DYN_PER_FRAME, 1, [0] * 3), f"one context frame of {CTX_PER_FRAME} tokens"),
    (
        req([0] * DYN_PER_FRAME, 1, [0] * 7 + [CTX_CODES] + [0] * (CTX_PER_FRAME - 8)),
        f"context_token_ids[7] = {CTX_CODES} is outside the context codebook [0, {CTX_CODES})",
    ),
    (req([DYN_CODES] + [0] * (DYN_PER_FRAME - 1), 1, CTX_OK), "token_ids[0] = 9 is outside"),
    (req([0] * (DYN_PER_FRAME + 1), 1, CTX_OK), f"expected 1 x {DYN_PER_FRAME} tokens per frame"),
    (req([0] * DYN_PER_FRAME * 9, 9, CTX_OK), "num_frames = 9: must be between 1 and 8"),
]


@pytest.mark.parametrize(("request_", "message"), CTX_BAD)
def test_bad_compressive_requests_get_invalid_argument_and_the_service_stays_healthy(
    ctx_stub: decoder_pb2_grpc.DecoderServiceStub,
    request_: decoder_pb2.DecodeFramesRequest,
    message: str,
) -> None:
    with pytest.raises(grpc.RpcError) as err:
        ctx_stub.DecodeFrames(request_)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert message in (err.value.details() or "")
    ok = ctx_stub.DecodeFrames(req([0] * DYN_PER_FRAME, 1, CTX_OK))
    assert frames_of(ok).shape == (1, 16, 16, 3)


def test_a_checkpoint_of_an_unknown_kind_fails_at_start(tmp_path: Path) -> None:
    from services.decoder.frames import FrameDecoder

    (tmp_path / "config.json").write_text('{"kind": "mystery", "format_version": 1}')
    with pytest.raises(ValueError, match="holds kind 'mystery', expected 'frame_tokenizer'"):
        FrameDecoder(str(tmp_path))
