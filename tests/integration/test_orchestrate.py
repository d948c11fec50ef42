"""``rlvr-world orchestrate``: a whole GRPO job fed against services it did not start.

As in a deployment, Redis, the reward, decoder and rollout services and the trainer
(``rlvr-world train-run`` of the same config) run on their own (supervised processes here,
containers there), started from the start model that ``rlvr-world model start`` writes. The
command, a separate process that knows only their addresses, evaluates the start, feeds until
the trainer has published ``rl.steps`` versions, evaluates RLVR and writes its summary. Then
each bad input: no address, a config of another task, a missing model folder, an address
nothing answers on.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rlvr_world.apps.pipeline.config import load_pipeline_config
from rlvr_world.apps.run.stack import start_services
from rlvr_world.apps.supervisor import LogLine, ProcessSpec, Supervisor, pick_free_port
from rlvr_world.queue.server import REDIS_URL_ENV, start_embedded

pytestmark = [pytest.mark.integration, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
SMOKE = REPO / "configs" / "pipeline" / "smoke.yaml"
EVALS = ("start", "rlvr")
ADDRESS_ENV = ("RLVR_ORCHESTRATOR_ROLLOUT", "RLVR_ORCHESTRATOR_DECODER", "RLVR_ORCHESTRATOR_REWARD")


def _cli(
    args: list[str], env: dict[str, str], timeout: float = 600
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rlvr_world.apps.cli", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in (*ADDRESS_ENV, REDIS_URL_ENV)}
    return {**env, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1", **extra}


def test_a_grpo_job_fed_against_running_services_writes_its_evaluation(tmp_path: Path) -> None:
    env = _env()
    model = tmp_path / "models" / "policy"
    made = _cli(["model", "start", str(SMOKE), str(model)], env)
    assert made.returncode == 0, made.stderr[-3000:]
    cfg = load_pipeline_config(SMOKE, {"run.run_dir": str(tmp_path / "unused")})
    redis = start_embedded(tmp_path / "redis")
    out = tmp_path / "orchestrate"
    try:
        with Supervisor(tmp_path) as sup:
            addrs = start_services(sup, model=model, redis_url=redis.url, max_tokens=24)
            trainer = ProcessSpec(
                "trainer",
                [
                    *(sys.executable, "-m", "rlvr_world.apps.cli", "train-run", str(SMOKE)),
                    *("--model", str(model), "--run-dir", str(tmp_path / "trainer")),
                ],
                env={"OMP_NUM_THREADS": "1", REDIS_URL_ENV: redis.url},
                ready=LogLine(r"trainer at step \d+"),
            )
            sup.start(trainer, timeout_s=180)
            run = _cli(
                ["orchestrate", str(SMOKE), "--out", str(out)],
                _env(
                    RLVR_ORCHESTRATOR_ROLLOUT=addrs.rollout,
                    RLVR_ORCHESTRATOR_DECODER=addrs.decoder,
                    RLVR_ORCHESTRATOR_REWARD=addrs.reward,
                    RLVR_REDIS_URL=redis.url,
                ),
            )
            assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-3000:]
            assert sup.get("trainer").popen.wait(timeout=120) == 0
            first = json.loads((out / "summary.json").read_text())
            rows = {
                n: (out / f"eval_{n}.jsonl").read_text().splitlines() for n in ("start", "rlvr")
            }
            restarted = restart(out, addrs.rollout, addrs.decoder, addrs.reward, redis.url)
    finally:
        redis.close()
    summary = first
    steps = cfg.rl.steps
    assert summary["trainer_steps"] == steps and summary["served_version"] == steps
    assert summary["pushed"] >= steps * cfg.rl.groups_per_step
    head = summary["headline"]
    test_items = summary["data"]["test"]
    assert head["n"] == test_items and head["control"] is None
    assert head["metric"] == "exact_match" and "always_no_change" in head["baselines"]
    low, high = head["ci95_vs_start"]
    assert low <= head["rlvr_minus_start"] <= high
    assert len(rows["start"]) == len(rows["rlvr"]) == test_items
    assert summary["eval"]["rlvr"]["policy_version"] == steps
    assert f"{steps} trainer steps" in run.stdout
    # Restarted after the trainer has published: the complete start evaluation of the first
    # process is reused (the same headline start), a torn one is not (no headline, said why).
    reused, skipped = restarted
    assert reused["start_reused"] and reused["headline"]["start"] == head["start"]
    assert reused["headline"]["n"] == test_items
    assert "headline" not in skipped and "start_reused" not in skipped
    assert skipped["start_skipped"] == "the trainer had published a version already"


def restart(out: Path, rollout: str, decoder: str, reward: str, redis_url: str) -> list[dict]:
    """Run ``orchestrate`` twice more into ``out`` as a restarted process would (the trainer has
    published every version): with the first's evaluation files, then with a torn
    ``eval_start.jsonl``; the two summaries."""
    env = _env(
        RLVR_ORCHESTRATOR_ROLLOUT=rollout,
        RLVR_ORCHESTRATOR_DECODER=decoder,
        RLVR_ORCHESTRATOR_REWARD=reward,
        RLVR_REDIS_URL=redis_url,
    )
    summaries = []
    for tear in (False, True):
        if tear:
            lines = (out / "eval_start.jsonl").read_text().splitlines()
            (out / "eval_start.jsonl").write_text(lines[0] + "\n")
        run = _cli(["orchestrate", str(SMOKE), "--out", str(out)], env)
        assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-3000:]
        summaries.append(json.loads((out / "summary.json").read_text()))
    return summaries


def test_no_address_is_refused_naming_each_missing_one(tmp_path: Path) -> None:
    run = _cli(["orchestrate", str(SMOKE), "--out", str(tmp_path)], _env(), timeout=60)
    assert run.returncode == 2
    for flag, env in (("--rollout", "RLVR_ORCHESTRATOR_ROLLOUT"), ("--redis", "RLVR_REDIS_URL")):
        assert f"{flag} (or ${env})" in run.stdout


def test_a_config_of_another_task_is_refused(tmp_path: Path) -> None:
    video = REPO / "configs" / "video" / "smoke.yaml"
    run = _cli(["orchestrate", str(video), "--out", str(tmp_path)], _env(), timeout=60)
    assert run.returncode == 2
    assert "task 'video'; orchestrate feeds text_game and web runs" in run.stdout
    assert f"rlvr-world run {video}" in run.stdout


def test_train_run_refuses_a_missing_model_folder(tmp_path: Path) -> None:
    args = ["train-run", str(SMOKE), "--model", str(tmp_path / "none"), "--run-dir", str(tmp_path)]
    run = _cli(args, _env(), timeout=60)
    assert run.returncode == 2
    assert "no model folder there (config.json missing)" in run.stdout


def test_an_address_nothing_answers_on_is_named(tmp_path: Path) -> None:
    nowhere = f"127.0.0.1:{pick_free_port()}"
    env = _env(
        RLVR_ORCHESTRATOR_ROLLOUT=nowhere,
        RLVR_ORCHESTRATOR_DECODER=nowhere,
        RLVR_ORCHESTRATOR_REWARD=nowhere,
        RLVR_REDIS_URL="redis://127.0.0.1:1/0",
    )
    args = ["orchestrate", str(SMOKE), "--out", str(tmp_path)]
    run = _cli([*args, "--set", "run.service_start_timeout_s=2"], env, timeout=120)
    assert run.returncode == 2
    assert f"not serving after 2s: rollout at {nowhere}" in run.stdout
