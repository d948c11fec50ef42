"""The orchestrator's settings (``OrchestratorConfig``): sampling, the task's reward options,
retries and deadlines. Producer: the run's app (``apps.run.grpo.orchestrator_config``); consumer:
``worker.Orchestrator``. Validation only; no I/O.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from rlvr_world.apps.orchestrator.retry import Backoff
from rlvr_world.grpo.settings import DEFAULT_MAX_STALENESS, GroupSize, MaxStaleness
from rlvr_world.video.anchor import AnchorDilate
from rlvr_world.wire.services import Sampling

#: Rows or columns of a video frame's token grid.
PatchCount = Annotated[int, Field(ge=1, le=1024)]


class OrchestratorConfig(BaseModel):
    """How the worker samples, retries and bounds its work."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    group_size: GroupSize = 4
    max_tokens: int = Field(default=128, ge=1, le=1_000_000, description="new tokens per sample")
    temperature: float = Field(default=1.0, gt=0.0, le=10.0, description="sampling temperature")
    top_p: float = Field(default=1.0, gt=0.0, le=1.0, description="nucleus mass (1: off)")
    top_k: int = Field(default=-1, ge=-1, le=1_000_000, description="top-k (-1: off)")
    seed: int = Field(default=0, ge=0, description="base sampling seed (plus the request number)")
    max_inflight: int = Field(default=2, ge=1, le=10_000, description="prompts in flight at once")
    max_staleness: MaxStaleness = DEFAULT_MAX_STALENESS
    special_tokens: Literal["keep", "skip"] = Field(
        default="keep", description="decoder special-token mode (keep: the reference's)"
    )
    variant: Literal["strict", "paper"] = Field(default="strict", description="reward variant")
    reward_type: str | None = Field(
        default=None,
        description="text game: binary | task_specific; web: f1 | item_f1 | soft_item_f1 (empty "
        "or null: the task's default, binary or f1)",
    )
    allowed_tokens: tuple[int, int] | None = Field(
        default=None, description="sample only ids in [begin, end) (a video model's visual ids)"
    )
    ignore_eos: bool = Field(default=False, description="always sample max_tokens tokens")
    video_weights: dict[str, float] = Field(
        default_factory=dict,
        description="video reward weights, metric -> weight (empty: the service's paper default)",
    )
    video_lpips_net: Literal["", "alex", "vgg"] = Field(
        default="", description="perceptual backbone of the video reward (empty: the service's)"
    )
    video_repetition_penalty: float = Field(
        default=0.0, ge=0.0, le=100.0, description="video reward: penalty per copied frame"
    )
    video_anchor_dilate: AnchorDilate = Field(
        default=None, description="single-step video: rlvr_world.video.anchor's dilate"
    )
    video_patch_grid: tuple[PatchCount, PatchCount] | None = Field(
        default=None,
        description=(
            "single-step video: (rows, cols) of the frame's token grid; the reward service then "
            "scores each patch and every sample carries token_rewards (token k: patch k, raster "
            "order), which the trainer's grpo.token_credit uses"
        ),
    )
    attempts: int = Field(default=10, ge=1, le=1000, description="tries per stage")
    backoff_initial_s: float = Field(default=0.2, ge=0.0, le=60.0, description="first wait")
    backoff_max_s: float = Field(default=5.0, ge=0.0, le=600.0, description="longest wait")
    push_timeout_s: float = Field(
        default=5.0, gt=0.0, le=86_400.0, description="wait for room in the stream per attempt"
    )
    push_attempts: int = Field(
        default=120, ge=1, le=1_000_000, description="push tries (backpressure can last long)"
    )
    call_timeout_s: float = Field(default=300.0, gt=0.0, le=86_400.0, description="RPC deadline")
    drain_s: float = Field(
        default=10.0, ge=0.0, le=3600.0, description="grace for in-flight prompts after stop"
    )

    def backoff(self, stage: str = "") -> Backoff:
        attempts = self.push_attempts if stage == "push" else self.attempts
        return Backoff(
            attempts=attempts, initial_s=self.backoff_initial_s, max_s=self.backoff_max_s
        )

    def sampling(self, request_number: int) -> Sampling:
        return Sampling(
            n=self.group_size,
            max_tokens=self.max_tokens,
            temperature=self.temperature,
            top_p=self.top_p,
            top_k=self.top_k,
            seed=self.seed + request_number,
            ignore_eos=self.ignore_eos,
            allowed_tokens=self.allowed_tokens,
        )
