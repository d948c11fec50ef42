"""Input checks the reward modules share, each raising ``InvalidInput`` that names the argument.

``as_float_array``: numbers as float64 (``"<name>: expected numbers, got <type>"``).
``require_finite``: no NaN or infinity (``"<name>: contains NaN or infinite values"``).
``check_pixel_dtype``: frames of uint8 (0..255) or finite floats (0..1), as every frame reader
here takes them.

What they do not do: check shapes (each caller states the shape it wants in its own message),
convert, clamp or rescale pixels.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import NDArray

from rlvr_world.rewards.types import InvalidInput


def as_float_array(x: object, name: str) -> NDArray[np.float64]:
    """``x`` as a float64 array; ``InvalidInput`` when it is not numbers."""
    try:
        return np.asarray(x, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise InvalidInput(f"{name}: expected numbers, got {type(x).__name__}") from exc


def require_finite(arr: NDArray[Any], name: str) -> None:
    """``InvalidInput`` when ``arr`` holds a NaN or an infinity."""
    if not np.isfinite(arr).all():
        raise InvalidInput(f"{name}: contains NaN or infinite values")


def check_pixel_dtype(frames: NDArray[Any], name: str) -> NDArray[Any]:
    """``frames`` itself when uint8, or float without NaN or infinity; ``InvalidInput`` for any
    other dtype or a non-finite float (the values' range is not checked)."""
    if frames.dtype == np.uint8:
        return frames
    if frames.dtype.kind != "f":
        raise InvalidInput(
            f"{name}: unsupported dtype {frames.dtype}; use uint8 (0..255) or float (0..1)"
        )
    require_finite(frames, name)
    return frames
