"""The one place where wire requests (proto and HTTP JSON) become core jobs, and results go back.

Producer of ``TextJob`` / ``VideoJob``: this module. Consumer: ``services.reward.engine``.
Everything a request can get wrong is checked here and raised as ``InvalidInput`` whose message
starts with the offending field (``frames.shape: ...``), so the gRPC layer answers
``INVALID_ARGUMENT`` and the HTTP layer 422 with the same text. Scorers are never called with a
malformed request. One deferral: a gRPC text request's ``extra_info_json`` and options are parsed
and validated in the scoring process (``RawTextJob.checked``), which answers ``Rejected`` for a bad
one; the gRPC layer maps that back to the same ``INVALID_ARGUMENT`` and message. ``ScoreBatch``
requests are checked by the same functions, in the scoring process (``services.reward.rawbatch``).

Frames: raw little-endian C-order bytes + shape + dtype (``common.proto`` ``Tensor``), either
``(T, H, W, C)`` or ``(H, W, C)`` with C in {1, 3}. Float dtypes hold values in [0, 1] (predictions
are clamped by the scorer, targets outside are rejected), integer dtypes values in [0, 255] (int32
and int64 become uint8). NaN or infinity is rejected.

The action-following terms (``check_action_inputs``): ``actions`` ``(T, A)`` and ``states``
``(T, 5)``, any numeric dtype, become finite float64 with one row per predicted frame whenever
they are sent. A weight ``idm`` (any value: 0 measures only) needs an IDM loaded by the service
(``idm``: its config, None when ``idm_path`` is unset), ``actions`` of its dimension,
``previous_frame`` and RGB frames of its size; a weight ``state`` needs ``states`` and RGB frames.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np
from pydantic import ValidationError

from rlvr_world.bounded_json import loads_bounded
from rlvr_world.rewards.dispatch import TextScoreRequest, describe_validation_error
from rlvr_world.rewards.types import InvalidInput, RewardResult, Status
from rlvr_world.rewards.video import VideoRewardConfig
from rlvr_world.rewards.video_action import STATE_FIELDS, STATE_SIZE, ReaderConfig
from rlvr_world.shapes import FRAME_NDIM, FRAMES_NDIM, GREY_CHANNELS, MATRIX_NDIM, RGB_CHANNELS
from rlvr_world.v1 import common_pb2, reward_pb2
from rlvr_world.wire import codec
from rlvr_world.wire.codec import (
    STATUS_FROM_PROTO,
    STATUS_TO_PROTO,
    TASK_FROM_PROTO,
)

#: Floats narrower than float32 (float16) are widened to it before scoring.
_FLOAT32_BYTES = np.dtype(np.float32).itemsize


@dataclass(frozen=True)
class TextJob:
    """A validated text-task request (text game or web)."""

    task: str
    request: TextScoreRequest


class RawTextJob(NamedTuple):
    """A text request as it came off the gRPC wire, not yet parsed or validated.

    The main process only checks what needs no parsing (task, payload size, batch size); the
    scoring process runs ``checked()`` (``json.loads`` of ``extra_info_json`` and the pydantic
    validation) and answers ``Rejected`` when it fails, so the event loop does not pay for them.
    A tuple because it is built per request on the event loop and pickled to the pool.
    """

    task: str
    text: str
    ground_truth: str
    extra_info_json: str
    variant: str
    reward_type: str

    def checked(self) -> TextJob:
        """The validated job; ``InvalidInput`` naming the proto field, as ``job_from_proto``
        raised before checks moved to the pool."""
        return text_job(
            self.task,
            self.text,
            self.ground_truth,
            parse_extra_info(self.extra_info_json),
            self.variant,
            self.reward_type,
        )


@dataclass(frozen=True)
class Rejected(RewardResult):
    """A deferred check (``RawTextJob.checked``) failed in the scoring process.

    Status ``invalid_input`` and the ``InvalidInput`` message: ``ScoreStream`` sends it as it is,
    ``Score`` turns it back into ``INVALID_ARGUMENT``. (``ScoreBatch`` is checked in the scoring
    process too, through ``services.reward.rawbatch``, which reports the first bad request.)"""


def rejected(message: str) -> Rejected:
    """A ``Rejected`` result (status ``invalid_input``, reward 0) with ``message``."""
    return Rejected(reward=0.0, status=Status.INVALID_INPUT, metrics={}, message=message)


@dataclass(frozen=True)
class VideoSpec:
    """Video options as plain values; unset fields stay None so the scorer's defaults apply."""

    weights: dict[str, float] = field(default_factory=dict)
    aggregation: str | None = None
    gamma: float | None = None
    repetition_penalty: float | None = None
    repetition_threshold: float | None = None
    lpips_net: str | None = None
    patch_grid: tuple[int, ...] | None = None

    def config(self) -> VideoRewardConfig:
        """The scorer's config; ``InvalidInput`` naming ``options.video.<field>``."""
        given = {k: v for k, v in vars(self).items() if v is not None and k != "weights"}
        if self.weights:
            given["weights"] = dict(self.weights)
        try:
            return VideoRewardConfig(**given)
        except InvalidInput as exc:
            raise InvalidInput(f"options.video.{exc}") from None


