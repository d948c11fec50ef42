"""The SFT phases of ``rlvr-world run``: the warm-up that makes the start checkpoint, and the
control's continued SFT (``trainer.sft``), on the run's device and precision.

The warm-up measures the held-out items' loss after every epoch beside the train loss (the
control does not: its budget is GRPO's, and a held-out pass would spend it); both go to the run
log (``<name>_epoch`` events) and come back as one record per epoch for the summary and the
report. Nothing here starts a process.
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rlvr_world.apps.pipeline.config import PipelineConfig
from rlvr_world.apps.pipeline.tasks import task_of
from rlvr_world.devices import Placement
from rlvr_world.items import PromptItem
from rlvr_world.runlog import JsonlLog

if TYPE_CHECKING:
    from trainer.sft import SftResult


def run_sft_phase(
    cfg: PipelineConfig,
    placement: Placement,
    model: Path,
    items: tuple[list[PromptItem], list[PromptItem]],
    out: Path,
    *,
    log: JsonlLog,
    **budget: Any,
) -> tuple[SftResult, list[dict[str, Any]]]:
    """SFT of ``model`` on ``items`` = ``(train, heldout)`` into ``out`` (``out.name`` names the
    phase in the log: ``sft``, ``control``); ``budget`` overrides ``sft``'s epochs, lr and
    schedule and sets the control's step or time budget. Returns the result and the per-epoch
    records ``{epoch, train_loss, heldout_loss}`` (``heldout_loss`` None without held-out items)."""
    from trainer.sft import SftConfig, run_sft

    s = cfg.sft
    name = out.name
    train, heldout = items
    budget.setdefault("max_length", task_of(cfg).sft_max_length(cfg))
    sft_cfg = s.to(
        SftConfig,
        seed=cfg.run.seed,
        device=placement.device,
        precision=placement.precision,
        **budget,
    )
    epochs: list[dict[str, Any]] = []

    def on_epoch(epoch: int, loss: float, held: float | None) -> None:
        epochs.append({"epoch": epoch, "train_loss": loss, "heldout_loss": held})
        log.write(f"{name}_epoch", epoch=epoch, loss=loss, heldout_loss=held)

    result = run_sft(
        model,
        [(i.prompt, i.target) for i in train],
        out,
        sft_cfg,
        on_epoch=on_epoch,
        heldout=[(i.prompt, i.target) for i in heldout],
    )
    log.write(name, **{k: v for k, v in asdict(result).items() if k != "path"})
    return result, epochs
