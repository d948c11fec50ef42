"""Sampling-based planners over action sequences, independent of any model.

A planner sees only ``cost(actions (N, H, D)) -> (N,)``; whatever predicts the outcome of a
candidate (a world model, the simulator) lives behind that function (``rlvr_world.mpc.dynamics``).

``plan`` runs one of two planners, as ``PlannerConfig.kind`` says:

* ``cem``: the cross-entropy method. Sample ``candidates`` sequences from a diagonal
  Gaussian, keep the ``elites`` cheapest, refit mean and standard deviation to them, repeat for
  ``iterations``; the result is the cheapest sequence sampled in any iteration (its predicted
  frames were already computed, so executing it needs no extra rollout).
* ``mppi``: model-predictive path integral: the same sampling, the mean replaced by the
  softmax(-cost / temperature)-weighted average of the samples; the result is again the
  cheapest sample (same reason).
* ``goal_cost``: the pixel L1 distance of the last predicted frame to the goal frame.

Samples are clipped to ``[low, high]``; every draw comes from the caller's generator. What it
does not do: no rollouts, no execution, no timing.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
from numpy.typing import NDArray

Actions = NDArray[np.float64]
CostFn = Callable[[Actions], NDArray[np.float64]]
#: ndim of a batch of predicted frame sequences ``(N, H, h, w, 3)``.
_ROLLOUT_NDIM = 5


@dataclass(frozen=True)
class PlannerConfig:
    """Sizes of one planning call (``candidates`` x ``iterations`` rollouts of ``horizon``)."""

    kind: Literal["cem", "mppi"] = "cem"
    candidates: int = 16
    horizon: int = 3
    iterations: int = 2
    elites: int = 4
    init_std: float = 60.0
    min_std: float = 5.0
    temperature: float = 0.02
    low: float = 0.0
    high: float = 512.0

    def __post_init__(self) -> None:
        if self.candidates < 1 or self.horizon < 1 or self.iterations < 1:
            raise ValueError("planner: candidates, horizon and iterations must be >= 1")
        if not 1 <= self.elites <= self.candidates:
            raise ValueError(f"planner: elites must lie in [1, candidates], got {self.elites}")
        if self.init_std <= 0 or self.min_std < 0 or self.temperature <= 0:
            raise ValueError("planner: init_std and temperature must be > 0, min_std >= 0")
        if self.low >= self.high:
            raise ValueError(f"planner: low {self.low} must be below high {self.high}")


@dataclass(frozen=True)
class PlanResult:
    """The chosen sequence ``(H, D)``, its cost, its index in the last batch it came from, and
    the best cost after each iteration."""

    actions: Actions
    cost: float
    iteration: int
    index: int
    history: tuple[float, ...]


def _check_mean(mean: NDArray[Any], cfg: PlannerConfig) -> Actions:
    arr = np.asarray(mean, dtype=np.float64)
    if arr.ndim != 2 or arr.shape[0] != cfg.horizon or not np.isfinite(arr).all():  # noqa: PLR2004
        raise ValueError(f"mean: expected finite ({cfg.horizon}, D), got {arr.shape}")
    return arr


def _costs(cost: CostFn, samples: Actions) -> NDArray[np.float64]:
    out = np.asarray(cost(samples), dtype=np.float64)
    if out.shape != (samples.shape[0],):
        raise ValueError(f"cost: expected ({samples.shape[0]},) costs, got {out.shape}")
    # a non-finite cost (e.g. a prediction that failed) never wins
    return np.where(np.isfinite(out), out, np.inf)


def _plan(
    cost: CostFn, mean0: NDArray[Any], cfg: PlannerConfig, rng: np.random.Generator
) -> PlanResult:
    mean = _check_mean(mean0, cfg)
    std = np.full_like(mean, cfg.init_std)
    best: tuple[float, int, int, Actions] | None = None
    history = []
    for it in range(cfg.iterations):
        noise = rng.normal(size=(cfg.candidates, *mean.shape))
        samples = np.clip(mean + std * noise, cfg.low, cfg.high)
        costs = _costs(cost, samples)
        i = int(np.argmin(costs))
        if best is None or costs[i] < best[0]:
            best = (float(costs[i]), it, i, samples[i].copy())
        history.append(best[0])
        finite = np.isfinite(costs)
        if not finite.any():
            continue
        if cfg.kind == "cem":
            order = np.argsort(np.where(finite, costs, np.inf), kind="stable")[: cfg.elites]
            elite = samples[order]
            mean, std = elite.mean(axis=0), np.maximum(elite.std(axis=0), cfg.min_std)
        else:
            c = costs[finite]
            w = np.exp(-(c - c.min()) / cfg.temperature)
            w /= w.sum()
            kept = samples[finite]
            mean = np.tensordot(w, kept, axes=1)
            spread = np.sqrt(np.tensordot(w, (kept - mean) ** 2, axes=1))
            std = np.maximum(spread, cfg.min_std)
    assert best is not None  # iterations >= 1
    return PlanResult(best[3], best[0], best[1], best[2], tuple(history))


def plan(
    cost: CostFn, mean0: NDArray[Any], cfg: PlannerConfig, rng: np.random.Generator
) -> PlanResult:
    """The best action sequence from the mean ``mean0`` ``(H, D)``, by the cross-entropy method
    or MPPI as ``cfg.kind`` says (module docstring)."""
    return _plan(cost, mean0, cfg, rng)


def random_sequence(mean0: NDArray[Any], cfg: PlannerConfig, rng: np.random.Generator) -> Actions:
    """One sequence from the planners' initial distribution: the random-actions baseline."""
    mean = _check_mean(mean0, cfg)
    return np.clip(mean + cfg.init_std * rng.normal(size=mean.shape), cfg.low, cfg.high)


def goal_cost(predicted: NDArray[Any], goal: NDArray[Any]) -> NDArray[np.float64]:
    """Mean absolute pixel difference (RGB in [0, 1]) between the last frame of each predicted
    sequence ``(N, H, h, w, 3)`` and the goal frame ``(h, w, 3)`` (uint8, or float in [0, 1])."""
    pred = np.asarray(predicted)
    target = np.asarray(goal)
    if pred.ndim != _ROLLOUT_NDIM or pred.shape[2:] != target.shape:
        raise ValueError(
            f"goal_cost: predicted {pred.shape} must be (N, H, *goal) for goal {target.shape}"
        )
    last = _unit(pred[:, -1])
    return np.asarray(np.abs(last - _unit(target)[None]).mean(axis=(1, 2, 3)), dtype=np.float64)


def _unit(frames: NDArray[Any]) -> NDArray[np.float64]:
    if frames.dtype == np.uint8:
        return frames.astype(np.float64) / 255.0
    return frames.astype(np.float64)