@dataclass(frozen=True)
class VideoJob:
    """Checked frames: prediction and target (T, H, W, C), uint8 or float, finite."""

    pred: np.ndarray
    target: np.ndarray
    previous_frame: np.ndarray | None
    config: VideoRewardConfig
    task: str = "video"
    #: The true action of each predicted frame, ``(T, A)`` float64 (the ``idm`` term).
    actions: np.ndarray | None = None
    #: The true PushT state after each predicted frame, ``(T, 5)`` float64 (the ``state`` term).
    states: np.ndarray | None = None


Job = TextJob | RawTextJob | VideoJob


# ---------------------------------------------------------------- tensors


def decode_tensor(data: bytes, shape: list[int], dtype: str, name: str) -> np.ndarray:
    """Bytes + shape + dtype -> checked frames (``wire.codec.decode_tensor``, then
    ``to_unit_float``); ``InvalidInput`` naming ``name``."""
    if not shape:
        raise InvalidInput(f"{name}.shape: missing; expected (T, H, W, C) or (H, W, C)")
    return to_unit_float(codec.decode_tensor(data, shape, dtype, name), name)


def to_unit_float(arr: np.ndarray, name: str) -> np.ndarray:
    """Check finiteness and the integer range; returns uint8 or float32/float64 frames.

    Float range ([0, 1]) is left to the video scorer, which clamps predictions and rejects targets
    outside it; ``check_unit_range`` does the latter here so the message names the wire field.
    """
    if arr.dtype.kind == "f":
        out = arr.astype(np.float32) if arr.dtype.itemsize < _FLOAT32_BYTES else arr
        if not np.isfinite(out).all():
            raise InvalidInput(f"{name}.data: contains NaN or infinity")
        return out
    if arr.dtype == np.uint8:
        return arr
    if out_of(arr, 0, 255):
        raise InvalidInput(
            f"{name}.data: {arr.dtype.name} values must lie in [0, 255], "
            f"found [{int(arr.min())}, {int(arr.max())}]"
        )
    return arr.astype(np.uint8)


def out_of(arr: np.ndarray, lo: float, hi: float) -> bool:
    """Whether a non-empty ``arr`` has a value outside ``[lo, hi]``."""
    return bool(arr.size) and (float(arr.min()) < lo or float(arr.max()) > hi)


def check_unit_range(arr: np.ndarray, name: str, tolerance: float = 1e-6) -> None:
    """Float reference frames must already lie in [0, 1]."""
    if arr.dtype.kind == "f" and out_of(arr, -tolerance, 1.0 + tolerance):
        raise InvalidInput(
            f"{name}.data: float values must lie in [0, 1], "
            f"found [{float(arr.min()):g}, {float(arr.max()):g}]"
        )


def frames_job(
    pred: np.ndarray,
    target: np.ndarray | None,
    previous: np.ndarray | None,
    spec: VideoSpec,
    *,
    actions: np.ndarray | None = None,
    states: np.ndarray | None = None,
    idm: ReaderConfig | None,
) -> VideoJob:
    """Check the shapes of already-decoded frames, actions and states against each other and
    against the service's IDM (``idm``: None when it has none)."""
    if pred.ndim == FRAME_NDIM:
        pred = pred[None]
    if pred.ndim != FRAMES_NDIM or pred.shape[-1] not in (GREY_CHANNELS, RGB_CHANNELS):
        raise InvalidInput(
            f"frames.shape: expected (T, H, W, C) or (H, W, C) with C in (1, 3), got {pred.shape}"
        )
    if target is None:
        raise InvalidInput("target_frames: required for task video")
    if target.ndim == FRAME_NDIM:
        target = target[None]
    if target.shape != pred.shape:
        raise InvalidInput(
            f"target_frames.shape: {target.shape} differs from frames.shape {pred.shape}"
        )
    check_unit_range(target, "target_frames")
    if previous is not None and previous.shape != pred.shape[1:]:
        raise InvalidInput(
            f"previous_frame.shape: expected {pred.shape[1:]} (one frame), got {previous.shape}"
        )
    config = spec.config()
    acts, sts = check_action_inputs(pred, previous, config, actions=actions, states=states, idm=idm)
    return VideoJob(pred, target, previous, config, actions=acts, states=sts)


