"""The compose deployment for real: images built, the stack up under Podman, scaled and broken.

Run by ``make deploy-test`` (which installs Podman, builds the images, then runs this module with
``-m deploy -s``). The stack is one podman-compose project of its own (network, volumes) with the
reward workers at 3; every client runs in a container on that project's network (``driver.py``).
Every service is bound to 0.0.0.0 inside its container, so the stack runs with a random API token
made for this run (``RLVR_API_TOKEN``: podman-compose's environment, the driver containers', every
query); a reward image started without it must refuse to start. Redis requires a password made
for this run too (``RLVR_REDIS_PASSWORD``) and refuses a client without it.

In order: each container healthy (time to healthy), the README's HTTP and gRPC queries on every
replica, calls without the token refused by every replica, a Redis client without the password
refused, Prometheus scraping all 3 replicas,
a GRPO job through the rollout, decoder, reward and trainer containers with a Redis restart in
the middle (no scored group lost), the Grafana dashboard's queries on the live Prometheus, one
reward container killed under load (0 failed requests), requests/s through 1 and 3 replicas,
``scale reward=1`` then ``=4`` under load (the client connected before the scale-up reaches every
new replica), and a teardown that leaves no container, network or volume. Results are printed as
they come.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.deploy.stack import (
    IMAGE_VERSION,
    Stack,
    free_port,
    new_stack,
    preflight,
    published,
    report,
    run,
)

pytestmark = [pytest.mark.deploy, pytest.mark.timeout(3600)]

GRPO_STEPS = 40
#: The Redis container is restarted once the trainer has published this version.
RESTART_AT = 3


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    preflight()
    work = tmp_path_factory.mktemp("deploy")
    models = work / "models"
    st = new_stack(
        "rlvrdeploytest",
        work,
        RLVR_PROMETHEUS_PORT=str(free_port()),
        RLVR_REWARD_REPLICAS="3",
        # The driver's job pushes the groups here (the orchestrator service is not started):
        # the trainer (train-run of the smoke config) waits for 1000 steps, as before. Not the
        # main job's config: its trainer drops groups whose rewards all agree (skip_zero_spread,
        # no limit), and the driver's untrained tiny policy scores 0 on every answer, so that
        # trainer never took a step (found 2026-12-05).
        RLVR_RUN_CONFIG="pipeline/smoke.yaml",
        RLVR_STEPS="1000",
    )
    try:
        report(
            "tiny policy",
            st.driver(
                "model", "--out", "/models/policy", network=False, volumes=[f"{models}:/models"]
            ),
        )
        t0 = time.monotonic()
        healthy: dict[str, float] = {}
        for stage in (["redis"], ["reward", "decoder", "rollout"], ["trainer", "prometheus"]):
            st.up(*stage)
            names = [n for s in stage for n in st.containers(s)]
            start = time.monotonic() - t0
            healthy.update(
                {n: round(start + s, 1) for n, s in st.wait_healthy(names, timeout_s=300).items()}
            )
        report(
            "containers healthy (seconds from the first `up`)",
            {n: f"healthy at {s}s" for n, s in healthy.items()},
        )
        yield st
    finally:
        by_compose, at_end = st.down()
        report(
            "teardown",
            {
                "left by podman-compose down -v (then removed)": by_compose,
                "left at the end": at_end,
            },
        )
        assert at_end == {"containers": [], "volumes": [], "networks": []}, at_end


def reward_hosts(st: Stack) -> list[str]:
    return st.containers("reward")


def test_readme_queries_reach_every_reward_replica(stack: Stack) -> None:
    hosts = reward_hosts(stack)
    assert len(hosts) == 3
    result = stack.driver("queries", "--hosts", *hosts, "--all-replicas")
    report(
        "README queries (curl on each replica and on `reward`; gRPC batch file through "
        "dns:///reward:50051)",
        result,
    )


def test_calls_without_the_token_are_refused_by_every_replica(stack: Stack) -> None:
    hosts = reward_hosts(stack)
    result = stack.driver("auth", "--hosts", *hosts)
    report(
        "calls without the token (HTTP 401, gRPC UNAUTHENTICATED on each replica; metrics and "
        "health open; the SDK and the CLI through dns:///reward:50051)",
        result,
    )
    # The image itself refuses to serve bound to 0.0.0.0 with no token (no network: no traffic).
    done = run(
        [
            "podman",
            "run",
            "--rm",
            "--network",
            "none",
            "--env",
            "RLVR_REWARD_WORKERS=1",
            f"rlvr-world/reward:{IMAGE_VERSION}",
        ],
        timeout_s=300,
        check=False,
    )
    refusal = [ln for ln in (done.stdout + done.stderr).splitlines() if "refusing to bind" in ln]
    report("reward container without RLVR_API_TOKEN", f"exit {done.returncode}: {refusal[-1:]}")
    assert done.returncode == 2 and refusal, (done.returncode, done.stderr[-2000:])


def test_redis_refuses_a_client_without_the_password(stack: Stack) -> None:
    result = stack.driver("probe", "refused")
    report("a Redis client without the password (on the project network)", result)
    assert result["refused"] is True, result
    # The image refuses to start without a password (it listens beyond loopback).
    done = run(
        ["podman", "run", "--rm", "--network", "none", f"rlvr-world/redis:{IMAGE_VERSION}"],
        timeout_s=120,
        check=False,
    )
    report("redis container without RLVR_REDIS_PASSWORD", f"exit {done.returncode}")
    assert done.returncode == 2, (done.returncode, done.stderr[-2000:])
    assert "RLVR_REDIS_PASSWORD is not set" in done.stderr, done.stderr[-2000:]


def test_prometheus_scrapes_all_three_replicas(stack: Stack) -> None:
    result = stack.driver(
        "targets", "--expect", "reward=3", "rollout=1", "decoder=1", "trainer=1", "prometheus=1"
    )
    report(
        "Prometheus targets",
        [f"{t['job']:<10} {t['instance']:<28} {t['health']}" for t in result["targets"]],
    )  # type: ignore[union-attr]


def test_grpo_job_through_the_containers_survives_a_redis_restart(stack: Stack) -> None:
    redis = stack.containers("redis")[0]
    trainer = stack.containers("trainer")[0]
    stack.driver("probe", "write", "--n", "100")
    job = stack.driver(
        "grpo",
        "--steps",
        str(GRPO_STEPS),
        detach=True,
        volumes=[f"{stack.project}_checkpoints:/runs:ro"],
    )
    assert isinstance(job, str)
    deadline = time.monotonic() + 600
    while (version := published(stack)) < RESTART_AT:
        assert time.monotonic() < deadline, f"the trainer is at version {version} after 600 s"
        time.sleep(0.5)
    t0 = time.monotonic()
    run(["podman", "restart", "-t", "10", redis], timeout_s=120)
    stack.wait_healthy([redis], timeout_s=120)
    report(
        "Redis restarted",
        f"at trainer version {version} of {GRPO_STEPS}; healthy again after "
        f"{time.monotonic() - t0:.1f}s",
    )
    assert version < GRPO_STEPS, "the job was over before the restart"
    report("probe stream after the restart", stack.driver("probe", "check", "--n", "100"))
    result = stack.wait_driver(job, timeout_s=900)
    report(
        "GRPO job (orchestrator in the driver; rollout, decoder, reward x3, trainer containers)",
        result,
    )
    assert result["lost"] == []
    assert result["served_version"] >= GRPO_STEPS
    # The trainer (run.total_steps 1000, as deployed) waits for more data, healthy.
    stack.wait_healthy([trainer], timeout_s=120)
    report("trainer after the job", stack.state(trainer))


def test_dashboard_queries_run_on_the_live_prometheus(stack: Stack) -> None:
    result = stack.driver("dashboard")
    report(
        "Grafana dashboard queries on Prometheus (Grafana itself not run)",
        {k: v for k, v in result.items() if k != "panels"},
    )
    for panel in result["panels"]:  # type: ignore[union-attr]
        print(f"  {panel['status']:<8} {panel['series']:>3} series  {panel['panel']}")


def test_killing_a_reward_container_under_load_fails_no_request(stack: Stack) -> None:
    hosts = reward_hosts(stack)
    load = stack.driver(
        "load", "--seconds", "40", "--concurrency", "8", "--hosts", *hosts, detach=True
    )
    assert isinstance(load, str)
    time.sleep(12)
    victim = hosts[1]
    run(["podman", "kill", victim], timeout_s=60)
    killed_at = time.monotonic()
    result = stack.wait_driver(load, timeout_s=300)
    report(f"load while {victim} was killed (SIGKILL ~12 s in)", result)
    assert result["failed"] == 0, result["errors"]
    state = stack.state(victim)
    if not state.startswith("running"):
        run(["podman", "start", victim])
    back = stack.wait_healthy([victim], timeout_s=240)
    report(
        "killed replica",
        f"state after the load: {state}; healthy again "
        f"{time.monotonic() - killed_at:.0f}s after the kill ({back[victim]}s after start)",
    )


def test_requests_per_second_through_one_and_three_replicas(stack: Stack) -> None:
    """Throughput through one and three replicas (reported, not bounded: a shared VM's speed
    says nothing about the code), and what must hold whatever the speed: every request of the
    load answered, every answer counted by a replica, and with three replicas the client's
    requests spread over all three (DNS round-robin: none gets under a tenth)."""
    rates: dict[int, dict[str, Any]] = {}
    for replicas in (1, 3):
        stack.scale("reward", replicas)
        time.sleep(3)
        hosts = reward_hosts(stack)
        assert len(hosts) == replicas, hosts
        result = stack.driver("load", "--seconds", "20", "--concurrency", "8", "--hosts", *hosts)
        assert isinstance(result, dict)
        rates[replicas] = result
        served = result["requests_per_replica"]
        assert result["failed"] == 0 and result["ok"] > 0, (replicas, result["errors"])
        assert set(served) == set(hosts), (served, hosts)
        assert sum(served.values()) >= result["ok"], f"answers no replica counted: {result}"
        assert min(served.values()) >= 0.1 * result["ok"], f"a replica was left out: {served}"
    report(
        "requests/s, 8 concurrent Score calls through dns:///reward:50051 (2-core VM "
        "shared with other work)",
        {
            f"{k} replica(s)": {
                x: v[x] for x in ("req_per_s", "p50_ms", "p99_ms", "failed", "requests_per_replica")
            }
            for k, v in rates.items()
        },
    )


def test_scale_to_one_then_four_under_load(stack: Stack) -> None:
    hosts = reward_hosts(stack)
    load = stack.driver("load", "--seconds", "180", "--concurrency", "8", detach=True)
    assert isinstance(load, str)
    time.sleep(10)
    stack.scale("reward", 1)
    report("scaled to 1", reward_hosts(stack))
    time.sleep(15)
    new = stack.scale("reward", 4)
    report("scaled to 4 (time to healthy of the new replicas)", new)
    # The load's one client connected before the scale-up; the workers close each connection
    # after ~30 s (RLVR_REWARD_MAX_CONNECTION_AGE_S), and gRPC's DNS resolver waits at least 30 s
    # between lookups: 45 s is enough for it to have looked the name up again.
    time.sleep(45)
    before = {h: counter(stack, h) for h in reward_hosts(stack)}
    time.sleep(20)
    after = {h: counter(stack, h) for h in reward_hosts(stack)}
    served = {h: after[h] - before[h] for h in after}
    report(
        "requests each replica served in 20 s, 45 s after the scale-up (the load's one client, "
        "connected before it)",
        served,
    )
    result = stack.wait_driver(load, timeout_s=400)
    report("load across scale 3 -> 1 -> 4", result)
    assert len(reward_hosts(stack)) == 4 and hosts[0] in reward_hosts(stack)
    assert result["failed"] == 0, result["errors"]
    assert min(served.values()) > 0, f"a replica got no request from the client: {served}"


def counter(stack: Stack, host: str) -> float:
    """A replica's rlvr_reward_requests_total, read inside its own container."""
    text = stack.exec(
        host,
        "python",
        "-c",
        "import urllib.request as u;"
        "print(u.urlopen('http://127.0.0.1:8000/metrics').read().decode())",
    )
    return sum(
        float(ln.rsplit(" ", 1)[1])
        for ln in text.splitlines()
        if ln.startswith("rlvr_reward_requests_total{")
    )
