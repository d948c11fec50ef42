"""Settings of the decoder service: one pydantic-settings class, env prefix ``RLVR_DECODER_``.

Built once in the entrypoint (``services.decoder.cli``) and passed down; never imported as a
global. ``tokenizer`` is required (a missing one fails at boot).
"""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import SettingsConfigDict

from rlvr_world.devices import DeviceName, TorchThreads
from rlvr_world.scaffold.settings import GrpcMetricsSettings


class DecoderSettings(GrpcMetricsSettings):
    """One decoder server: a tokenizer behind gRPC."""

    model_config = SettingsConfigDict(env_prefix="RLVR_DECODER_", extra="ignore")

    tokenizer: str = Field(description="tokenizer directory (or the model directory)")
    gguf_file: str | None = Field(
        default=None, description="GGUF file inside the tokenizer directory"
    )
    video_tokenizer: str | None = Field(
        default=None, description="video tokenizer dir (serves DecodeFrames; unset: text only)"
    )
    frame_batch: int = Field(default=64, ge=1, le=65536, description="frames per decoder forward")
    max_frames: int = Field(default=4096, ge=1, le=1_000_000, description="frames per request")
    torch_threads: TorchThreads = 1
    device: DeviceName = Field(
        default="auto",
        description="device of the video tokenizer's frame decoding: auto (CUDA where torch "
        "sees a GPU), cpu, cuda or cuda:N (text decoding uses none)",
    )
    grpc_port: int = Field(default=50062, ge=0, le=65535, description="0 picks a free port")
    max_batch: int = Field(default=4096, ge=1, le=1_000_000, description="requests per batch")