#: Where the service's IDM is set, for messages.
IDM_SETTING = "idm_path (RLVR_REWARD_IDM_PATH, --idm-path)"


def _rows(arr: np.ndarray | None, name: str, n_frames: int) -> np.ndarray | None:
    """Finite float64 ``(T, columns)`` with one row per predicted frame; ``InvalidInput``."""
    if arr is None:
        return None
    if arr.ndim != MATRIX_NDIM:
        raise InvalidInput(
            f"{name}.shape: expected (T, columns), one row per frame, got {arr.shape}"
        )
    if arr.shape[0] != n_frames:
        raise InvalidInput(
            f"{name}.shape: {arr.shape[0]} rows for {n_frames} predicted frames "
            f"(frames.shape[0]); one per predicted frame"
        )
    out = arr.astype(np.float64)
    if not np.isfinite(out).all():
        raise InvalidInput(f"{name}.data: contains NaN or infinity")
    return out


def check_action_inputs(
    pred: np.ndarray,
    previous: np.ndarray | None,
    config: VideoRewardConfig,
    *,
    actions: np.ndarray | None,
    states: np.ndarray | None,
    idm: ReaderConfig | None,
) -> tuple[np.ndarray | None, np.ndarray | None]:
    """The checked ``(actions, states)`` of a video request (module docstring); ``InvalidInput``
    naming the field. ``pred`` is ``(T, H, W, C)``."""
    n, height, width, channels = pred.shape
    acts, sts = _rows(actions, "actions", n), _rows(states, "states", n)
    if sts is not None and sts.shape[1] != STATE_SIZE:
        raise InvalidInput(
            f"states.shape: expected (T, {STATE_SIZE}), ({', '.join(STATE_FIELDS)}) per frame, "
            f"got {sts.shape}"
        )
    if "idm" in config.weights:
        if idm is None:
            raise InvalidInput(
                "options.video.weights: 'idm' needs an inverse-dynamics model and this service "
                f"has none loaded; start it with {IDM_SETTING} set to a folder written by "
                "`rlvr-world video train-idm`"
            )
        if acts is None:
            raise InvalidInput(
                "actions: required with options.video.weights 'idm': the true action of each "
                f"predicted frame, shape (T, {idm.action_dims})"
            )
        if acts.shape[1] != idm.action_dims:
            raise InvalidInput(
                f"actions.shape: {acts.shape}; the service's IDM reads actions of dimension "
                f"{idm.action_dims}: expected ({n}, {idm.action_dims})"
            )
        if (height, width, channels) != (*idm.image_size, RGB_CHANNELS):
            h, w = idm.image_size
            raise InvalidInput(
                f"frames.shape: {pred.shape}; the service's IDM reads RGB frames of {h}x{w} "
                f"(T, {h}, {w}, 3) (its config.json image_size)"
            )
        if previous is None:
            raise InvalidInput(
                "previous_frame: required with options.video.weights 'idm' (the IDM reads the "
                "first step from it to the first predicted frame)"
            )
    if "state" in config.weights:
        if sts is None:
            raise InvalidInput(
                "states: required with options.video.weights 'state': the true PushT state after "
                f"each predicted frame, shape (T, {STATE_SIZE}) ({', '.join(STATE_FIELDS)})"
            )
        if channels != RGB_CHANNELS:
            raise InvalidInput(
                f"frames.shape: {pred.shape}; the state term segments RGB frames (C = 3)"
            )
    return acts, sts


# ---------------------------------------------------------------- text


def text_job(  # noqa: PLR0917 (the verl fields, in verl's order)
    task: str,
    text: str,
    ground_truth: str,
    extra_info: Mapping[str, Any] | None,
    variant: str,
    reward_type: str,
) -> TextJob:
    """Validate a text-task request through the core's request model."""
    row = {
        "data_source": task,
        "solution_str": text,
        "ground_truth": ground_truth,
        "extra_info": dict(extra_info) if extra_info is not None else None,
        "variant": variant or "strict",
        "reward_type": reward_type or None,  # the task's default
    }
    try:
        req = TextScoreRequest.model_validate(row)
    except ValidationError as exc:
        raise InvalidInput(describe_validation_error(exc)) from None
    return TextJob(task=task, request=req)


