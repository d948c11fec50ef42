"""Checkpoints in the run directory: safetensors weights, optimizer state, trainer state.

Layout: ``<run_dir>/checkpoints/step_00000012/`` with the model saved by ``save_pretrained``
(``model.safetensors`` + ``config.json``, or the LoRA adapter), ``optimizer.pt`` and
``trainer_state.json`` (step, counters, seen group ids, queue position). A checkpoint is written
to a temporary directory and renamed, then ``checkpoints/latest`` is replaced atomically, so a
kill at any moment leaves the previous checkpoint usable.

A fresh start (no ``--resume``) in a run directory that holds an earlier run's checkpoints moves
them and its train log into ``<run_dir>/previous/<n>/`` first (``archive_previous``): left in
place, the pruning by step number would delete the new run's lower-numbered checkpoints and a
run that died before its first checkpoint would leave ``latest`` naming the old run's weights.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from trainer.model import Policy

STATE_FILE = "trainer_state.json"
OPTIMIZER_FILE = "optimizer.pt"
LATEST = "latest"


@dataclass
class TrainerState:
    """What a resume needs besides the weights and the optimizer."""

    step: int = 0
    seen_group_ids: list[str] = field(default_factory=list)
    dropped: dict[str, int] = field(default_factory=dict)
    trained_groups: int = 0
    acked_ids: list[str] = field(default_factory=list)  # acked right after this checkpoint
    pending_ids: list[str] = field(default_factory=list)  # read, not covered by this checkpoint

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> TrainerState:
        """The state ``trainer_state.json`` holds; an unknown key raises ``TypeError``."""
        return cls(**data)


def checkpoint_root(run_dir: Path) -> Path:
    """``<run_dir>/checkpoints``, where every ``step_*`` folder and ``latest`` live."""
    return run_dir / "checkpoints"


def latest_checkpoint(run_dir: Path) -> Path | None:
    """The directory named by ``checkpoints/latest``, or None."""
    pointer = checkpoint_root(run_dir) / LATEST
    if not pointer.exists():
        return None
    path = checkpoint_root(run_dir) / pointer.read_text().strip()
    return path if (path / STATE_FILE).exists() else None


def archive_previous(run_dir: Path, files: tuple[str, ...] = ()) -> Path | None:
    """Move an earlier run's ``checkpoints/`` (and ``files`` of ``run_dir``, e.g. its train log)
    into ``run_dir/previous/<n>/``, ``n`` the first unused number; the folder, or ``None`` when
    there was no earlier checkpoint (then nothing moves)."""
    root = checkpoint_root(run_dir)
    if not root.is_dir() or not any(root.iterdir()):
        return None
    n = 0
    while (run_dir / "previous" / str(n)).exists():
        n += 1
    dest = run_dir / "previous" / str(n)
    dest.mkdir(parents=True)
    os.replace(root, dest / root.name)
    for name in files:
        if (run_dir / name).exists():
            os.replace(run_dir / name, dest / name)
    return dest


def save_checkpoint(
    run_dir: Path,
    model: Policy,
    optimizer: torch.optim.Optimizer,
    state: TrainerState,
    keep: int,
) -> Path:
    """Write a complete checkpoint for ``state.step`` and point ``latest`` at it."""
    root = checkpoint_root(run_dir)
    root.mkdir(parents=True, exist_ok=True)
    name = f"step_{state.step:08d}"
    final, tmp = root / name, root / f".{name}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(str(tmp), safe_serialization=True)
    torch.save(optimizer.state_dict(), tmp / OPTIMIZER_FILE)
    (tmp / STATE_FILE).write_text(json.dumps(asdict(state)))
    shutil.rmtree(final, ignore_errors=True)
    os.replace(tmp, final)
    pointer_tmp = root / f".{LATEST}.tmp"
    pointer_tmp.write_text(name + "\n")
    os.replace(pointer_tmp, root / LATEST)
    _prune(root, keep)
    return final


def _prune(root: Path, keep: int) -> None:
    steps = sorted(p for p in root.glob("step_*") if p.is_dir())
    for old in steps[:-keep]:
        shutil.rmtree(old, ignore_errors=True)


def load_state(path: Path) -> TrainerState:
    """The trainer state of the checkpoint folder ``path`` (``FileNotFoundError`` without one)."""
    return TrainerState.from_json(json.loads((path / STATE_FILE).read_text()))


def load_optimizer(path: Path, optimizer: torch.optim.Optimizer) -> None:
    """Restore ``optimizer`` in place from ``path``'s ``optimizer.pt`` (tensors only, no pickle)."""
    optimizer.load_state_dict(torch.load(path / OPTIMIZER_FILE, weights_only=True))
