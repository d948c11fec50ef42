"""Settings of the reward service: one pydantic-settings class, environment prefix ``RLVR_REWARD_``.

Built once in the entrypoint (``services.reward.cli``) and passed down; never imported as a global.
Every field can be set from the environment, e.g. ``RLVR_REWARD_GRPC_PORT=0`` (port 0 picks a free
port; the chosen ports are logged at start-up).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

from pydantic import Field
from pydantic_settings import SettingsConfigDict

from rlvr_world.devices import TorchThreads
from rlvr_world.scaffold.settings import ServiceSettings

PerceptualName = Literal["lpips", "stlpips"]


def _default_workers() -> int:
    return os.cpu_count() or 1


class RewardSettings(ServiceSettings):
    """One reward worker: a gRPC server and an HTTP gateway over the same scoring pool.

    Bind address, message limit, grace and credentials: ``ServiceSettings`` (the same for the
    HTTP gateway: one token, one certificate)."""

    model_config = SettingsConfigDict(env_prefix="RLVR_REWARD_", extra="ignore")

    grpc_port: int = Field(default=50051, ge=0, le=65535, description="0 picks a free port")
    http_port: int = Field(default=8000, ge=0, le=65535, description="0 picks a free port")
    workers: int = Field(
        default_factory=_default_workers,
        ge=1,
        le=512,
        description="processes of the text-scoring pool (default: every core)",
    )
    max_batch: int = Field(default=1024, ge=1, le=100_000, description="requests per batch call")
    deadline_s: float = Field(
        default=30.0, gt=0, le=3600, description="per-call scoring deadline; status timeout after"
    )
    video_threads: int = Field(
        default=32, ge=1, le=1024, description="threads scoring video requests in the main process"
    )
    torch_threads: TorchThreads = 1
    perceptual_device: str | None = Field(
        default=None,
        description="torch device for LPIPS/ST-LPIPS and the IDM (default: cuda if available)",
    )
    idm_path: Path | None = Field(
        default=None,
        description="inverse-dynamics model folder (rlvr-world video train-idm) for the idm "
        "video weight, loaded at start-up (a bad one stops the start); unset: no idm weight",
    )
    lpips_weights: Path | None = Field(
        default=None, description="local LPIPS backbone weights (no download where offline)"
    )
    perceptual_max_batch: int = Field(
        default=64,
        ge=1,
        le=4096,
        description="frame pairs per forward pass of a video model (LPIPS/ST-LPIPS, the IDM)",
    )
    perceptual_max_wait_ms: float = Field(
        default=5.0, ge=0, le=10_000, description="longest a pair waits for its batch to fill"
    )
    preload_perceptual: list[str] = Field(
        default_factory=list,
        description="'metric:net' pairs built at start-up (e.g. stlpips:alex) so errors show early",
    )
    default_data_source: str | None = Field(
        default=None,
        description="/get_reward, /slime/reward: data_source for labels that are a plain "
        "ground-truth string",
    )
    unparseable_reward: float = Field(
        default=0.0,
        ge=-1e6,
        le=1e6,
        description="/get_reward, /slime/reward: the reward of an unparseable answer (the "
        "policy's failure, as the trainer's grpo.unparseable_reward); timeout and error answer "
        "503, invalid input 422",
    )
    max_connection_age_s: float | None = Field(
        default=None,
        gt=0,
        le=86_400,
        description="gRPC: close each client connection after about this long (GOAWAY; calls "
        "in flight finish), so a client of dns:///NAME resolves the name again and reaches "
        "replicas added since it connected (unset: connections live as long as the client)",
    )

    def grpc_server_options(self) -> list[tuple[str, int]]:
        """gRPC server arguments of these settings (``max_connection_age_s``)."""
        if self.max_connection_age_s is None:
            return []
        return [("grpc.max_connection_age_ms", max(1, round(self.max_connection_age_s * 1000)))]
