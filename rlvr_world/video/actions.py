"""Action quantisation into per-dimension bins (docs/reference.md#action-quantisation).

``tok = clip(floor(clip((a - min) / (max - min + 1e-8), 0, 1) * bins), 0, bins - 1)``, evaluated in
float32 as the reference does with torch tensors: in float32 the ``1e-8`` vanishes beside a range of
width 2, so the midpoint of ``[-1, 1]`` is bin 128, while beside a narrow range it survives and the
midpoint lands in bin 127 (both pinned in ``golden_grpo_video.jsonl``). The result has no
vocabulary offset; :mod:`rlvr_world.video.layout` adds it.

This module does not choose ranges for a data set beyond the dataset-wide min/max of
:meth:`ActionQuantizer.from_actions`; callers with known bounds (PushT: ``[0, 512]``) pass them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import numpy as np
import numpy.typing as npt
from pydantic import Field

from rlvr_world.shapes import MATRIX_NDIM

#: A config field's type: simulator steps one model step (one action) spans; one bound for every
#: config that sets it (the data, the IDM, MPC).
FrameSkip = Annotated[int, Field(ge=1, le=64, description="simulator steps per model step")]

EPS = 1e-8
#: Columns of a range row: ``[min, max]``.
RANGE_COLUMNS = 2


def _as_ranges(ranges: npt.ArrayLike) -> npt.NDArray[np.float64]:
    arr = np.asarray(ranges, dtype=np.float64)
    if arr.ndim != MATRIX_NDIM or arr.shape[1] != RANGE_COLUMNS:
        raise ValueError(f"ranges: expected shape (D, 2) of [min, max] rows, got {arr.shape}")
    if not np.isfinite(arr).all():
        raise ValueError("ranges: contains NaN or inf")
    bad = np.flatnonzero(arr[:, 0] > arr[:, 1])
    if bad.size:
        raise ValueError(f"ranges: min > max in dimension(s) {bad.tolist()}")
    return arr


class ActionQuantizer:
    """Maps continuous actions (..., D) to integer bins in ``[0, bins)`` per dimension."""

    def __init__(self, ranges: npt.ArrayLike, bins: int = 256) -> None:
        if isinstance(bins, bool) or not isinstance(bins, int) or bins < 1:
            raise ValueError(f"bins: expected a positive int, got {bins!r}")
        self.ranges = _as_ranges(ranges)
        self.bins = bins

    @property
    def dims(self) -> int:
        """Action dimensions D."""
        return int(self.ranges.shape[0])

    @classmethod
    def from_actions(cls, actions: npt.ArrayLike, bins: int = 256) -> ActionQuantizer:
        """Dataset-wide per-dimension (min, max) of ``actions`` (N, D)."""
        arr = np.asarray(actions, dtype=np.float64)
        if arr.ndim != MATRIX_NDIM or arr.shape[0] == 0:
            raise ValueError(f"actions: expected a non-empty (N, D) array, got shape {arr.shape}")
        if not np.isfinite(arr).all():
            raise ValueError("actions: contains NaN or inf")
        return cls(np.stack([arr.min(axis=0), arr.max(axis=0)], axis=1), bins=bins)

    def _last_axis(
        self, values: npt.ArrayLike, name: str, kinds: str, what: str
    ) -> npt.NDArray[Any]:
        """``values`` as an array of dtype kind in ``kinds`` and shape (..., D); ``ValueError``
        naming ``name`` otherwise (``what``: the kind in words, "a numeric")."""
        arr = np.asarray(values)
        if arr.dtype.kind not in kinds:
            raise ValueError(f"{name}: expected {what} array, got dtype {arr.dtype}")
        if arr.ndim == 0 or arr.shape[-1] != self.dims:
            raise ValueError(f"{name}: expected shape (..., {self.dims}), got {arr.shape}")
        return arr

    def tokens(self, actions: npt.ArrayLike) -> npt.NDArray[np.int64]:
        """Bins (no vocabulary offset) of ``actions`` with shape (..., D); same leading shape."""
        arr = self._last_axis(actions, "actions", "fiu", "a numeric")
        a = arr.astype(np.float32)
        if not np.isfinite(a).all():
            raise ValueError("actions: contains NaN or inf")
        lo = self.ranges[:, 0].astype(np.float32)
        hi = self.ranges[:, 1].astype(np.float32)
        frac = np.clip((a - lo) / (hi - lo + np.float32(EPS)), 0.0, 1.0)
        scaled = frac * np.float32(self.bins)
        return np.clip(np.floor(scaled), 0, self.bins - 1).astype(np.int64)

    def centers(self, tokens: npt.ArrayLike) -> npt.NDArray[np.float64]:
        """The action at the centre of each bin (an approximate inverse of :meth:`tokens`)."""
        tok = self._last_axis(tokens, "tokens", "iu", "an integer")
        if tok.size and (tok.min() < 0 or tok.max() >= self.bins):
            raise ValueError(
                f"tokens: values must lie in [0, {self.bins}), got {tok.min()}..{tok.max()}"
            )
        lo, hi = self.ranges[:, 0], self.ranges[:, 1]
        result: npt.NDArray[np.float64] = lo + (tok + 0.5) / self.bins * (hi - lo)
        return result

    def to_dict(self) -> dict[str, Any]:
        """``{"ranges": [[min, max], ...], "bins": n}``, the JSON form."""
        return {"ranges": self.ranges.tolist(), "bins": self.bins}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ActionQuantizer:
        """The quantizer of ``to_dict``'s form; ``ValueError`` without ``ranges``."""
        if "ranges" not in data:
            raise ValueError("ranges: missing from the action quantizer spec")
        return cls(data["ranges"], bins=int(data.get("bins", 256)))

    def save(self, path: str | Path) -> None:
        """Write ``to_dict`` as JSON to ``path``."""
        Path(path).write_text(json.dumps(self.to_dict(), indent=1) + "\n", encoding="utf-8")

    @classmethod
    def load(cls, path: str | Path) -> ActionQuantizer:
        """The quantizer ``save`` wrote to ``path``."""
        return cls.from_dict(json.loads(Path(path).read_text(encoding="utf-8")))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ActionQuantizer):
            return NotImplemented
        return self.bins == other.bins and np.array_equal(self.ranges, other.ranges)

    def __hash__(self) -> int:
        return hash((self.bins, self.ranges.tobytes()))

    def __repr__(self) -> str:
        return f"ActionQuantizer(dims={self.dims}, bins={self.bins})"
