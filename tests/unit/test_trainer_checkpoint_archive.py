"""A fresh trainer start moves an earlier run's checkpoints and train log aside
(``trainer.checkpoint.archive_previous``) instead of mixing the two runs: left in place, pruning
by step number deleted the new run's lower-numbered checkpoints, and ``latest`` could name the
old run's weights."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from transformers import PreTrainedModel

from tests.helpers.tiny_lm import build_tiny_lm, load_model
from trainer.checkpoint import (
    TrainerState,
    archive_previous,
    checkpoint_root,
    latest_checkpoint,
    save_checkpoint,
)


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> PreTrainedModel:
    return load_model(build_tiny_lm(tmp_path_factory.mktemp("lm")))


def _save(run_dir: Path, model: PreTrainedModel, step: int) -> Path:
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    return save_checkpoint(run_dir, model, optimizer, TrainerState(step=step), keep=2)


def test_an_earlier_runs_checkpoints_and_log_move_to_previous(
    tmp_path: Path, model: PreTrainedModel
) -> None:
    _save(tmp_path, model, 40)
    (tmp_path / "train_log.jsonl").write_text('{"event": "step", "step": 40}\n')
    moved = archive_previous(tmp_path, ("train_log.jsonl",))
    assert moved == tmp_path / "previous" / "0"
    assert latest_checkpoint(moved) is not None  # the old run is kept whole, readable
    assert (moved / "train_log.jsonl").exists() and not (tmp_path / "train_log.jsonl").exists()
    assert latest_checkpoint(tmp_path) is None
    # the new run's checkpoints survive its own pruning (the old step 40 would have outranked them)
    _save(tmp_path, model, 1)
    _save(tmp_path, model, 2)
    assert latest_checkpoint(tmp_path) == checkpoint_root(tmp_path) / "step_00000002"
    assert sorted(p.name for p in checkpoint_root(tmp_path).glob("step_*")) == [
        "step_00000001",
        "step_00000002",
    ]
    assert archive_previous(tmp_path) == tmp_path / "previous" / "1"  # the next number


def test_nothing_moves_without_an_earlier_checkpoint(tmp_path: Path) -> None:
    (tmp_path / "train_log.jsonl").write_text("{}\n")
    assert archive_previous(tmp_path, ("train_log.jsonl",)) is None
    assert (tmp_path / "train_log.jsonl").exists() and not (tmp_path / "previous").exists()