def parse_extra_info(raw: str, name: str = "extra_info_json") -> dict[str, Any] | None:
    """JSON object text -> dict; empty -> None. Depth, size and text limits:
    ``rlvr_world.bounded_json`` (a hostile nesting is refused, not a ``RecursionError``)."""
    if not raw:
        return None
    value = loads_bounded(raw, name)
    if value is not None and not isinstance(value, dict):
        raise InvalidInput(f"{name}: must be a JSON object, got {type(value).__name__}")
    return value


# ---------------------------------------------------------------- proto


def task_name(value: int) -> str:
    """Proto ``Task`` -> task name; ``InvalidInput`` for unspecified or unknown values."""
    try:
        return TASK_FROM_PROTO[value]
    except KeyError:
        raise InvalidInput(
            f"task: unknown value {value}; expected TASK_TEXT_GAME, TASK_WEB or TASK_VIDEO"
        ) from None


def _tensor(msg: common_pb2.Tensor, name: str) -> np.ndarray:
    return decode_tensor(msg.data, list(msg.shape), msg.dtype, name)


def video_spec_from_proto(opts: reward_pb2.VideoOptions) -> VideoSpec:
    """The video options of a request; unset (zero or empty) fields become None: the defaults."""
    return VideoSpec(
        weights=dict(opts.weights),
        aggregation=opts.aggregation or None,
        gamma=opts.gamma or None,
        repetition_penalty=opts.repetition_penalty or None,
        repetition_threshold=opts.repetition_threshold or None,
        lpips_net=opts.lpips_net or None,
        patch_grid=tuple(opts.patch_grid) or None,
    )


def _optional(req: reward_pb2.ScoreRequest, name: str) -> np.ndarray | None:
    """The request's ``actions`` or ``states`` as an array of the sent dtype, or None."""
    return codec.tensor_array(getattr(req, name), name) if req.HasField(name) else None


def job_from_proto(req: reward_pb2.ScoreRequest, idm: ReaderConfig | None = None) -> Job:
    """A proto ``ScoreRequest`` -> job; ``InvalidInput`` naming the proto field otherwise.

    ``idm``: the config of the service's IDM (None: the service has none; a video request that
    weighs ``idm`` is refused). Text requests become a ``RawTextJob``: their ``extra_info_json``
    and options are checked by the scoring process (``RawTextJob.checked``), the rest here."""
    task = task_name(req.task)
    kind = req.WhichOneof("prediction")
    if task == "video":
        if kind != "frames":
            raise InvalidInput("frames: required for task video (the predicted frames)")
        pred = _tensor(req.frames, "frames")
        target = (
            _tensor(req.target_frames, "target_frames") if req.HasField("target_frames") else None
        )
        prev = (
            _tensor(req.previous_frame, "previous_frame")
            if req.HasField("previous_frame")
            else None
        )
        return frames_job(
            pred,
            target,
            prev,
            video_spec_from_proto(req.options.video),
            actions=_optional(req, "actions"),
            states=_optional(req, "states"),
            idm=idm,
        )
    if kind == "frames":
        raise InvalidInput(f"text: task {task} takes text, not frames")
    for name in ("actions", "states"):
        if req.HasField(name):
            raise InvalidInput(f"{name}: only task video takes {name}, not {task}")
    opts = req.options
    return RawTextJob(
        task, req.text, req.ground_truth, req.extra_info_json, opts.variant, opts.reward_type
    )


def result_to_proto(request_id: str, result: RewardResult) -> reward_pb2.ScoreResponse:
    """The ``ScoreResponse`` of ``result`` for the request ``request_id``."""
    return reward_pb2.ScoreResponse(
        request_id=request_id,
        reward=result.reward,
        status=STATUS_TO_PROTO[result.status],
        metrics=result.metrics,  # upb converts each value as float() does
        message=result.message,
        patch_rewards=result.patch_rewards,
    )


def result_from_proto(resp: reward_pb2.ScoreResponse) -> RewardResult:
    """The result a ``ScoreResponse`` carries; an unknown status reads as ``error``."""
    status = STATUS_FROM_PROTO.get(resp.status, Status.ERROR)
    return RewardResult(
        reward=resp.reward,
        status=status,
        metrics=dict(resp.metrics),
        message=resp.message,
        patch_rewards=tuple(resp.patch_rewards),
    )
