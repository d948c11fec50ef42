"""``POST /v1/score/npz``: a video request as one NumPy ``.npz`` archive, read within limits.

The archive (``np.savez``; compressed is fine) holds ``frames`` and ``target_frames``, optionally
``previous_frame``, ``actions`` ``(T, A)`` and ``states`` ``(T, 5)`` (the ``idm`` and ``state``
weights), and optionally ``request``: a 0-d unicode array holding the JSON of the remaining typed
fields (``request_id``, ``options``). Other members are ignored (never unpacked).

A small compressed body can unpack to a lot of data, so before a member is unpacked its ``.npy``
header is read and the bytes it declares count against one budget for the whole archive
(``limit``: the service's ``max_payload_bytes``, the same bound a JSON body has), and against the
member's own size in the archive. Pickled (object) arrays are refused. Every failure, a corrupt
member included, is ``InvalidInput`` naming the member: HTTP 422, never 500.
"""

from __future__ import annotations

import io
import math
import zipfile
from typing import IO, Any

import numpy as np
from pydantic import ValidationError

from rlvr_world.bounded_json import loads_bounded
from rlvr_world.rewards.dispatch import describe_validation_error
from rlvr_world.rewards.types import InvalidInput
from rlvr_world.rewards.video_action import ReaderConfig
from rlvr_world.wire import codec
from services.reward import convert
from services.reward.convert import Job, VideoSpec
from services.reward.http.protocol import OptionsIn, ScoreRequestIn

#: Members read, in this order (``request`` first: it names the request in later errors).
MEMBERS = ("request", "frames", "target_frames", "previous_frame", "actions", "states")


class _Budget:
    """Bytes the archive may still unpack."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.left = limit

    def take(self, name: str, nbytes: int) -> None:
        if nbytes > self.left:
            raise InvalidInput(
                f"{name}: unpacks to {nbytes} bytes; the archive may unpack to {self.limit} "
                "bytes in all (max_payload_bytes)"
            )
        self.left -= nbytes


def _declared(fh: IO[bytes], name: str) -> tuple[tuple[int, ...], np.dtype[Any]]:
    """Shape and dtype from the ``.npy`` header at the start of ``fh``."""
    version = np.lib.format.read_magic(fh)
    if version == (1, 0):
        shape, _fortran, dtype = np.lib.format.read_array_header_1_0(fh)
    elif version == (2, 0):
        shape, _fortran, dtype = np.lib.format.read_array_header_2_0(fh)
    else:
        raise InvalidInput(f"{name}: .npy format version {version} is not supported")
    if dtype.hasobject:
        raise InvalidInput(f"{name}: object arrays (pickles) are refused")
    return tuple(int(d) for d in shape), dtype


def _member(zf: zipfile.ZipFile, name: str, budget: _Budget) -> np.ndarray | None:
    """One array, its declared size checked before it is unpacked; None when absent."""
    try:
        info = zf.getinfo(f"{name}.npy")
    except KeyError:
        return None
    try:
        with zf.open(info) as fh:
            shape, dtype = _declared(fh, name)
            nbytes = math.prod(shape) * dtype.itemsize
            if nbytes > info.file_size:
                raise InvalidInput(
                    f"{name}: declares {nbytes} bytes of data but the member holds {info.file_size}"
                )
            budget.take(name, nbytes)
        with zf.open(info) as fh:
            arr: np.ndarray = np.lib.format.read_array(fh, allow_pickle=False)
    except InvalidInput:
        raise
    except Exception as exc:  # corrupt deflate data, bad CRC, truncated, bad header, ...
        raise InvalidInput(f"{name}: unreadable .npz member ({type(exc).__name__})") from None
    return arr


def _meta(arr: np.ndarray | None) -> ScoreRequestIn:
    if arr is None:
        return ScoreRequestIn(task="video")
    if arr.dtype.kind != "U" or arr.ndim != 0:
        raise InvalidInput("request: expected a 0-d unicode array holding JSON")
    raw = loads_bounded(str(arr[()]), "request")
    if not isinstance(raw, dict):
        raise InvalidInput("request: expected a JSON object")
    try:
        return ScoreRequestIn.model_validate({"task": "video", **raw})
    except ValidationError as exc:
        raise InvalidInput(f"request.{describe_validation_error(exc)}") from None


def _array(arr: np.ndarray | None, name: str, *, frames: bool = True) -> np.ndarray | None:
    """A member of a ``Tensor`` dtype, as checked frames (``frames``) or as it is."""
    if arr is None:
        return None
    if arr.dtype.name not in codec.DTYPES:
        raise InvalidInput(f"{name}.dtype: unsupported {arr.dtype.name!r}; expected {codec.DTYPES}")
    return convert.to_unit_float(arr, name) if frames else arr


def video_spec(options: OptionsIn | None) -> VideoSpec:
    """Typed video options -> the scorer's spec (unset fields: the scorer's defaults)."""
    video = options.video if options is not None else None
    if video is None:
        return VideoSpec()
    return VideoSpec(
        weights=dict(video.weights or {}),
        aggregation=video.aggregation,
        gamma=video.gamma,
        repetition_penalty=video.repetition_penalty,
        repetition_threshold=video.repetition_threshold,
        lpips_net=video.lpips_net,
        patch_grid=tuple(video.patch_grid) if video.patch_grid else None,
    )


def job_from_npz(data: bytes, limit: int, idm: ReaderConfig | None) -> tuple[str, Job]:
    """An ``.npz`` body -> (request_id, job); see the module docstring. ``idm``: the config of
    the service's IDM (None: it has none)."""
    try:
        zf = zipfile.ZipFile(io.BytesIO(data))
    except (zipfile.BadZipFile, ValueError, OSError, EOFError) as exc:
        kind = "a single .npy array; send an .npz archive (np.savez)"
        if not data.startswith(b"\x93NUMPY"):
            kind = f"not a valid .npz archive ({type(exc).__name__})"
        raise InvalidInput(f"body: {kind}") from None
    budget = _Budget(limit)
    with zf:
        arrays = {name: _member(zf, name, budget) for name in MEMBERS}
    meta = _meta(arrays["request"])
    pred = _array(arrays["frames"], "frames")
    if pred is None:
        raise InvalidInput("frames: required in the .npz archive")
    job = convert.frames_job(
        pred,
        _array(arrays["target_frames"], "target_frames"),
        _array(arrays["previous_frame"], "previous_frame"),
        video_spec(meta.options),
        actions=_array(arrays["actions"], "actions", frames=False),
        states=_array(arrays["states"], "states", frames=False),
        idm=idm,
    )
    return meta.request_id, job
