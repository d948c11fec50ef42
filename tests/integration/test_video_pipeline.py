"""The whole video run at toy size: PushT recorded with gym-pusht, tokenizer, MLE, GRPO through
real services (reward with ST-LPIPS, decoder with the frame tokenizer, rollout with the world
model, the queue-fed trainer), continued MLE for the same wall time, three evaluations, report.

Sizes are far too small to learn anything; this checks that every phase runs and hands the right
things to the next, that no prompt is lost, and that GRPO really changed the weights.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from PIL import Image

from rlvr_world.apps.orchestrator.ledger import read_ledger
from rlvr_world.apps.video.config import load_video_config
from rlvr_world.apps.video.pipeline import run_video_pipeline
from rlvr_world.queue.server import REDIS_URL_ENV

pytestmark = [pytest.mark.integration, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]


def test_video_run_end_to_end_at_toy_size(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import torch
    from safetensors.torch import load_file

    monkeypatch.delenv(REDIS_URL_ENV, raising=False)
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    monkeypatch.setenv("SDL_VIDEODRIVER", "dummy")
    cfg = load_video_config(
        REPO / "configs" / "video" / "smoke.yaml", {"run.run_dir": str(tmp_path)}
    )
    summary = run_video_pipeline(cfg, "smoke.yaml")

    rl = summary["rl"]
    assert rl["trainer_exit"] == 0
    assert rl["pushed"] >= cfg.rl.steps * cfg.rl.groups_per_step
    events = read_ledger(tmp_path / "ledger.jsonl")
    started = {e["key"] for e in events if e["event"] == "start"}
    ended = {e["key"] for e in events if e["event"] in ("pushed", "failed")}
    assert started == ended  # every request ends pushed or failed with a reason
    assert all(e.get("reason") for e in events if e["event"] == "failed")
    pushed = [e for e in events if e["event"] == "pushed"]
    assert all(s == "ok" for e in pushed for s in e["statuses"])  # every frame scored

    mle = load_file(str(tmp_path / "model" / "mle" / "model.safetensors"))
    final = load_file(str(Path(rl["checkpoint"]) / "model.safetensors"))
    assert Path(rl["checkpoint"]).name.endswith(f"{cfg.rl.steps:08d}")
    assert any(not torch.equal(mle[k], final[k]) for k in mle)  # GRPO moved the weights

    assert set(summary["eval"]) == {"mle", "rlvr", "mle_continued"}
    for report in summary["eval"].values():
        assert report["n_clips"] == cfg.eval.clips
        for key in ("reward", "l1", "mse", "psnr", "ssim", "stlpips", "repetition_rate"):
            assert math.isfinite(report[key]), key
    assert summary["baseline"]["budget_s"] == pytest.approx(rl["seconds"])
    assert summary["baseline"]["seconds"] >= 0.9 * rl["seconds"]

    report = (tmp_path / "report.md").read_text()
    assert "| reward -(L1 + ST-LPIPS) (higher is better) |" in report
    assert "![compare](compare.png)" in report and "tokenizer/recon.png" in report
    with Image.open(tmp_path / "compare.png") as img:
        # 3 rows of 32x32 frames at scale 2: context x2, three models, true = 6 columns
        assert img.size == (6 * (64 + 4) + 4, 16 + 3 * (64 + 4))
    assert (tmp_path / "curves.png").stat().st_size > 0
    assert json.loads((tmp_path / "summary.json").read_text())["rl"]["trainer_exit"] == 0
