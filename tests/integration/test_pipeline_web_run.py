"""``rlvr-world run configs/pipeline/web_smoke.yaml`` end to end on the shared MiniWoB++
transitions: real processes (embedded Redis, reward, decoder, two rollout services, the trainer),
GRPO on F1 through the reward service, the control, and the F1 headline on the same held-out items.
Skips with a reason where ``RLVR_SHARED_DIR`` is absent."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rlvr_world.apps.pipeline.config import load_pipeline_config
from rlvr_world.apps.pipeline.runner import run_pipeline
from rlvr_world.queue.server import REDIS_URL_ENV
from rlvr_world.runlog import read_jsonl
from tests.helpers.shared import shared_file

pytestmark = [pytest.mark.integration, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]


def test_web_smoke_run_trains_on_f1_and_reports_the_f1_headline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = shared_file("data", "web", "miniwob_transitions.jsonl")
    monkeypatch.delenv(REDIS_URL_ENV, raising=False)
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    cfg = load_pipeline_config(
        REPO / "configs" / "pipeline" / "web_smoke.yaml",
        {"run.run_dir": str(tmp_path), "data.sources": [str(source)]},
    )
    summary = run_pipeline(cfg, "web_smoke.yaml")

    assert summary["trainer_exit"] == 0
    assert summary["trainer_steps"] == cfg.rl.steps == summary["served_version"]
    data = summary["data"]
    assert (data["train"], data["test"]) == (40, 8)
    assert not set(data["train_tasks"]) & set(data["test_tasks"])  # held-out tasks never trained
    head = summary["headline"]
    assert head["metric"] == "f1" and head["n"] == 8 and head["seeds"] == [cfg.run.seed]
    for key in ("start", "control", "rlvr"):
        assert 0.0 <= head[key] <= 1.0
    low, high = head["ci95"]
    assert low <= head["rlvr"] - head["control"] <= high
    assert 0.0 < head["baselines"]["always_no_change"] <= 1.0
    # the three evaluations scored the same held-out items
    ids = {
        name: {json.loads(line)["prompt_id"] for line in (tmp_path / f"eval_{name}.jsonl").open()}
        for name in ("start", "rlvr", "control")
    }
    assert ids["start"] == ids["rlvr"] == ids["control"] and len(ids["start"]) == 8
    # every GRPO step trained on F1 rewards read from the reward service
    steps = [
        e for e in read_jsonl(tmp_path / "trainer" / "train_log.jsonl") if e["event"] == "step"
    ]
    assert len(steps) == cfg.rl.steps
    assert all(s["status_error"] == 0 for s in steps)
    assert "F1" in (tmp_path / "report.md").read_text()
    # the start-up breakdown: the trainer launched as the feed began, not before the first request
    up = summary["startup"]
    procs = up["processes"]
    assert set(procs) >= {"reward", "decoder", "rollout", "trainer"}
    assert all(p["ready_s"] >= p["started_s"] >= 0 for p in procs.values())
    assert 0 <= up["redis_s"] <= up["services_s"] <= up["grpo_start_s"] <= up["first_request_s"]
    assert procs["trainer"]["started_s"] >= up["grpo_start_s"]
    # the feed did not wait for the trainer, but held one step's groups until it was ready: before
    # the trainer's start (logged before it reads anything) no more than those were pushed
    trainer_log = read_jsonl(tmp_path / "trainer" / "train_log.jsonl")
    trainer_start = next(e["time"] for e in trainer_log if e["event"] == "start")
    early = [
        e
        for e in read_jsonl(tmp_path / "ledger.jsonl")
        if e["event"] == "pushed" and e["time"] < trainer_start
    ]
    assert len(early) <= cfg.rl.groups_per_step
    # peak RSS: every process of the job, and their sum
    rss = summary["peak_rss_mib"]
    assert set(rss) >= {"orchestrator", "redis", "reward", "decoder", "rollout", "trainer"}
    parts = sum(v for k, v in rss.items() if k != "total")
    assert rss["total"] == pytest.approx(parts, abs=1.0) and all(v > 0 for v in rss.values())
