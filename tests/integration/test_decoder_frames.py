"""DecodeFrames over real gRPC on loopback with a frame tokenizer saved to disk: frames equal the
tokenizer's own decoding, Info reports the codebook, and every bad visual-token request gets
INVALID_ARGUMENT naming the problem while the service stays healthy."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import grpc
import numpy as np
import pytest
import torch
from grpc_health.v1 import health_pb2, health_pb2_grpc

from rlvr_world.v1 import decoder_pb2, decoder_pb2_grpc
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


@pytest.fixture(scope="module")
def svc(tmp_path_factory: pytest.TempPathFactory, video_tokenizer: Path) -> Iterator[ServiceThread]:
    text = tmp_path_factory.mktemp("tokenizer")
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


@pytest.fixture(scope="module")
def stub(svc: ServiceThread) -> Iterator[decoder_pb2_grpc.DecoderServiceStub]:
    with grpc.insecure_channel(svc.grpc_address) as channel:
        yield decoder_pb2_grpc.DecoderServiceStub(channel)  # type: ignore[no-untyped-call]


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
