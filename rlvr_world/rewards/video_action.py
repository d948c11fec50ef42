"""The action-following terms of the video reward: ``idm`` and ``state``, per predicted frame.

What it does: for predicted frames ``(T, H, W, 3)`` (already checked by
``rlvr_world.rewards.video.validate_video``: float in [0, 1]) it computes the per-frame losses of
the two terms ``score_video`` mixes with the others (``loss_t = sum_m w_m * loss_m,t``):

* ``idm``: an inverse-dynamics model (an ``ActionReader``) reads the action of each step, from the
  frame before (the request's ``previous_frame`` for t = 0, predicted frame t-1 after) to
  predicted frame t, and ``rlvr_world.rewards.action.action_errors`` compares it with the true
  action of step t: ``loss_t`` is the normalised action error in [0, 1] (the IDM's own action
  space and tolerance, ``ReaderConfig.reward_config``). Metrics: ``idm_error`` (mean loss),
  ``idm_acc`` (share of steps within the tolerance on every axis), ``idm_mae`` (action units).
* ``state``: ``rlvr_world.rewards.pusht_state.state_errors`` segments the agent and the T block
  of predicted frame t by colour and compares their centres with the simulator's true state
  after step t: ``loss_t`` is the normalised centre error in [0, 1] (default
  ``StateCheckConfig``: capped at the arena diagonal, agent and block weighed alike). Metrics:
  ``agent_error_px``, ``block_error_px`` (arena pixels), ``state_missing`` (share of parts not
  found), ``state_error`` (mean loss).

A true state is one row ``(agent x, agent y, block x, block y, block angle)`` in PushT arena
pixels and radians: gym-pusht's ``agent.position`` and ``block.position``/``block.angle``, the
recordings' ``agent_pos`` and ``block_pose`` (``STATE_FIELDS``).

Which terms run: a term named in the config's weights, with any weight (0 measures it and reports
its metrics without changing the reward; ``ACTION_TERMS``). Both are frame-level: one value per
frame, shared by every patch of a ``patch_grid``.

What it does not do: no torch. The IDM comes in from the caller as an ``ActionReader``
(``rlvr_world.video.idm.InverseDynamicsModel`` is one; the reward service wraps it to batch
across requests). Bad true actions or states raise ``InvalidInput`` naming the argument
(``score_video`` turns it into status ``invalid_input``); a reader that returns the wrong shape
or non-finite actions raises ``ArithmeticError`` (status ``error``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

import numpy as np
from numpy.typing import NDArray

from rlvr_world.rewards.action import ActionRewardConfig, action_errors, check_actions
from rlvr_world.rewards.checks import as_float_array, require_finite
from rlvr_world.rewards.pusht_state import POSITION_SIZE, StateCheckConfig, state_errors
from rlvr_world.rewards.types import InvalidInput
from rlvr_world.shapes import MATRIX_NDIM

FloatArray = NDArray[np.float64]

#: The action-following terms a video weight may name.
ACTION_TERMS = ("idm", "state")
#: The columns of one true state (``states``' rows).
STATE_FIELDS = ("agent_x", "agent_y", "block_x", "block_y", "block_angle")
STATE_SIZE = len(STATE_FIELDS)


class ReaderConfig(Protocol):
    """What an ``ActionReader`` reads: frames of ``image_size`` ``(H, W)`` (RGB), actions of
    ``action_dims`` axes, scored in ``reward_config()``'s action space and tolerance
    (``rlvr_world.video.idm.IdmConfig`` is one)."""

    @property
    def image_size(self) -> tuple[int, int]:
        """(height, width) in pixels of the frames it reads."""
        ...

    @property
    def action_dims(self) -> int:
        """Axes D of an action."""
        ...

    def reward_config(self) -> ActionRewardConfig:
        """The action space (per-axis ranges) and tolerance its errors are scored in."""
        ...


class ActionReader(Protocol):
    """An inverse-dynamics model: ``predict(prev, nxt)`` takes two float arrays ``(N, H, W, 3)``
    in [0, 1] (frame before, frame after) and returns the actions ``(N, D)`` between them, in
    action units."""

    @property
    def config(self) -> ReaderConfig:
        """What the reader reads and in which action space."""
        ...

    def predict(self, prev: FloatArray, nxt: FloatArray) -> FloatArray:
        """Actions (N, D) between the frames (N, H, W, 3) before and after (class docstring)."""
        ...


@dataclass(frozen=True)
class ActionTerms:
    """The per-frame losses ``(T,)`` of the terms that ran, by name, and their metrics."""

    losses: dict[str, FloatArray]
    metrics: dict[str, float]


def requested_terms(weights: Mapping[str, float]) -> tuple[str, ...]:
    """The action terms named in ``weights`` (any weight), in ``ACTION_TERMS`` order."""
    return tuple(name for name in ACTION_TERMS if name in weights)


def check_states(states: object, n_frames: int) -> tuple[FloatArray, FloatArray]:
    """``states`` ``(T, 5)`` as agent positions ``(T, 2)`` and block poses ``(T, 3)``;
    ``InvalidInput`` naming ``states`` for another shape or count, or a non-finite value."""
    arr = as_float_array(states, "states")
    if arr.ndim != MATRIX_NDIM or arr.shape[1] != STATE_SIZE:
        raise InvalidInput(
            f"states: expected shape (T, {STATE_SIZE}), one row ({', '.join(STATE_FIELDS)}) per "
            f"predicted frame, got {arr.shape}"
        )
    if arr.shape[0] != n_frames:
        raise InvalidInput(
            f"states: {arr.shape[0]} rows for {n_frames} predicted frames; one true state "
            "(after the step) per predicted frame"
        )
    require_finite(arr, "states")
    return arr[:, :POSITION_SIZE], arr[:, POSITION_SIZE:]


def idm_term(
    pred: FloatArray, previous_frame: FloatArray | None, actions: object, reader: ActionReader
) -> tuple[FloatArray, dict[str, float]]:
    """The ``idm`` loss ``(T,)`` and metrics of checked frames (module docstring)."""
    if previous_frame is None:
        raise InvalidInput(
            "previous_frame: required by the idm term (the IDM reads the first step from it to "
            "the first predicted frame)"
        )
    cfg = reader.config.reward_config()
    true = check_actions(actions, "actions", cfg.dims)
    if true.shape[0] != pred.shape[0]:
        raise InvalidInput(
            f"actions: {true.shape[0]} actions for {pred.shape[0]} predicted frames; one true "
            "action per predicted frame"
        )
    prev = np.concatenate([previous_frame[None], pred[:-1]])
    read = np.asarray(reader.predict(prev, pred), dtype=np.float64)
    if read.shape != true.shape or not np.isfinite(read).all():
        raise ArithmeticError(
            f"the IDM returned actions of shape {read.shape} (finite: "
            f"{bool(np.isfinite(read).all())}) for {pred.shape[0]} steps of {cfg.dims} axes"
        )
    err = action_errors(read, true, cfg)
    metrics = {
        "idm_error": float(err.normalised.mean()),
        "idm_acc": float(err.within.mean()),
        "idm_mae": float(err.absolute.mean()),
    }
    return err.normalised, metrics


def state_term(
    pred: FloatArray, states: object, config: StateCheckConfig | None = None
) -> tuple[FloatArray, dict[str, float]]:
    """The ``state`` loss ``(T,)`` and metrics of checked frames (module docstring)."""
    agent, block = check_states(states, pred.shape[0])
    err = state_errors(pred, agent, block, config or StateCheckConfig())
    missing = np.concatenate([err.agent_missing, err.block_missing])
    metrics = {
        "agent_error_px": float(err.agent_px.mean()),
        "block_error_px": float(err.block_px.mean()),
        "state_missing": float(missing.mean()),
        "state_error": float(err.normalised.mean()),
    }
    return err.normalised, metrics


def action_terms(
    names: tuple[str, ...],
    pred: FloatArray,
    previous_frame: FloatArray | None,
    *,
    actions: object | None,
    states: object | None,
    reader: ActionReader | None,
) -> ActionTerms:
    """The terms ``names`` (``requested_terms``) of checked frames; ``InvalidInput`` naming
    what is missing or malformed (``actions``, ``states``, ``previous_frame``)."""
    losses: dict[str, FloatArray] = {}
    metrics: dict[str, float] = {}
    if "idm" in names:
        if actions is None:
            raise InvalidInput(
                "actions: required by the idm term (weights['idm']): the true action of each "
                "predicted frame, shape (T, action dims)"
            )
        if reader is None:
            raise InvalidInput("weights['idm'] needs an inverse-dynamics model (ActionReader)")
        losses["idm"], found = idm_term(pred, previous_frame, actions, reader)
        metrics.update(found)
    if "state" in names:
        if states is None:
            raise InvalidInput(
                f"states: required by the state term (weights['state']): the true state after "
                f"each predicted frame, shape (T, {STATE_SIZE})"
            )
        losses["state"], found = state_term(pred, states)
        metrics.update(found)
    return ActionTerms(losses, metrics)
