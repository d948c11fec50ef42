"""The RL and IDM sections of the video run's config (``rlvr_world.apps.video.config`` holds the
rest and the checks between sections).

* ``VideoRl``: GRPO through the services; its ``weights`` mix the pixel terms (L1, MSE, PSNR,
  SSIM, the perceptual distance) with the action-following terms ``idm`` and ``state``
  (``rlvr_world.rewards.video_action``; a weight of 0 measures a term without rewarding it), and
  ``balance_prompts`` / ``balance_mode`` rescale them on MLE samples before RL
  (``rlvr_world.apps.video.balance``).
* ``VideoIdm``: the inverse-dynamics model of the run: an existing folder (``path``) or one
  trained on the run's own train and validation episodes before RL (``train``); either way the
  reward service loads it (``--idm-path``) and every held-out evaluation reads the actions of the
  predicted frames with it (``rlvr_world.apps.video.reading``).

Every field has bounds and a description; unknown fields are refused.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal, Self

from pydantic import Field, model_validator

from rlvr_world.apps.run.configfile import Section
from rlvr_world.apps.run.grpo import RlSection
from rlvr_world.grpo.settings import GroupSize, KlCoef

#: The ``rl.weights`` key standing for the metric ``eval.perceptual`` resolves to.
PERCEPTUAL = "perceptual"
#: Largest ``rl.weights`` value.
MAX_REWARD_WEIGHT = 1e6


class VideoRl(RlSection):
    """GRPO through the rollout, decoder and reward services and the queue-fed trainer (the
    shared fields in ``apps.run.grpo.RlSection``; video defaults here)."""

    group_size: GroupSize = 8
    steps: int = Field(default=60, ge=1, le=1_000_000, description="trainer optimizer steps")
    micro_batch_size: int = Field(default=16, ge=1, le=100_000, description="samples/backward")
    kl_coef: KlCoef = 0.0
    weights: dict[str, float] = Field(
        default_factory=lambda: {"l1": 1.0, "stlpips": 1.0},
        description="reward = -(sum weight * loss) over rewards.video metric names; "
        "'perceptual' is the metric eval.perceptual resolves to; the paper's is l1 + lpips; "
        "idm and state are the action-following terms (weight 0: measured, not rewarded)",
    )
    repetition_penalty: float = Field(
        default=0.0,
        ge=0.0,
        le=100.0,
        description="added to the loss of each generated frame that copies the frame before it",
    )
    balance_prompts: int = Field(
        default=0,
        ge=0,
        le=100_000,
        description="rescale the weights on the within-group spread of each term, measured on "
        "this many train prompts with the MLE model (0: weights as given; balance_mode says how)",
    )
    balance_mode: Literal["all", "action_terms"] = Field(
        default="all",
        description="all: every positively weighted term gets the same within-group spread (sum "
        "of the weights kept); action_terms: the pixel terms keep their weights and each action "
        "term (idm, state) is scaled to the pixel terms' mean weighted spread times its weight",
    )

    @model_validator(mode="after")
    def _weights(self) -> Self:
        from rlvr_world.rewards.video import METRIC_NAMES
        from rlvr_world.rewards.video_action import ACTION_TERMS

        known = (*METRIC_NAMES, PERCEPTUAL)
        bad = sorted(k for k in self.weights if k not in known)
        if bad:
            raise ValueError(f"rl.weights: unknown metric(s) {bad}; known: {', '.join(known)}")
        if any(not 0.0 <= w <= MAX_REWARD_WEIGHT for w in self.weights.values()):
            raise ValueError("rl.weights: every weight must lie in [0, 1e6]")
        if not any(w > 0 for w in self.weights.values()):
            raise ValueError("rl.weights: at least one weight must be positive")
        if len({k for k in self.weights if k in ("lpips", "stlpips", PERCEPTUAL)}) > 1:
            raise ValueError(
                "rl.weights: name one perceptual metric (lpips, stlpips or perceptual)"
            )
        if self.balance_mode == "action_terms":
            action = [k for k in ACTION_TERMS if self.weights.get(k, 0.0) > 0]
            pixel = [k for k, w in self.weights.items() if w > 0 and k not in ACTION_TERMS]
            if self.balance_prompts == 0 or not action or not pixel:
                raise ValueError(
                    "rl.balance_mode action_terms: scales the positively weighted idm / state "
                    "terms to the pixel terms' spread, so it needs rl.balance_prompts > 0, a "
                    f"positive idm or state weight and a positive pixel weight (got weights "
                    f"{self.weights}, balance_prompts {self.balance_prompts})"
                )
        return self


class VideoIdm(Section):
    """The run's inverse-dynamics model (``rlvr_world.video.idm``): ``path``, a folder written by
    ``rlvr-world video train-idm``, or ``train``: one trained here, after the data phase, on the
    run's train and validation episodes (never the test ones; ``apps.video.idm_train``) into
    ``<run_dir>/idm`` with its ``report.json`` (its accuracy on the held-out true frames: the
    ceiling). Neither: no IDM, and ``rl.weights`` may not name ``idm``."""

    path: Path | None = Field(
        default=None, description="an IDM folder (rlvr-world video train-idm)"
    )
    train: bool = Field(default=False, description="train an IDM on this run's train episodes")
    steps: int = Field(default=3000, ge=1, le=1_000_000, description="train: optimiser steps")
    batch_size: int = Field(default=64, ge=1, le=65_536, description="train: pairs per step")
    lr: float = Field(default=2e-3, gt=0.0, le=1.0, description="train: peak learning rate")
    every_offset: bool = Field(
        default=True,
        description="train: every start offset of a frame_skip span is a training pair, not only "
        "the run's own spans",
    )
    time_limit_s: float | None = Field(
        default=None, gt=0.0, le=86_400.0, description="train: stop after this long (None: never)"
    )

    @model_validator(mode="after")
    def _one_source(self) -> Self:
        if self.path is not None and self.train:
            raise ValueError("idm: give either idm.path (an existing IDM) or idm.train, not both")
        return self

    @property
    def enabled(self) -> bool:
        """Whether the run has an IDM (a folder, or one it trains)."""
        return self.train or self.path is not None
