"""GRPO settings that the trainer, the orchestrator and the run configs share, declared once.

``GrpoObjective`` holds what shapes the policy-gradient signal and that a run config exposes to
its user: the KL weight, how advantages are normalised, what an unparseable or truncated sample
trains with, dynamic sampling and per-token credit. The trainer's ``grpo`` section
(``trainer.config.GrpoConfig``) extends it with the loss's own knobs (clipping, KL estimator,
aggregation); a run's ``rl`` section (``apps.run.grpo.RlSection``) extends it with sampling and
queue sizes and writes the trainer's section from it (``objective()``), so a field, its bound
and its default live here only. ``GroupSize`` is the one bound on a group's size (the
orchestrator and every run config), ``MaxStaleness`` the one bound on how many policy versions a
group may lag (the trainer's queue, the orchestrator's gate and the run config alike).

Validation only; nothing here reads files or the environment.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field

#: A reward a sample is trained with instead of its scored one (None: not replaced).
RewardValue = Annotated[float | None, Field(ge=-1e6, le=1e6)]
#: The KL loss weight (0: off).
KlCoef = Annotated[float, Field(ge=0.0, le=100.0, description="beta of the KL loss (0: off)")]
#: Policy versions a scored group may lag the trainer. At least 1: a group generated while the
#: trainer publishes the next version would otherwise always arrive stale and the run stall.
MaxStaleness = Annotated[
    int,
    Field(
        ge=1,
        le=1000,
        description="policy versions a group may lag the trainer (>= 1: with 0 a group generated "
        "while the trainer publishes the next version arrives stale and the run stalls)",
    ),
]
DEFAULT_MAX_STALENESS = 2
#: Samples per prompt (G): at least 2, or no group has a spread to learn from.
GroupSize = Annotated[int, Field(ge=2, le=1024, description="samples per prompt (G)")]


class GrpoObjective(BaseModel):
    """The GRPO signal's settings that runs expose (module docstring)."""

    model_config = ConfigDict(extra="forbid")

    kl_coef: KlCoef = 0.001
    norm_adv_by_std: bool = Field(
        default=True,
        description="divide each group's centred rewards by its std (GRPO); false: the reward "
        "minus the group mean (Dr. GRPO), so near-equal rewards make near-zero advantages",
    )
    unparseable_reward: RewardValue = Field(
        default=0.0,
        description="reward an unparseable answer trains with (the paper's 0: format failures "
        "are signal); null leaves such samples out like every other non-ok status",
    )
    truncated_reward: RewardValue = Field(
        default=None,
        description="reward a sample cut at max_tokens trains with (DAPO's overlong punishment: "
        "an answer that never stops earns nothing); null keeps its scored reward",
    )
    skip_zero_spread: bool = Field(
        default=False,
        description="drop groups whose training rewards are all equal when they are read and "
        "keep reading until the step is full (DAPO's dynamic sampling; costs more generation)",
    )
    zero_spread_max_skips: int = Field(
        default=0,
        ge=0,
        le=10_000_000,
        description="with skip_zero_spread: most zero-spread groups dropped for one step; past "
        "it the step is filled with what comes (a zero-spread group adds no policy gradient), so "
        "a policy whose groups all agree cannot stall the run (DAPO's max_num_gen_batches); "
        "0: no limit",
    )
    token_credit: float = Field(
        default=0.0,
        ge=0.0,
        le=1.0,
        description="weight of per-token advantages for groups whose samples carry "
        "token_rewards (a video frame scored per patch): each token trains with (1 - w) * its "
        "sample's advantage + w * its own (rlvr_world.grpo.groups); 0: one advantage per sample",
    )

    def objective(self) -> dict[str, Any]:
        """This section's ``GrpoObjective`` fields, for the trainer's ``grpo`` section."""
        return {name: getattr(self, name) for name in GrpoObjective.model_fields}
