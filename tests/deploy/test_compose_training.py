"""One command trains: the compose file runs a whole GRPO job by itself, through faults and a
scale-up and -down, and loses nothing.

``docker-compose.yml`` under a project of its own, brought up as a user would (in the stages
podman-compose 1.0.3 needs for want of a health-gated start): the start model of ``RUN_CONFIG``
written by ``rlvr-world model start`` into the models folder; Redis (with its password), 2
reward replicas of the text and web image (``rlvr-world/reward-text``), the decoder, the
rollout service; the trainer (``train-run``, ``rl.steps`` = ``STEPS``) and the orchestrator
(``orchestrate``). No test driver pushes a group. While it
trains, one operation at a time at a rising published version: a third reward replica added, a
reward container killed, Redis restarted, the decoder killed, the rollout container killed, the
replicas back to 2. A killed container is started again as an operator would (podman does not
restart a container the user killed). Then the orchestrator must exit 0 with its evaluation
written (``summary.json`` with a headline), the trainer must have published ``STEPS`` versions,
and the books must balance (driver ``account``): every group the orchestrator's ledger says it
pushed is trained exactly once, dropped by the trainer with a reason, or still in the stream.
``RLVR_DEPLOY_STEPS`` sets ``STEPS`` (default 3,000: the smoke config's tiny model trains about 10
steps a second here, and the six operations take a minute or two in all).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator

import pytest

from tests.deploy.stack import (
    ROOT,
    Stack,
    new_stack,
    preflight,
    published,
    report,
    run,
)

pytestmark = [pytest.mark.deploy, pytest.mark.timeout(3600)]

RUN_CONFIG = "pipeline/smoke.yaml"
STEPS = int(os.environ.get("RLVR_DEPLOY_STEPS", "3000"))
#: How long the orchestrator may take to finish after the last operation.
FINISH_TIMEOUT_S = 1800.0


@pytest.fixture(scope="module")
def job(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    preflight()
    work = tmp_path_factory.mktemp("compose-job")
    models = work / "models"
    st = new_stack(
        "rlvrcomposejob",
        work,
        RLVR_REWARD_REPLICAS="2",
        # The text and web reward image (no torch, perceptual models or scipy): the job is the
        # text game, and a replica added mid-run starts from the small image.
        RLVR_REWARD_ROLE="reward-text",
        RLVR_RUN_CONFIG=RUN_CONFIG,
        RLVR_STEPS=str(STEPS),
    )
    try:
        started = st.driver(
            "start",
            "--config",
            f"/etc/rlvr/configs/{RUN_CONFIG}",
            "--out",
            "/models/policy",
            network=False,
            volumes=[f"{models}:/models", f"{ROOT / 'configs'}:/etc/rlvr/configs:ro"],
        )
        report(f"start model (rlvr-world model start {RUN_CONFIG})", started)
        t0 = time.monotonic()
        healthy: dict[str, float] = {}
        for stage in (["redis"], ["reward", "decoder", "rollout"], ["trainer"]):
            st.up(*stage)
            names = [n for s in stage for n in st.containers(s)]
            start = time.monotonic() - t0
            healthy.update(
                {n: round(start + s, 1) for n, s in st.wait_healthy(names, timeout_s=300).items()}
            )
        st.up("orchestrator")
        report("containers healthy (seconds from the first `up`)", healthy)
        yield st
    finally:
        by_compose, at_end = st.down()
        report("teardown", {"left by down -v": by_compose, "left at the end": at_end})
        assert at_end == {"containers": [], "volumes": [], "networks": []}, at_end


def kill_and_start(st: Stack, name: str) -> str:
    """SIGKILL ``name``, start it again if podman has not, wait until healthy."""
    run(["podman", "kill", name], timeout_s=60)
    t0 = time.monotonic()
    time.sleep(2)
    state = st.state(name)
    if not state.startswith("running"):
        run(["podman", "start", name], timeout_s=120)
    st.wait_healthy([name], timeout_s=300)
    return f"{name} killed ({state} after 2 s), healthy {time.monotonic() - t0:.0f}s later"


def add_reward(st: Stack) -> str:
    new = st.scale("reward", 3)
    return f"reward scaled 2 -> 3: {new} (seconds to healthy)"


def kill_reward(st: Stack) -> str:
    return kill_and_start(st, st.containers("reward")[0])


def restart_redis(st: Stack) -> str:
    redis = st.containers("redis")[0]
    t0 = time.monotonic()
    run(["podman", "restart", "-t", "10", redis], timeout_s=120)
    st.wait_healthy([redis], timeout_s=120)
    return f"{redis} restarted, healthy after {time.monotonic() - t0:.1f}s"


def kill_decoder(st: Stack) -> str:
    return kill_and_start(st, st.containers("decoder")[0])


def kill_rollout(st: Stack) -> str:
    return kill_and_start(st, st.containers("rollout")[0])


def remove_reward(st: Stack) -> str:
    st.scale("reward", 2)
    return f"reward scaled 3 -> 2: {st.containers('reward')}"


OPERATIONS: list[Callable[[Stack], str]] = [
    add_reward,
    kill_reward,
    restart_redis,
    kill_decoder,
    kill_rollout,
    remove_reward,
]


def orchestrator_state(st: Stack) -> tuple[str, int]:
    """(``status exit-code``, restarts) of the orchestrator container."""
    name = st.containers("orchestrator", all_states=True)[0]
    fmt = "{{.State.Status}} {{.State.ExitCode}} {{.RestartCount}}"
    status, code, restarts = run(["podman", "inspect", "--format", fmt, name]).stdout.split()
    return f"{status} {code}", int(restarts)


def test_the_compose_file_alone_trains_through_faults_and_loses_nothing(job: Stack) -> None:
    done: list[dict[str, object]] = []
    deadline = time.monotonic() + 1200
    for i, operation in enumerate(OPERATIONS):
        at = (i + 1) * STEPS // (len(OPERATIONS) + 2)
        while (version := published(job)) < at:
            assert time.monotonic() < deadline, (
                f"version {version} after 1200 s (wanted {at}); orchestrator "
                f"{orchestrator_state(job)}"
            )
            time.sleep(1)
        what = operation(job)
        after = published(job)
        done.append({"at_version": version, "operation": what, "version_after": after})
        report(f"operation {i + 1} of {len(OPERATIONS)}", done[-1])
        assert after < STEPS, f"the job ended during {operation.__name__}: mid-run no more"
    finish = time.monotonic() + FINISH_TIMEOUT_S
    while (state := orchestrator_state(job))[0] != "exited 0":
        assert time.monotonic() < finish, f"orchestrator {state} after {FINISH_TIMEOUT_S} s"
        time.sleep(2)
    report("orchestrator", {"state": state[0], "restarts": state[1], "operations": done})
    books = job.driver(
        "account",
        volumes=[f"{job.project}_results:/results:ro", f"{job.project}_checkpoints:/runs:ro"],
    )
    report("books of the job (ledger vs trainer log vs stream) and its summary", books)
    assert isinstance(books, dict)
    assert books["lost"] == [] and books["trained_twice"] == []
    summary = books["summary"]
    assert isinstance(summary, dict)
    assert summary["trainer_steps"] == STEPS and summary["served_version"] == STEPS
    assert summary["headline"] is not None
    assert {"summary.json", "eval_start.jsonl", "eval_rlvr.jsonl"} <= set(books["results"])
