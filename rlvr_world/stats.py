"""Comparisons of two models on the same held-out items: paired bootstrap intervals and headlines.

Every claim that training helps compares the trained model with a *control* (continued MLE from
the same start, same budget) on the *same* items, so the natural unit is the per-item difference.
``paired_bootstrap`` resamples items (not answers) with replacement and reports the mean difference
with a percentile interval. With several seeds, an item's score is first averaged over the seeds
(each seed evaluates the same items), so the interval covers item sampling; the seed-to-seed
spread is reported beside it by the caller, not folded in.

``Headline`` is the ``headline`` object of a run's ``summary.json``
(docs/architecture.md#experiments): the metric, n, seeds, the start / control / RLVR means, the
95% interval of RLVR - control, and whether that interval excludes 0. Pure numpy; no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from rlvr_world.shapes import MATRIX_NDIM

#: One score per item, or one row of item scores per seed.
Scores = Sequence[float] | Sequence[Sequence[float]] | np.ndarray

#: Bootstrap resamples: the percentile ends of a 95% interval move by < 0.002 between seeds here.
DEFAULT_RESAMPLES = 10_000


@dataclass(frozen=True)
class Interval:
    """Mean of ``a - b`` over items and its bootstrap percentile interval."""

    mean: float
    low: float
    high: float
    n: int

    @property
    def excludes_zero(self) -> bool:
        """Whether the interval lies wholly above or below 0."""
        return self.low > 0.0 or self.high < 0.0

    def as_list(self) -> list[float]:
        """``[low, high]``."""
        return [self.low, self.high]


def _as_items(scores: Scores) -> np.ndarray:
    """(n_items,) scores; a (n_seeds, n_items) table is averaged over seeds first."""
    arr = np.asarray(scores, dtype=np.float64)
    if arr.ndim == MATRIX_NDIM:
        arr = arr.mean(axis=0)
    if arr.ndim != 1:
        raise ValueError(f"scores must be (items,) or (seeds, items), got shape {arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise ValueError("scores must be finite")
    return arr


def paired_bootstrap(
    a: Scores,
    b: Scores,
    *,
    resamples: int = DEFAULT_RESAMPLES,
    confidence: float = 0.95,
    seed: int = 0,
) -> Interval:
    """Mean of ``a - b`` over paired items with a percentile bootstrap interval.

    ``a`` and ``b`` hold one score per item (same order), or one row per seed. ``ValueError``
    when the shapes differ, there are no items, or ``confidence`` is not in (0, 1)."""
    x, y = _as_items(a), _as_items(b)
    if x.shape != y.shape:
        raise ValueError(f"paired scores differ in shape: {x.shape} vs {y.shape}")
    if x.size == 0:
        raise ValueError("no items to compare")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    if resamples < 1:
        raise ValueError(f"resamples must be >= 1, got {resamples}")
    diff = x - y
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, diff.size, size=(resamples, diff.size))
    means = diff[idx].mean(axis=1)
    tail = (1.0 - confidence) / 2.0
    low, high = np.quantile(means, [tail, 1.0 - tail])
    return Interval(float(diff.mean()), float(low), float(high), int(diff.size))


@dataclass(frozen=True)
class Headline:
    """The ``headline`` of a run's summary (docs/architecture.md#experiments)."""

    metric: str
    n: int
    seeds: list[int]
    start: float
    control: float
    rlvr: float
    ci95: list[float]
    ci95_excludes_zero: bool
    rlvr_minus_start: float
    ci95_vs_start: list[float]
    higher_is_better: bool = True
    splits: dict[str, dict[str, Any]] = field(default_factory=dict)
    baselines: dict[str, float] = field(default_factory=dict)
    control_budget: str = ""

    def to_dict(self) -> dict[str, Any]:
        """Every field, for ``summary.json``."""
        return asdict(self)


def _compare(start: np.ndarray, control: np.ndarray, rlvr: np.ndarray) -> dict[str, Any]:
    vs_control = paired_bootstrap(rlvr, control)
    vs_start = paired_bootstrap(rlvr, start)
    return {
        "n": vs_control.n,
        "start": float(_as_items(start).mean()),
        "control": float(_as_items(control).mean()),
        "rlvr": float(_as_items(rlvr).mean()),
        "rlvr_minus_control": vs_control.mean,
        "ci95": vs_control.as_list(),
        "ci95_excludes_zero": vs_control.excludes_zero,
        "rlvr_minus_start": vs_start.mean,
        "ci95_vs_start": vs_start.as_list(),
    }


