"""Confidence intervals for paired comparisons over held-out items, and a run's headline.

``paired_bootstrap(a, b, ...)`` estimates the mean of ``a - b`` over items with a percentile
bootstrap: items are resampled with replacement (``resamples`` times, from a seeded generator)
and the interval is the ``(1 - confidence) / 2`` and ``(1 + confidence) / 2`` quantiles of the
resampled means. ``a`` and ``b`` are per-item scores ``(items,)`` or tables ``(seeds, items)``;
a table is averaged over its seeds per item first, so the unit of resampling is always the item
(the held-out clip), and seeds only reduce each item's noise. The two sides must describe the same
items in the same order.

``build_headline`` puts a run's main comparison into one JSON-ready dict: the metric, the number
of items and the seeds, the means of the starting model, the control, the RLVR model and the
copy-last-frame baseline, and the interval of RLVR minus control (sign-flipped when lower is
better, so a positive interval always means RLVR is better).

Choices: percentile bootstrap (not BCa; with hundreds of items the two agree to the third digit);
no correction for multiple comparisons. What it does not do: no I/O, no plotting, no test of
seeds as the unit (with three seeds a seed-level interval would be meaningless).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

DEFAULT_RESAMPLES = 10_000
DEFAULT_CONFIDENCE = 0.95


@dataclass(frozen=True)
class Interval:
    """The mean of a per-item difference and its bootstrap interval ``[low, high]``."""

    mean: float
    low: float
    high: float
    n: int

    def to_dict(self) -> dict[str, float | int]:
        return asdict(self)


def per_item(scores: ArrayLike, name: str = "scores") -> NDArray[np.float64]:
    """``(items,)`` scores: a vector as it is, a ``(seeds, items)`` table averaged over seeds."""
    arr = np.asarray(scores, dtype=np.float64)
    if arr.ndim == 2:
        if arr.shape[0] == 0:
            raise ValueError(f"{name}: a (seeds, items) table needs at least one seed")
        arr = arr.mean(axis=0)
    if arr.ndim != 1:
        raise ValueError(f"{name}: expected (items,) or (seeds, items), got shape {arr.shape}")
    if arr.size == 0:
        raise ValueError(f"{name}: no items")
    if not np.isfinite(arr).all():
        raise ValueError(f"{name}: contains NaN or inf")
    return arr


def paired_bootstrap(
    a: ArrayLike,
    b: ArrayLike,
    resamples: int = DEFAULT_RESAMPLES,
    confidence: float = DEFAULT_CONFIDENCE,
    seed: int = 0,
) -> Interval:
    """Mean of ``a - b`` per item and its percentile-bootstrap interval (module docstring)."""
    x, y = per_item(a, "a"), per_item(b, "b")
    if x.shape != y.shape:
        raise ValueError(f"a and b: {x.size} and {y.size} items; a paired test needs the same")
    if isinstance(resamples, bool) or not isinstance(resamples, int) or resamples < 1:
        raise ValueError(f"resamples: expected a positive int, got {resamples!r}")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence: must lie in (0, 1), got {confidence}")
    diff = x - y
    rng = np.random.default_rng(seed)
    means = np.empty(resamples, dtype=np.float64)
    chunk = max(1, 2_000_000 // diff.size)  # bounded memory for many items
    for start in range(0, resamples, chunk):
        stop = min(resamples, start + chunk)
        idx = rng.integers(0, diff.size, size=(stop - start, diff.size))
        means[start:stop] = diff[idx].mean(axis=1)
    tail = (1.0 - confidence) / 2.0
    low, high = np.quantile(means, [tail, 1.0 - tail])
    return Interval(mean=float(diff.mean()), low=float(low), high=float(high), n=int(diff.size))


def build_headline(
    metric: str,
    scores: Mapping[str, ArrayLike],
    *,
    seeds: Sequence[int],
    higher_is_better: bool,
    resamples: int = DEFAULT_RESAMPLES,
    confidence: float = DEFAULT_CONFIDENCE,
    seed: int = 0,
) -> dict[str, Any]:
    """The headline of a run: ``scores`` maps ``start``, ``control``, ``rlvr`` and
    ``copy_last_frame`` to per-item scores ``(items,)`` or ``(seeds, items)`` of ``metric``.

    Returns ``metric``, ``n``, ``seeds``, the four means, ``ci95`` = ``[low, high]`` of
    RLVR - control (control - RLVR when lower is better: positive means RLVR is better),
    ``ci_mean`` (that difference's mean), ``confidence`` and ``higher_is_better``."""
    needed = ("start", "control", "rlvr", "copy_last_frame")
    missing = [k for k in needed if k not in scores]
    if missing:
        raise ValueError(f"scores: missing {', '.join(missing)}")
    items = {k: per_item(scores[k], k) for k in needed}
    sizes = {v.size for v in items.values()}
    if len(sizes) != 1:
        raise ValueError(f"scores: every entry needs the same items, got sizes {sorted(sizes)}")
    if not seeds:
        raise ValueError("seeds: at least one")
    better, worse = ("rlvr", "control") if higher_is_better else ("control", "rlvr")
    interval = paired_bootstrap(items[better], items[worse], resamples, confidence, seed)
    means = {k: float(v.mean()) for k, v in items.items()}
    if not all(math.isfinite(v) for v in means.values()):
        raise ValueError("scores: a mean is not finite")
    return {
        "metric": metric,
        "n": interval.n,
        "seeds": [int(s) for s in seeds],
        **means,
        "ci95": [interval.low, interval.high],
        "ci_mean": interval.mean,
        "confidence": confidence,
        "higher_is_better": higher_is_better,
    }
