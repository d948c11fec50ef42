"""Video frame rewards: L1, MSE, PSNR, SSIM, perceptual and action-following terms, weighted.

What it does: validates predicted and ground-truth frames, computes per-frame losses (vectorised
over time), combines them with the weights of a ``VideoRewardConfig``, adds an optional repetition
penalty and aggregates over frames with ``mean | last | discount``::

    loss_t = sum_m w_m * loss_m,t + repetition_penalty * [frame t copies frame t-1]
    reward = -aggregate_t(loss_t)

with ``loss_l1 = L1``, ``loss_mse = MSE``, ``loss_ssim = 1 - SSIM``, ``loss_psnr = -PSNR`` and
``loss_lpips``/``loss_stlpips`` the perceptual distance, ``loss_idm`` the normalised action error
an inverse-dynamics model reads from the frames and ``loss_state`` the normalised error of the
PushT agent and block centres segmented from them (``rlvr_world.rewards.video_action``). The
default config is the paper's
``-(MAE + LPIPS)`` (single step) and ``-(1/T) sum_t (MAE_t + LPIPS_t)`` (multi-step, README's
``reward_fn=mae``, ``msp_reward_aggregate=mean``).

Choices (see docs/reference.md#video-reward):

* pixels are in [0, 1]; ``uint8`` frames are divided by 255. Predictions are clamped to [0, 1] as in
  the reference; targets must already lie in [0, 1] (up to ``VALUE_TOLERANCE``).
* ``discount`` aggregation is ``sum_t gamma^t loss_t / sum_t gamma^t`` (the reference hard-codes
  gamma = 0.9, our default).
* PSNR uses data range 1 and is capped at ``PSNR_CAP_DB`` (100 dB) so identical frames stay finite.
* SSIM is the standard Gaussian-window SSIM (Wang et al. 2004; window 11, sigma 1.5, K1 = 0.01,
  K2 = 0.03, data range 1, population statistics, "valid" windows only, i.e. no padding), averaged
  over the map and the channels, as piqa's SSIM used by the reference evaluation. It needs frames
  of at least 11×11; smaller frames get no ``ssim`` metric and cannot use an ``ssim`` weight.
* With ``patch_grid`` (rows, cols) the result also carries ``patch_rewards``, one per cell of
  each frame: L1 and MSE per patch, the perceptual distances per patch where the scorer has a
  spatial map (``patch_distances``: LPIPS's spatial output averaged over the cell), every other
  term the frame's (``idm`` and ``state`` are frame-level: each patch gets the frame's value);
  they average to the frame's reward. Not in the reference (our per-token
  credit, ``rl.token_credit``).
* The repetition penalty is not in the reference (which only resamples repeats at evaluation);
  its default weight is 0.

What it does not do: no torch. Perceptual distances come from a ``PerceptualScorer`` the caller
passes in (``rlvr_world.rewards.perceptual`` builds LPIPS and ST-LPIPS ones), read actions from an
``ActionReader`` (``rlvr_world.video.idm`` is one). ``score_video`` never
raises for bad frames: it returns status ``invalid_input``; ``validate_video`` raises
``InvalidInput`` for service boundaries. A wrongly wired config (a perceptual weight without its
scorer, an ``idm`` weight without its reader) raises ``InvalidInput``, since no prediction can
be scored with it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Protocol

import numpy as np
from numpy.typing import NDArray

from rlvr_world.rewards.checks import check_pixel_dtype
from rlvr_world.rewards.patches import check_grid, check_grid_fits, patch_rewards
from rlvr_world.rewards.types import InvalidInput, RewardResult, Status, failed
from rlvr_world.rewards.video_action import (
    ACTION_TERMS,
    ActionReader,
    action_terms,
    requested_terms,
)
from rlvr_world.shapes import FRAME_NDIM

FloatArray = NDArray[np.float64]

#: Metric names a weight may use.
METRIC_NAMES = ("l1", "mse", "psnr", "ssim", "lpips", "stlpips", *ACTION_TERMS)
#: Metrics that need a ``PerceptualScorer``.
PERCEPTUAL_METRICS = ("lpips", "stlpips")
AGGREGATIONS = ("mean", "last", "discount")
LPIPS_NETS = ("vgg", "alex")
#: PSNR (dB) reported for identical frames, and the largest PSNR ever reported.
PSNR_CAP_DB = 100.0
#: How far float targets may stray outside [0, 1] (float rounding) before they are rejected.
VALUE_TOLERANCE = 1e-6
SSIM_WINDOW = 11
SSIM_SIGMA = 1.5
SSIM_K1 = 0.01
SSIM_K2 = 0.03


class PerceptualScorer(Protocol):
    """A batched perceptual distance between frames.

    ``__call__`` takes two float arrays ``(N, H, W, C)`` with values in [0, 1] and returns ``(N,)``
    distances (0 for identical frames, larger is more different). A scorer may also have
    ``patch_distances(pred, target, grid)`` returning those distances and ``(N, rows, cols)``
    per-cell values of its spatial map; ``score_video`` uses it for ``patch_rewards``.
    """

    @property
    def metric(self) -> str:
        """``"lpips"`` or ``"stlpips"``: the weight name this scorer serves."""
        ...

    @property
    def net(self) -> str:
        """The backbone, ``"vgg"`` or ``"alex"``."""
        ...

    def __call__(self, pred: FloatArray, target: FloatArray) -> FloatArray: ...


def _default_weights() -> Mapping[str, float]:
    return {"l1": 1.0, "lpips": 1.0}


@dataclass(frozen=True)
class VideoRewardConfig:
    """How frame losses become one reward. The defaults are the paper's ``-(MAE + LPIPS)``.

    ``weights``: metric name (``METRIC_NAMES``) -> non-negative weight, at least one positive.
    ``idm`` and ``state`` named with weight 0 are measured (their metrics reported) but add
    nothing to the loss; unnamed, they do not run.
    ``aggregation``: ``mean`` over frames, the ``last`` frame, or ``discount`` (normalised
    ``gamma^t`` weights; ``gamma`` in (0, 1]). ``repetition_penalty`` (>= 0) is added to the loss of
    each predicted frame whose mean absolute difference to the frame before it (the given
    ``previous_frame`` for the first one) is at most ``repetition_threshold``. ``lpips_net`` is the
    backbone the perceptual scorers must use. ``patch_grid`` ``(rows, cols)``: also compute the
    reward of each cell of that grid (``patch_rewards``); the frames' height and width must be
    multiples of it.
    """

    weights: Mapping[str, float] = field(default_factory=_default_weights)
    aggregation: str = "mean"
    gamma: float = 0.9
    repetition_penalty: float = 0.0
    repetition_threshold: float = 1e-3
    lpips_net: str = "vgg"
    patch_grid: tuple[int, int] | None = None

    def __post_init__(self) -> None:
        _check_weights(self.weights)
        if self.patch_grid is not None:
            object.__setattr__(self, "patch_grid", check_grid(self.patch_grid))
        object.__setattr__(
            self, "weights", MappingProxyType({k: float(v) for k, v in self.weights.items()})
        )
        if self.aggregation not in AGGREGATIONS:
            raise InvalidInput(
                f"aggregation: {self.aggregation!r} is not one of {', '.join(AGGREGATIONS)}"
            )
        if not (math.isfinite(self.gamma) and 0.0 < self.gamma <= 1.0):
            raise InvalidInput(f"gamma: must lie in (0, 1], got {self.gamma!r}")
        for name in ("repetition_penalty", "repetition_threshold"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0.0):
                raise InvalidInput(f"{name}: must be a finite number >= 0, got {value!r}")
        if self.lpips_net not in LPIPS_NETS:
            raise InvalidInput(f"lpips_net: {self.lpips_net!r} is not one of vgg, alex")

    def active(self) -> tuple[str, ...]:
        """Metric names with a positive weight, in ``METRIC_NAMES`` order."""
        return tuple(m for m in METRIC_NAMES if self.weights.get(m, 0.0) > 0.0)


def _check_weights(weights: Mapping[str, float]) -> None:
    if not isinstance(weights, Mapping):
        raise InvalidInput(f"weights: expected a mapping of metric name to weight, got {weights!r}")
    for name, value in weights.items():
        if name not in METRIC_NAMES:
            raise InvalidInput(
                f"weights: unknown metric {name!r}; known: {', '.join(METRIC_NAMES)}"
            )
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise InvalidInput(f"weights[{name!r}]: expected a number, got {value!r}")
        if not (math.isfinite(value) and value >= 0.0):
            raise InvalidInput(f"weights[{name!r}]: must be a finite number >= 0, got {value!r}")
    if not any(v > 0.0 for v in weights.values()):
        raise InvalidInput("weights: at least one metric needs a positive weight")


# --------------------------------------------------------------------------------------------
# Validation


def as_frames(x: object, name: str, *, clamp: bool) -> FloatArray:
    """``x`` as float64 frames ``(T, H, W, C)`` in [0, 1]; ``InvalidInput`` naming ``name``.

    ``(H, W, C)`` becomes ``T = 1``. ``uint8`` is divided by 255; float values outside [0, 1] are
    clamped when ``clamp`` (predictions) and rejected otherwise (beyond ``VALUE_TOLERANCE``).
    """
    if not isinstance(x, np.ndarray):
        raise InvalidInput(f"{name}: expected a numpy array, got {type(x).__name__}")
    if x.ndim not in (3, 4):
        raise InvalidInput(f"{name}: expected shape (H, W, C) or (T, H, W, C), got {x.shape}")
    if x.size == 0:
        raise InvalidInput(f"{name}: empty array of shape {x.shape}")
    if x.shape[-1] not in (1, 3):
        raise InvalidInput(f"{name}: expected 1 or 3 channels (last axis), got shape {x.shape}")
    x = check_pixel_dtype(x, name)
    if x.dtype == np.uint8:
        out = x.astype(np.float64) / 255.0
    else:
        out = x.astype(np.float64)
        lo, hi = float(out.min()), float(out.max())
        if not clamp and (lo < -VALUE_TOLERANCE or hi > 1.0 + VALUE_TOLERANCE):
            raise InvalidInput(
                f"{name}: float values must lie in [0, 1], found [{lo:.6g}, {hi:.6g}]"
            )
        if lo < 0.0 or hi > 1.0:
            out = np.clip(out, 0.0, 1.0)
    return out[None] if out.ndim == FRAME_NDIM else out


def validate_video(
    pred: object, target: object, previous_frame: object | None = None
) -> tuple[FloatArray, FloatArray, FloatArray | None]:
    """Checked ``(pred, target, previous_frame)`` as float64 ``(T, H, W, C)`` / ``(H, W, C)``.

    Raises ``InvalidInput`` with a message naming the argument. Predictions and the previous frame
    (a decoded frame too) are clamped to [0, 1]; the target must lie in [0, 1].
    """
    p = as_frames(pred, "prediction", clamp=True)
    t = as_frames(target, "target", clamp=False)
    if p.shape != t.shape:
        raise InvalidInput(
            f"prediction: shape {p.shape} (as (T, H, W, C)) differs from target shape {t.shape}"
        )
    if previous_frame is None:
        return p, t, None
    if not isinstance(previous_frame, np.ndarray) or previous_frame.ndim != FRAME_NDIM:
        shape = getattr(previous_frame, "shape", type(previous_frame).__name__)
        raise InvalidInput(f"previous_frame: expected one frame (H, W, C), got {shape}")
    prev = as_frames(previous_frame, "previous_frame", clamp=True)[0]
    if prev.shape != p.shape[1:]:
        raise InvalidInput(
            f"previous_frame: shape {prev.shape} differs from the frame shape {p.shape[1:]}"
        )
    return p, t, prev


# --------------------------------------------------------------------------------------------
# Per-frame metrics (inputs float (T, H, W, C) in [0, 1]; outputs (T,))


def l1_per_frame(pred: FloatArray, target: FloatArray) -> FloatArray:
    """Mean absolute error over H, W and C for each frame."""
    return np.asarray(np.abs(pred - target).mean(axis=(1, 2, 3)), dtype=np.float64)


def mse_per_frame(pred: FloatArray, target: FloatArray) -> FloatArray:
    """Mean squared error over H, W and C for each frame."""
    return np.asarray(np.square(pred - target).mean(axis=(1, 2, 3)), dtype=np.float64)


def psnr_from_mse(mse: FloatArray) -> FloatArray:
    """PSNR in dB for data range 1, capped at ``PSNR_CAP_DB`` (identical frames give the cap)."""
    floor = 10.0 ** (-PSNR_CAP_DB / 10.0)
    return np.asarray(10.0 * np.log10(1.0 / np.maximum(mse, floor)), dtype=np.float64)


def gaussian_window(size: int = SSIM_WINDOW, sigma: float = SSIM_SIGMA) -> FloatArray:
    """The normalised 1-D Gaussian of SSIM (the 2-D window is its outer product)."""
    x = np.arange(size, dtype=np.float64) - (size - 1) / 2.0
    g = np.exp(-(x**2) / (2.0 * sigma**2))
    return np.asarray(g / g.sum(), dtype=np.float64)


def _filter_valid(x: FloatArray, kernel: FloatArray, axes: tuple[int, int]) -> FloatArray:
    """Separable correlation with ``kernel`` over ``axes``, keeping only full ("valid") windows."""
    from scipy import ndimage  # here: a text-only reward service never pays its import (0.4 s)

    r = (len(kernel) - 1) // 2
    for axis in axes:
        x = ndimage.correlate1d(x, kernel, axis=axis, mode="constant")
        x = np.take(x, np.arange(r, x.shape[axis] - r), axis=axis)
    return x


def ssim_per_frame(pred: FloatArray, target: FloatArray) -> FloatArray:
    """Gaussian-window SSIM of each frame, averaged over the valid map and the channels.

    Needs H, W >= ``SSIM_WINDOW``. Data range 1, so ``C1 = K1^2`` and ``C2 = K2^2``.
    """
    if min(pred.shape[1], pred.shape[2]) < SSIM_WINDOW:
        raise InvalidInput(f"ssim needs frames of at least {SSIM_WINDOW}x{SSIM_WINDOW}")
    c1, c2 = SSIM_K1**2, SSIM_K2**2
    stack = np.stack([pred, target, pred * pred, target * target, pred * target])
    mu_x, mu_y, e_xx, e_yy, e_xy = _filter_valid(stack, gaussian_window(), axes=(2, 3))
    var_x = e_xx - mu_x * mu_x
    var_y = e_yy - mu_y * mu_y
    cov = e_xy - mu_x * mu_y
    num = (2.0 * mu_x * mu_y + c1) * (2.0 * cov + c2)
    den = (mu_x * mu_x + mu_y * mu_y + c1) * (var_x + var_y + c2)
    return np.asarray((num / den).mean(axis=(1, 2, 3)), dtype=np.float64)


def repeated_frames(
    pred: FloatArray, previous_frame: FloatArray | None, threshold: float
) -> NDArray[np.bool_]:
    """``(T,)`` flags: frame t copies frame t-1 (``previous_frame`` for t = 0, else never)."""
    flags = np.zeros(pred.shape[0], dtype=bool)
    if pred.shape[0] > 1:
        flags[1:] = np.abs(pred[1:] - pred[:-1]).mean(axis=(1, 2, 3)) <= threshold
    if previous_frame is not None:
        flags[0] = float(np.abs(pred[0] - previous_frame).mean()) <= threshold
    return flags


def aggregate(loss: FloatArray, aggregation: str, gamma: float) -> float:
    """Combine per-frame losses: ``mean``, ``last``, or ``sum gamma^t l_t / sum gamma^t``."""
    if aggregation == "mean":
        return float(loss.mean())
    if aggregation == "last":
        return float(loss[-1])
    if aggregation == "discount":
        w = gamma ** np.arange(loss.shape[0], dtype=np.float64)
        return float((w * loss).sum() / w.sum())
    raise InvalidInput(f"aggregation: {aggregation!r} is not one of {', '.join(AGGREGATIONS)}")


# --------------------------------------------------------------------------------------------
# Scoring


def _perceptual_scorers(
    config: VideoRewardConfig,
    perceptual: PerceptualScorer | Mapping[str, PerceptualScorer] | None,
) -> dict[str, PerceptualScorer]:
    """The scorers to run, by metric; ``InvalidInput`` when a weighted one is missing or wrong."""
    given: list[PerceptualScorer]
    if perceptual is None:
        given = []
    elif isinstance(perceptual, Mapping):
        given = list(perceptual.values())
    else:
        given = [perceptual]
    scorers: dict[str, PerceptualScorer] = {}
    for scorer in given:
        if scorer.metric not in PERCEPTUAL_METRICS:
            raise InvalidInput(f"perceptual: scorer metric {scorer.metric!r} is not lpips/stlpips")
        if scorer.net != config.lpips_net:
            raise InvalidInput(
                f"perceptual: the {scorer.metric} scorer uses net {scorer.net!r} but the config "
                f"asks for lpips_net={config.lpips_net!r}"
            )
        scorers[scorer.metric] = scorer
    for name in config.active():
        if name in PERCEPTUAL_METRICS and name not in scorers:
            raise InvalidInput(
                f"weights[{name!r}] > 0 needs a {name} PerceptualScorer (given: "
                f"{', '.join(scorers) or 'none'}); build one with "
                "rlvr_world.rewards.perceptual.make_perceptual. It is never silently 0."
            )
    return scorers


def frame_metrics(
    pred: FloatArray, target: FloatArray, scorers: Mapping[str, PerceptualScorer]
) -> dict[str, FloatArray]:
    """Raw per-frame metric values ``(T,)``: l1, mse, psnr, ssim (frames >= 11x11), perceptual."""
    return frame_metrics_and_cells(pred, target, scorers, None)[0]


def frame_metrics_and_cells(
    pred: FloatArray,
    target: FloatArray,
    scorers: Mapping[str, PerceptualScorer],
    grid: tuple[int, int] | None,
) -> tuple[dict[str, FloatArray], dict[str, FloatArray]]:
    """``frame_metrics``, and with a ``grid`` each perceptual metric's per-cell values
    ``(T, rows, cols)`` from the scorers that have ``patch_distances`` (one pass for both)."""
    mse = mse_per_frame(pred, target)
    out = {"l1": l1_per_frame(pred, target), "mse": mse, "psnr": psnr_from_mse(mse)}
    if min(pred.shape[1], pred.shape[2]) >= SSIM_WINDOW:
        out["ssim"] = ssim_per_frame(pred, target)
    cells: dict[str, FloatArray] = {}
    for name, scorer in scorers.items():
        by_patch = None if grid is None else getattr(scorer, "patch_distances", None)
        if by_patch is None or grid is None:
            values = np.asarray(scorer(pred, target), dtype=np.float64)
        else:
            raw, raw_cells = by_patch(pred, target, grid)
            values = np.asarray(raw, dtype=np.float64)
            cells[name] = np.asarray(raw_cells, dtype=np.float64)
            if cells[name].shape != (pred.shape[0], *grid) or not np.isfinite(cells[name]).all():
                raise ArithmeticError(
                    f"{name} scorer returned patch values of shape {cells[name].shape} for "
                    f"{pred.shape[0]} frames and a {grid} grid; expected that many finite values"
                )
        if values.shape != (pred.shape[0],) or not np.isfinite(values).all():
            raise ArithmeticError(
                f"{name} scorer returned {values!r} for {pred.shape[0]} frames; "
                "expected that many finite distances"
            )
        out[name] = values
    return out, cells


def metric_losses(
    metrics: Mapping[str, FloatArray], names: tuple[str, ...]
) -> dict[str, FloatArray]:
    """Per-frame losses for ``names``: the metric, ``1 - ssim``, or ``-psnr``. The action terms
    are not frame metrics (``score_video`` computes them from actions and states): naming one
    without its values raises ``InvalidInput``."""
    losses: dict[str, FloatArray] = {}
    for name in names:
        if name in ACTION_TERMS and name not in metrics:
            raise InvalidInput(
                f"weights[{name!r}]: the {name} term needs true actions or states; score it with "
                "score_video(..., actions=, states=, idm=)"
            )
        if name == "ssim":
            losses[name] = 1.0 - metrics[name]
        elif name == "psnr":
            losses[name] = -metrics[name]
        else:
            losses[name] = metrics[name]
    return losses


def score_video(
    pred: object,
    target: object,
    config: VideoRewardConfig,
    *,
    previous_frame: object | None = None,
    perceptual: PerceptualScorer | Mapping[str, PerceptualScorer] | None = None,
    actions: object | None = None,
    states: object | None = None,
    idm: ActionReader | None = None,
) -> RewardResult:
    """Score predicted frames against the ground truth (see the module docstring for the formula).

    ``actions`` ``(T, D)``: the true action of each predicted frame (the ``idm`` term, read by
    ``idm``); ``states`` ``(T, 5)``: the true PushT state after each predicted frame (the
    ``state`` term); both used only when the config names the term. Bad frames, actions or
    states give status ``invalid_input`` with the reason; a perceptual scorer or reader returning
    non-finite values gives ``error``. Raises ``InvalidInput`` only when ``perceptual`` or ``idm``
    does not match ``config`` (a wiring error). Metrics: means over frames of l1, mse, psnr, ssim
    (when the frames are >= 11x11), lpips/stlpips (when a scorer is given) and the action terms'
    (``rlvr_world.rewards.video_action``), ``repetition_rate`` (copied frames over frames that
    had a predecessor to compare with) and ``n_frames``.
    """
    scorers = _perceptual_scorers(config, perceptual)
    terms = requested_terms(config.weights)
    if "idm" in terms and idm is None:
        raise InvalidInput(
            "weights['idm'] needs an ActionReader (an inverse-dynamics model: "
            "rlvr_world.video.idm.load_idm). It is never silently 0."
        )
    try:
        p, t, prev = validate_video(pred, target, previous_frame)
        if "ssim" in config.active() and min(p.shape[1], p.shape[2]) < SSIM_WINDOW:
            raise InvalidInput(
                f"prediction: an ssim weight needs frames of at least {SSIM_WINDOW}x{SSIM_WINDOW}, "
                f"got {p.shape[1]}x{p.shape[2]}"
            )
        grid = config.patch_grid
        if grid is not None:
            check_grid_fits(p.shape[1], p.shape[2], grid)
    except InvalidInput as exc:
        return failed(Status.INVALID_INPUT, str(exc))
    try:
        metrics, cells = frame_metrics_and_cells(p, t, scorers, grid)
        by_action = action_terms(terms, p, prev, actions=actions, states=states, reader=idm)
    except InvalidInput as exc:  # frames a backbone or the IDM cannot take, bad actions/states
        return failed(Status.INVALID_INPUT, str(exc))
    except ArithmeticError as exc:
        return failed(Status.ERROR, str(exc))
    active = config.active()
    losses = metric_losses(metrics, tuple(m for m in active if m not in ACTION_TERMS))
    losses.update({m: v for m, v in by_action.losses.items() if m in active})
    repeats = repeated_frames(p, prev, config.repetition_threshold)
    loss_t = config.repetition_penalty * repeats.astype(np.float64)
    for name, values in losses.items():
        loss_t = loss_t + config.weights[name] * values
    reward = -aggregate(loss_t, config.aggregation, config.gamma)
    if not math.isfinite(reward):
        return failed(Status.ERROR, f"reward overflowed to {reward!r}; check the weights")
    checked = p.shape[0] - 1 + (prev is not None)
    report = {name: float(values.mean()) for name, values in metrics.items()}
    report.update(by_action.metrics)
    report["repetition_rate"] = float(repeats.sum()) / checked if checked else 0.0
    report["n_frames"] = float(p.shape[0])
    patches: tuple[float, ...] = ()
    if grid is not None:
        by_patch = patch_rewards(p, t, config.weights, loss_t, grid=grid, perceptual_cells=cells)
        patches = tuple(by_patch.ravel())
    return RewardResult(reward=reward, status=Status.OK, metrics=report, patch_rewards=patches)
