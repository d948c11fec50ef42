"""Perceptual frame distances for the video reward: LPIPS (paper) and ST-LPIPS (works offline).

What it does: builds batched ``PerceptualScorer``s (see ``rlvr_world.rewards.video``) over torch
modules, loads their weights from local files only, and runs them in micro-batches under
``torch.inference_mode`` in float32 (the reference ran LPIPS under bf16 autocast; we keep float32
for reproducibility). Inputs are frames in [0, 1], scaled to ``x*2-1`` (``normalize=True``), and
the distance is the mean over the spatial output, as the reference's
``vgg_lpips(...).mean(dim=(1, 2, 3))``.
One-channel frames are repeated to three channels.

* ``lpips``: the ``lpips`` package (v0.1 linear heads shipped in the wheel). Its torchvision
  backbone (ImageNet VGG16 or AlexNet) is *not* downloaded: it is read from an explicit path, the
  ``RLVR_LPIPS_BACKBONE_PATH`` environment variable, or torch hub's cache
  (``torch.hub.get_dir()/checkpoints/<torchvision file name>``), in that order, and loaded with
  every backbone tensor checked. With none of them, ``LPIPSWeightsUnavailable`` says where to put
  the file. Never a silently random network.
* ``stlpips``: shift-tolerant LPIPS from ``stlpips-pytorch``; its ``.pth`` files hold the backbone
  and the heads, so it needs no download. It is a different metric from LPIPS, named as such.

What it does not do: no thread settings (callers call ``torch.set_num_threads``), no network access,
no gradients. torch, torchvision, lpips and stlpips_pytorch are imported lazily.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import NDArray

from rlvr_world.devices import device_line, resolve_device
from rlvr_world.rewards.patches import check_grid_fits
from rlvr_world.rewards.types import InvalidInput
from rlvr_world.rewards.video import LPIPS_NETS, PERCEPTUAL_METRICS, PerceptualScorer
from rlvr_world.shapes import FRAMES_NDIM, GREY_CHANNELS, RGB_CHANNELS

if TYPE_CHECKING:
    import torch

logger = logging.getLogger(__name__)

FloatArray = NDArray[np.float64]

#: Environment variable naming a local torchvision backbone checkpoint for LPIPS.
BACKBONE_ENV = "RLVR_LPIPS_BACKBONE_PATH"
DEFAULT_BATCH_SIZE = 8
#: Smallest frame side each scorer accepts (measured): LPIPS-vgg takes 16 (VGG pools four times
#: before relu5_3), LPIPS-alex 31 (its stride-4 11x11 stem and three 3x3/2 pools), ST-LPIPS's
#: reflect-padded anti-aliased pooling vgg 18 and alex 21.
MIN_SIDE = 16
MIN_SIDES = {
    ("lpips", "vgg"): 16,
    ("lpips", "alex"): 31,
    ("stlpips", "vgg"): 18,
    ("stlpips", "alex"): 21,
}
_TORCHVISION_WEIGHTS = {"vgg": "VGG16_Weights", "alex": "AlexNet_Weights"}
_SLICE_KEY = re.compile(r"slice\d+\.(\d+)\.(.+)")
_HEAD_KEY = re.compile(r"lin\d+\.")


class LPIPSWeightsUnavailable(RuntimeError):
    """The ImageNet backbone LPIPS needs is not on this machine."""


@dataclass
class TorchPerceptualScorer:
    """A ``PerceptualScorer`` over an LPIPS-style module ``module(a, b, normalize=True)``."""

    metric: str
    net: str
    module: torch.nn.Module
    device: str
    batch_size: int = DEFAULT_BATCH_SIZE

    def __post_init__(self) -> None:
        if self.batch_size < 1:
            raise InvalidInput(f"batch_size: must be >= 1, got {self.batch_size}")

    def __call__(self, pred: FloatArray, target: FloatArray) -> FloatArray:
        """Distances ``(N,)`` between frames ``(N, H, W, C)`` in [0, 1], in micro-batches.

        Pairs that share a target frame (a GRPO group scores G predictions against one target) go
        into the same micro-batch, and each distinct target frame (same bytes) goes through the
        backbone once per micro-batch: a group of G costs G + 1 forward passes instead of 2G.
        """
        return self._distances(pred, target, None)[0]

    def patch_distances(
        self, pred: FloatArray, target: FloatArray, grid: tuple[int, int]
    ) -> tuple[FloatArray, FloatArray]:
        """The distances ``(N,)`` of ``__call__`` (the same values) and each pair's spatial map
        averaged over the cells of a ``(rows, cols)`` grid, ``(N, rows, cols)``: how different
        each part of the frame looks. The map is LPIPS's ``spatial=True`` output (each layer's
        head output upsampled bilinearly to the frame and summed over layers). A module that is
        not LPIPS-style has no map: every cell gets the pair's distance. ``InvalidInput`` when the
        frames do not split into the grid's equal cells."""
        check_grid_fits(pred.shape[1], pred.shape[2], grid)
        dist, cells = self._distances(pred, target, grid)
        assert cells is not None
        return dist, cells

    def _distances(
        self, pred: FloatArray, target: FloatArray, grid: tuple[int, int] | None
    ) -> tuple[FloatArray, FloatArray | None]:
        _check_batch(pred, target, MIN_SIDES.get((self.metric, self.net), MIN_SIDE), self.metric)
        import torch

        out = np.empty(pred.shape[0], dtype=np.float64)
        cells = None if grid is None else np.empty((pred.shape[0], *grid), dtype=np.float64)
        shared = _shares_features(self.module)
        order, keys = _grouped_by_target(target) if shared else (np.arange(len(pred)), [])
        with torch.inference_mode():
            for start in range(0, pred.shape[0], self.batch_size):
                idx = order[start : start + self.batch_size]
                if shared:
                    maps = self._layer_maps(pred[idx], target, [keys[i] for i in idx], idx)
                    dist = maps[0].mean(dim=(2, 3), keepdim=True)
                    for layer in maps[1:]:
                        dist = dist + layer.mean(dim=(2, 3), keepdim=True)
                    if cells is not None and grid is not None:
                        cells[idx] = _cell_means(maps, pred.shape[1:3], grid)
                else:
                    a, b = self._to_tensor(pred[idx]), self._to_tensor(target[idx])
                    dist = self.module(a, b, normalize=True)
                out[idx] = dist.mean(dim=(1, 2, 3)).double().cpu().numpy()
                if cells is not None and not shared:
                    cells[idx] = out[idx][:, None, None]
        return out, cells

    def _layer_maps(
        self, pred: NDArray[Any], target: NDArray[Any], keys: list[bytes], idx: NDArray[np.intp]
    ) -> list[torch.Tensor]:
        """Each layer's head output ``(B, 1, h, w)`` for ``pred`` vs ``target[idx]``, each distinct
        target frame through the backbone once."""
        import torch

        first: dict[bytes, int] = {}
        which = [first.setdefault(k, len(first)) for k in keys]
        rows = {slot: int(i) for i, slot in zip(idx, which, strict=True)}
        unique = target[[rows[slot] for slot in range(len(first))]]
        feats_pred = self._features(pred)
        feats_target = self._features(unique)
        take = torch.tensor(which, device=feats_pred[0].device)
        module: Any = self.module
        return [
            module.lins[kk]((fp - ft[take]) ** 2)
            for kk, (fp, ft) in enumerate(zip(feats_pred, feats_target, strict=True))
        ]

    def _features(self, frames: NDArray[Any]) -> list[torch.Tensor]:
        """Unit-normalised backbone activations, as ``module.forward`` computes them per side."""
        import torch

        module: Any = self.module
        x = 2 * self._to_tensor(frames) - 1  # normalize=True
        if module.version == "0.1":
            x = module.scaling_layer(x)
        outs = module.net.forward(x)
        feats = []
        for kk in range(module.L):
            norm = torch.sqrt(torch.sum(outs[kk] ** 2, dim=1, keepdim=True))
            feats.append(outs[kk] / (norm + 1e-10))
        return feats

    def _to_tensor(self, frames: NDArray[Any]) -> torch.Tensor:
        import torch

        x = torch.from_numpy(np.ascontiguousarray(frames, dtype=np.float32))
        x = x.permute(0, 3, 1, 2).to(self.device)
        return x.expand(-1, 3, -1, -1) if x.shape[1] == 1 else x


