"""A trainer checkpoint's tensors (``read_checkpoint``) and whether they fit the served model
(``check_state_fits``), for the in-process engine's weight loads."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file

from services.rollout.engine import InvalidRequest, WeightsNotFound


def check_state_fits(own: Mapping[str, torch.Tensor], state: Mapping[str, torch.Tensor]) -> None:
    """Raise ``InvalidRequest`` unless ``state`` covers ``own`` (names and shapes).

    A name of ``own`` may be missing from ``state`` when it shares storage with one that is
    present (tied input/output embeddings)."""
    for name, tensor in state.items():
        if name not in own:
            raise InvalidRequest(f"checkpoint tensor {name!r} is not a weight of the served model")
        if tuple(tensor.shape) != tuple(own[name].shape):
            raise InvalidRequest(
                f"checkpoint tensor {name!r} has shape {tuple(tensor.shape)}, "
                f"the served model {tuple(own[name].shape)}"
            )
    given = {own[name].data_ptr() for name in state}
    for name, tensor in own.items():
        if name not in state and tensor.data_ptr() not in given:
            raise InvalidRequest(f"checkpoint lacks weight {name!r} of the served model")


def read_checkpoint(path: Path) -> dict[str, torch.Tensor]:
    """Every tensor of the ``*.safetensors`` files in ``path`` (sharded or not), on CPU."""
    files = sorted(path.glob("*.safetensors"))
    if not files:
        raise WeightsNotFound("weights path holds no *.safetensors file")
    state: dict[str, torch.Tensor] = {}
    for file in files:
        try:
            state.update(load_file(str(file)))
        except SafetensorError as exc:  # a bad header or truncated data: the sender's fault
            raise InvalidRequest(f"checkpoint: {file.name} is not valid safetensors") from exc
    return state