def build_headline(
    metric: str,
    seeds: Sequence[int],
    scores: Mapping[str, Scores],
    *,
    split_of: Sequence[str] | None = None,
    higher_is_better: bool = True,
    baselines: Mapping[str, float] | None = None,
    control_budget: str = "",
) -> Headline:
    """The headline from per-item scores of ``start``, ``control`` and ``rlvr`` (same items,
    same order; one row per seed allowed). ``split_of`` names each item's split (e.g.
    ``changed`` / ``unchanged``); each split gets the same comparison."""
    missing = {"start", "control", "rlvr"} - set(scores)
    if missing:
        raise ValueError(f"scores lack {sorted(missing)}")
    start, control, rlvr = (
        np.asarray(scores[k], dtype=np.float64) for k in ("start", "control", "rlvr")
    )
    overall = _compare(start, control, rlvr)
    splits: dict[str, dict[str, Any]] = {}
    if split_of is not None:
        labels = np.asarray(split_of)
        if labels.shape[0] != start.shape[-1]:
            raise ValueError(f"split_of has {labels.shape[0]} labels for {start.shape[-1]} items")
        for name in sorted(set(labels.tolist())):
            cols = labels == name
            splits[name] = _compare(start[..., cols], control[..., cols], rlvr[..., cols])
    return Headline(
        metric=metric,
        n=overall["n"],
        seeds=list(seeds),
        start=overall["start"],
        control=overall["control"],
        rlvr=overall["rlvr"],
        ci95=overall["ci95"],
        ci95_excludes_zero=overall["ci95_excludes_zero"],
        rlvr_minus_start=overall["rlvr_minus_start"],
        ci95_vs_start=overall["ci95_vs_start"],
        higher_is_better=higher_is_better,
        splits=splits,
        baselines=dict(baselines or {}),
        control_budget=control_budget,
    )


def describe(headline: Headline, *, digits: int = 3) -> str:
    """One plain sentence on the comparison, saying when the interval includes 0 and naming each
    baseline RLVR does not beat; numbers to ``digits`` decimals (4 for the video rewards, whose
    differences are thousandths)."""
    h = headline
    diff = h.rlvr - h.control
    verdict = (
        "the interval excludes 0"
        if h.ci95_excludes_zero
        else "the interval includes 0: no difference shown"
    )
    d = digits
    text = (
        f"{h.metric}: start {h.start:.{d}f}, control {h.control:.{d}f}, RLVR {h.rlvr:.{d}f} "
        f"(n = {h.n}, seeds {h.seeds}); RLVR - control {diff:+.{d}f}, 95% CI "
        f"[{h.ci95[0]:+.{d}f}, {h.ci95[1]:+.{d}f}]: {verdict}"
    )
    if h.baselines:
        text += "; baselines: " + ", ".join(f"{k} {v:.{d}f}" for k, v in h.baselines.items())
        unbeaten = [
            k
            for k, v in h.baselines.items()
            if (h.rlvr <= v if h.higher_is_better else h.rlvr >= v)
        ]
        if unbeaten:
            text += f" (RLVR does not beat {', '.join(unbeaten)})"
    return text


class PoolError(ValueError):
    """A set of runs that cannot be pooled (``rlvr-world pool``); the message names the run and
    the reason."""


def t_interval(values: Sequence[float]) -> dict[str, Any]:
    """Mean, 95% Student-t interval over ``values`` (at least two), and each value."""
    from scipy import stats

    x = np.asarray(values, dtype=np.float64)
    mean = float(x.mean())
    half = float(stats.t.ppf(0.975, len(x) - 1) * x.std(ddof=1) / np.sqrt(len(x)))
    low, high = mean - half, mean + half
    return {
        "mean": mean,
        "ci95": [low, high],
        "ci95_excludes_zero": bool(low > 0 or high < 0),
        "per_seed": [float(v) for v in x],
    }
