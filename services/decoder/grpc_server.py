"""gRPC transport of the decoder service: ``DecoderService``, on the service scaffold
(``rlvr_world.scaffold``: token / TLS / mTLS, drain, health, reflection).

``create_server(settings, decoder)`` builds and binds the server (port 0 picks a free one) and
returns its ``GrpcEndpoint``. Status codes: UNAUTHENTICATED without the bearer token (when one is
set), INVALID_ARGUMENT for malformed request bytes, INVALID_ARGUMENT
for ids outside the vocabulary (naming the first, ``requests[i].token_ids[j]`` in a batch), an
unknown ``special_tokens`` mode or a batch over ``max_batch``; for ``DecodeFrames`` INVALID_ARGUMENT
for a wrong token count, ids outside the visual codebook, context ids a per-frame tokenizer does
not take or a compressive one's missing or miscounted context (``services.decoder.frames``), and
FAILED_PRECONDITION when the service runs without a video tokenizer (``video_tokenizer`` unset).
A batch is all-or-nothing: one bad request refuses the batch.
"""

from __future__ import annotations

import asyncio
import logging

import grpc

from rlvr_world.scaffold.grpc_server import GrpcEndpoint, build_grpc
from rlvr_world.v1 import decoder_pb2, decoder_pb2_grpc
from rlvr_world.wire.codec import encode_tensor
from services.decoder.frames import FrameDecoder
from services.decoder.settings import DecoderSettings
from services.decoder.text import InvalidDecodeRequest, TextDecoder

log = logging.getLogger(__name__)
SERVICE_NAME = decoder_pb2.DESCRIPTOR.services_by_name["DecoderService"].full_name
FRAMES_UNAVAILABLE = (
    "DecodeFrames: no video tokenizer is loaded; start the decoder with --video-tokenizer DIR "
    "(RLVR_DECODER_VIDEO_TOKENIZER) to decode visual tokens"
)


class DecoderServicer(decoder_pb2_grpc.DecoderServiceServicer):
    """Validates and decodes with the tokenizer."""

    def __init__(
        self, decoder: TextDecoder, settings: DecoderSettings, frames: FrameDecoder | None = None
    ) -> None:
        self.decoder = decoder
        self.settings = settings
        self.frames = frames

    def _decode_batch(self, reqs: list[decoder_pb2.DecodeTextRequest]) -> list[str]:
        return [
            self.decoder.decode(r.token_ids, r.special_tokens, f"requests[{i}].")
            for i, r in enumerate(reqs)
        ]

    async def DecodeText(  # noqa: N802 (gRPC method name)
        self, request: decoder_pb2.DecodeTextRequest, context: grpc.aio.ServicerContext
    ) -> decoder_pb2.DecodeTextResponse:
        """The text of one request's token ids; INVALID_ARGUMENT names a bad id or mode."""
        try:
            text = self.decoder.decode(request.token_ids, request.special_tokens)
        except InvalidDecodeRequest as exc:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        return decoder_pb2.DecodeTextResponse(request_id=request.request_id, text=text)

    async def DecodeTextBatch(  # noqa: N802 (gRPC method name)
        self, request: decoder_pb2.DecodeTextBatchRequest, context: grpc.aio.ServicerContext
    ) -> decoder_pb2.DecodeTextBatchResponse:
        """The texts of up to ``max_batch`` requests, in order, or INVALID_ARGUMENT for all."""
        reqs = list(request.requests)
        if len(reqs) > self.settings.max_batch:
            await context.abort(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"requests: {len(reqs)} in one batch, over max_batch {self.settings.max_batch}",
            )
        try:
            texts = await asyncio.get_running_loop().run_in_executor(None, self._decode_batch, reqs)
        except InvalidDecodeRequest as exc:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        return decoder_pb2.DecodeTextBatchResponse(
            responses=[
                decoder_pb2.DecodeTextResponse(request_id=r.request_id, text=t)
                for r, t in zip(reqs, texts, strict=True)
            ]
        )

    async def DecodeFrames(  # noqa: N802 (gRPC method name)
        self, request: decoder_pb2.DecodeFramesRequest, context: grpc.aio.ServicerContext
    ) -> decoder_pb2.DecodeFramesResponse:
        """Frames (num_frames, H, W, 3) in [0, 1] of the visual token ids (refusals: module doc)."""
        if self.frames is None:
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION, FRAMES_UNAVAILABLE)
            raise AssertionError("unreachable: abort raises")
        decoder = self.frames
        try:
            frames = await asyncio.get_running_loop().run_in_executor(
                None,
                decoder.decode,
                list(request.token_ids),
                request.num_frames,
                list(request.context_token_ids),
            )
        except InvalidDecodeRequest as exc:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        return decoder_pb2.DecodeFramesResponse(
            request_id=request.request_id, frames=encode_tensor(frames)
        )

    async def Info(  # noqa: N802 (gRPC method name)
        self, request: decoder_pb2.DecoderInfoRequest, context: grpc.aio.ServicerContext
    ) -> decoder_pb2.DecoderInfoResponse:
        """The tokenizer's name and vocabulary size, plus the video tokenizer's shape if loaded."""
        info = decoder_pb2.DecoderInfoResponse(
            tokenizer=self.decoder.name, vocab_size=self.decoder.vocab_size
        )
        if self.frames is not None:
            info.visual_codebook_size = self.frames.codebook_size
            info.tokens_per_frame = self.frames.tokens_per_frame
            info.frame_shape.extend(self.frames.frame_shape)
            info.video_tokenizer_kind = self.frames.kind
            info.context_tokens = self.frames.context_tokens
            info.context_codebook_size = self.frames.context_codebook_size
        return info


def create_server(
    settings: DecoderSettings,
    decoder: TextDecoder,
    interceptors: tuple[grpc.aio.ServerInterceptor, ...] = (),
    frames: FrameDecoder | None = None,
) -> GrpcEndpoint:
    """Build and bind the gRPC server (not started)."""
    servicer = DecoderServicer(decoder, settings, frames)

    def register(server: grpc.aio.Server) -> None:
        # the generated *_pb2_grpc modules are unannotated (mypy-protobuf stubs cover *_pb2 only)
        decoder_pb2_grpc.add_DecoderServiceServicer_to_server(servicer, server)  # type: ignore[no-untyped-call]

    return build_grpc(settings, SERVICE_NAME, register, interceptors=interceptors)