def _cell_means(
    maps: list[torch.Tensor], size: tuple[int, int], grid: tuple[int, int]
) -> NDArray[np.float64]:
    """Layer maps ``(B, 1, h, w)`` upsampled to the frame ``size`` (bilinear, as LPIPS's spatial
    mode), summed, and averaged over each cell of ``grid``: ``(B, rows, cols)``."""
    from torch.nn.functional import interpolate

    total = interpolate(maps[0], size=size, mode="bilinear", align_corners=False)
    for layer in maps[1:]:
        total = total + interpolate(layer, size=size, mode="bilinear", align_corners=False)
    rows, cols = grid
    b, h, w = total.shape[0], size[0], size[1]
    blocks = total.reshape(b, rows, h // rows, cols, w // cols).mean(dim=(2, 4))
    return np.asarray(blocks.double().cpu().numpy(), dtype=np.float64)


def _shares_features(module: torch.nn.Module) -> bool:
    """Whether ``module`` is an LPIPS-style network (lpips or stlpips, learned heads, spatially
    averaged) whose per-frame features ``_features`` can compute; anything else is called whole."""
    return (
        getattr(module, "lpips", None) is True
        and getattr(module, "spatial", None) is False
        and all(hasattr(module, name) for name in ("net", "lins", "L", "scaling_layer", "version"))
    )


def _grouped_by_target(target: NDArray[Any]) -> tuple[NDArray[np.intp], list[bytes]]:
    """Pair indices with equal target frames made adjacent (groups in order of first appearance),
    and each pair's target key (a 16-byte BLAKE2 digest of the frame)."""
    keys = [hashlib.blake2b(np.ascontiguousarray(t).data, digest_size=16).digest() for t in target]
    first: dict[bytes, int] = {}
    group = [first.setdefault(k, len(first)) for k in keys]
    return np.argsort(np.asarray(group, dtype=np.intp), kind="stable"), keys


def _check_batch(
    pred: NDArray[Any], target: NDArray[Any], min_side: int = MIN_SIDE, name: str = "perceptual"
) -> None:
    if pred.ndim != FRAMES_NDIM or pred.shape[-1] not in (GREY_CHANNELS, RGB_CHANNELS):
        raise InvalidInput(f"perceptual: expected frames (N, H, W, 1|3), got {pred.shape}")
    if pred.shape != target.shape:
        raise InvalidInput(f"perceptual: prediction {pred.shape} and target {target.shape} differ")
    if min(pred.shape[1], pred.shape[2]) < min_side:
        raise InvalidInput(
            f"perceptual: {name} frames need at least {min_side}x{min_side} pixels, "
            f"got {pred.shape[1:3]}"
        )


def default_device() -> str:
    """The device of ``auto`` (``rlvr_world.devices``): ``cuda:0`` where torch sees a GPU, else
    ``cpu``."""
    return resolve_device("auto")


# --------------------------------------------------------------------------------------------
# LPIPS (paper): local backbone weights


def backbone_filename(net: str) -> str:
    """The file name torchvision's hub cache uses for the ImageNet backbone of ``net``."""
    import torchvision.models

    weights = getattr(torchvision.models, _TORCHVISION_WEIGHTS[net]).IMAGENET1K_V1
    return str(weights.url).rsplit("/", 1)[-1]


def backbone_cache_path(net: str) -> Path:
    """Where torch hub keeps the backbone: ``torch.hub.get_dir()/checkpoints/<file>``."""
    import torch

    return Path(torch.hub.get_dir()) / "checkpoints" / backbone_filename(net)


def resolve_backbone_path(net: str, weights_path: str | os.PathLike[str] | None = None) -> Path:
    """The backbone file: ``weights_path``, else ``$RLVR_LPIPS_BACKBONE_PATH``, else the hub cache.

    Raises ``LPIPSWeightsUnavailable`` naming every place looked at.
    """
    if weights_path is not None:
        path = Path(weights_path)
        if not path.is_file():
            raise LPIPSWeightsUnavailable(f"LPIPS backbone weights_path {path} is not a file")
        return path
    env = os.environ.get(BACKBONE_ENV)
    if env:
        path = Path(env)
        if not path.is_file():
            raise LPIPSWeightsUnavailable(f"{BACKBONE_ENV}={env} is not a file")
        return path
    cached = backbone_cache_path(net)
    if cached.is_file():
        return cached
    raise LPIPSWeightsUnavailable(
        f"LPIPS({net}) needs the ImageNet {net} backbone weights, which cannot be downloaded here. "
        f"Put torchvision's {backbone_filename(net)} at {cached} (torch hub cache), or set "
        f"{BACKBONE_ENV} to a local copy, or pass its path. ST-LPIPS (metric 'stlpips', weights "
        "inside the stlpips-pytorch wheel) works offline, but it is a different metric."
    )


def preferred_perceptual(net: str) -> str:
    """``"lpips"`` when the LPIPS backbone of ``net`` is on this machine
    (``resolve_backbone_path``), else ``"stlpips"`` (which ships its weights): the paper's
    metric where it can be had."""
    try:
        resolve_backbone_path(net)
    except LPIPSWeightsUnavailable:
        return "stlpips"
    return "lpips"


def _load_lpips_backbone(backbone: torch.nn.Module, path: Path) -> None:
    """Load torchvision ``features.<i>.*`` tensors into lpips' ``slice<k>.<i>.*``, strictly."""
    import torch

    state = torch.load(path, map_location="cpu", weights_only=True)
    mapped: dict[str, torch.Tensor] = {}
    missing: list[str] = []
    for key in backbone.state_dict():
        match = _SLICE_KEY.fullmatch(key)
        source = f"features.{match.group(1)}.{match.group(2)}" if match else key
        if source in state:
            mapped[key] = state[source]
        else:
            missing.append(source)
    if missing:
        raise LPIPSWeightsUnavailable(
            f"{path} is not a torchvision backbone for this net: missing {', '.join(missing[:5])}"
        )
    try:
        backbone.load_state_dict(mapped, strict=True)
    except RuntimeError as exc:
        raise LPIPSWeightsUnavailable(f"{path} does not fit the LPIPS backbone: {exc}") from exc


def _load_checked(module: torch.nn.Module, path: Path, may_lack: re.Pattern[str]) -> None:
    """Load ``path`` into ``module``; every key not matching ``may_lack`` must be in the file."""
    import torch

    state = torch.load(path, map_location="cpu", weights_only=True)
    result = module.load_state_dict(state, strict=False)
    lacking = [k for k in result.missing_keys if not may_lack.match(k)]
    if result.unexpected_keys or lacking:
        raise RuntimeError(
            f"{path}: unexpected keys {result.unexpected_keys[:5]}, missing keys {lacking[:5]}"
        )


def load_lpips(net: str, weights_path: str | os.PathLike[str] | None = None) -> torch.nn.Module:
    """``lpips.LPIPS(net)`` in eval mode with the v0.1 heads and a local ImageNet backbone."""
    path = resolve_backbone_path(net, weights_path)
    import lpips

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # torchvision's "pretrained is deprecated"
        model: torch.nn.Module = lpips.LPIPS(
            net=net, pretrained=False, pnet_rand=True, verbose=False
        )
    heads = Path(lpips.__file__).parent / "weights" / "v0.1" / f"{net}.pth"
    # The heads file holds lin<k>.*; the backbone (net.*), the lins.<k> aliases of the same heads
    # and the constant scaling buffers come from elsewhere.
    _load_checked(model, heads, re.compile(r"net\.|lins\.|scaling_layer\."))
    _load_lpips_backbone(model.get_submodule("net"), path)
    logger.info("LPIPS(%s): heads %s, backbone %s", net, heads, path)
    return model.eval()


# --------------------------------------------------------------------------------------------
# ST-LPIPS: everything inside the wheel


def stlpips_weights_path(net: str) -> Path:
    """The shift-tolerant weights shipped in ``stlpips_pytorch`` (backbone and heads)."""
    import stlpips_pytorch

    return (
        Path(stlpips_pytorch.__file__).parent / "weights" / "vST0.0" / f"{net}_shift_tolerant.pth"
    )


def load_stlpips(net: str) -> torch.nn.Module:
    """Shift-tolerant LPIPS(``net``) in eval mode, weights from the wheel (no download)."""
    from stlpips_pytorch import stlpips

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        model: torch.nn.Module = stlpips.LPIPS(
            net=net, variant="shift_tolerant", pretrained=False, verbose=False
        )
    path = stlpips_weights_path(net)
    # The file has every tensor; only the lins.<k> aliases of lin<k> are absent.
    _load_checked(model, path, re.compile(r"lins\."))
    logger.info("ST-LPIPS(%s): weights %s", net, path)
    return model.eval()


def make_perceptual(
    name: str,
    net: str = "vgg",
    device: str | None = None,
    weights_path: str | os.PathLike[str] | None = None,
    batch_size: int = DEFAULT_BATCH_SIZE,
) -> PerceptualScorer:
    """A ready ``PerceptualScorer``: ``name`` is ``lpips`` or ``stlpips``, ``net`` vgg or alex.

    ``device`` (``rlvr_world.devices``: auto, cpu, cuda, cuda:N) defaults to ``auto``, CUDA
    where torch sees a GPU; a bad spelling or a missing CUDA device raises ``ValueError``
    (``DeviceUnavailable``) saying what to set. The device in use is logged
    (``devices.device_line``). ``weights_path`` (LPIPS only) is a torchvision
    backbone checkpoint; see ``resolve_backbone_path``. Raises ``InvalidInput`` for unknown names
    and ``LPIPSWeightsUnavailable`` when the LPIPS backbone is not on this machine.
    """
    if name not in PERCEPTUAL_METRICS:
        raise InvalidInput(f"name: {name!r} is not one of {', '.join(PERCEPTUAL_METRICS)}")
    if net not in LPIPS_NETS:
        raise InvalidInput(f"net: {net!r} is not one of {', '.join(LPIPS_NETS)}")
    if name == "stlpips" and weights_path is not None:
        raise InvalidInput("weights_path: only LPIPS takes a backbone path; ST-LPIPS ships its own")
    dev = resolve_device(device or "auto", "perceptual device")
    module = load_lpips(net, weights_path) if name == "lpips" else load_stlpips(net)
    logger.info("%s %s: %s", name, net, device_line(dev, "fp32"))
    return TorchPerceptualScorer(
        metric=name, net=net, module=module.to(dev), device=dev, batch_size=batch_size
    )
