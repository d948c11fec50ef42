"""``run.device`` and ``run.precision`` reach every phase (and the control's ``steps`` and
``samples`` budgets hold in a real run): each phase and each process of a real
run records the device and precision it used (SFT and the control in the run's process, the
trainer, the rollout services and so the evaluations, the decoder's frames, the reward's
perceptual models, the video tokenizer, MLE, the evaluations and the control, the MPC world
models), and the test reads them back from ``summary.json``.

On a machine without CUDA the only device is the CPU, so a run with ``run.device: cpu`` and
``run.precision: bf16`` shows that the setting, not a default, decided: bf16 is never the CPU's
default, and every phase reports it (the video run's in-process phases run in float32 by
design: ``run.precision`` reaches its trainer and rollout there)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from rlvr_world.apps.pipeline.config import load_pipeline_config
from rlvr_world.apps.pipeline.runner import run_pipeline
from rlvr_world.queue.server import REDIS_URL_ENV
from rlvr_world.runlog import read_jsonl

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(1200)]

REPO = Path(__file__).resolve().parents[2]
CPU_BF16 = {"device": "cpu", "precision": "bf16"}


def test_the_text_run_puts_every_phase_where_run_device_says(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(REDIS_URL_ENV, raising=False)
    cfg = load_pipeline_config(
        REPO / "configs" / "pipeline" / "smoke.yaml",
        {
            "run.run_dir": str(tmp_path),
            "run.device": "cpu",
            "run.precision": "bf16",
            "sft.epochs": 2,
            "control.budget": "steps",
        },
    )
    summary = run_pipeline(cfg, "smoke.yaml")
    assert summary["trainer_exit"] == 0
    # the control took as many SFT optimizer steps as GRPO took optimizer steps
    assert summary["control_budget"]["kind"] == "steps"
    assert summary["control_steps"] == summary["trainer_steps"] == cfg.rl.steps
    devices: dict[str, Any] = summary["devices"]
    assert devices["run"] == {"setting": "cpu", **CPU_BF16}
    for phase in ("sft", "control", "trainer", "rollout", "rollout-control", "evaluation"):
        assert devices[phase] == CPU_BF16, phase
    # no torch work in a text run's decoder and reward service: nothing to report
    assert devices["decoder"] is None and devices["reward"] is None
    start = next(e for e in read_jsonl(tmp_path / "trainer" / "train_log.jsonl"))
    assert (start["event"], start["device"], start["precision"]) == ("start", "cpu", "bf16")
    rollout_log = (tmp_path / "logs" / "rollout.log").read_text()
    assert "device in use: cpu, precision bf16" in rollout_log  # as the service logged it

    epochs = summary["sft_epochs"]
    assert [e["epoch"] for e in epochs] == [1, 2]
    assert all(e["heldout_loss"] is not None and e["heldout_loss"] > 0 for e in epochs)
    report = (tmp_path / "report.md").read_text()
    assert "## SFT warm-up (loss per epoch)" in report and "| 2 |" in report
    assert "- device: cpu -> cpu, precision bf16" in report
    logged = [e for e in read_jsonl(tmp_path / "pipeline_log.jsonl") if e["event"] == "sft_epoch"]
    assert [e["heldout_loss"] for e in logged] == [e["heldout_loss"] for e in epochs]


def test_the_video_run_puts_every_phase_where_run_device_says(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from rlvr_world.apps.video.config import load_video_config
    from rlvr_world.apps.video.pipeline import run_video_pipeline

    monkeypatch.delenv(REDIS_URL_ENV, raising=False)
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    monkeypatch.setenv("SDL_VIDEODRIVER", "dummy")
    cfg = load_video_config(
        REPO / "configs" / "video" / "smoke.yaml",
        {
            "run.run_dir": str(tmp_path),
            "run.device": "cpu",
            "run.precision": "bf16",
            "baseline.budget": "samples",
        },
    )
    summary = run_video_pipeline(cfg, "smoke.yaml")
    assert summary["rl"]["trainer_exit"] == 0
    control = summary["baseline"]["by_seed"]["0"]  # MLE sequences = GRPO's trained sequences
    assert control["kind"] == "samples" and control["trained_sequences"] > 0
    assert control["max_steps"] == -(-control["trained_sequences"] // cfg.mle.batch_size)
    assert control["step"] - control["start_step"] == control["max_steps"]
    assert summary["headline"]["control_budget"] == "samples"
    devices: dict[str, Any] = summary["devices"]
    assert devices["run"] == {"setting": "cpu", **CPU_BF16}
    for phase in ("tokenizer", "mle", "evaluation", "baseline"):  # in process, float32
        assert devices[phase] == {"device": "cpu", "precision": "fp32"}, phase
    for process in ("trainer", "rollout"):
        assert devices[process] == CPU_BF16, process
    for process in ("decoder", "reward"):  # frame decoding, the perceptual model: float32
        assert devices[process] == {"device": "cpu", "precision": "fp32"}, process
    saved = json.loads((tmp_path / "summary.json").read_text())
    assert saved["devices"] == devices


def test_the_mpc_run_records_its_world_models_device(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("gym_pusht", reason="gym-pusht is in the video extra")
    from rlvr_world.apps.commands import main

    monkeypatch.setenv("SDL_VIDEODRIVER", "dummy")
    models = tmp_path / "models"
    run_dir = tmp_path / "run"
    code = main(
        [
            str(REPO / "configs" / "mpc" / "smoke_pusht.yaml"),
            "--set", f"models.base={models / 'base'}",
            "--set", f"models.rlvr={models / 'rlvr' / 'checkpoints' / 'latest'}",
            "--set", f"models.spec={models / 'base'}",
            "--set", f"models.tokenizer={models / 'tokenizer'}",
            "--set", "models.device=cpu",
            "--set", "tasks.episodes=1",
            "--set", f"run.run_dir={run_dir}",
        ]
    )  # fmt: skip
    assert code == 0
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["device"] == "cpu"
