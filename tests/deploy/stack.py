"""Host side of the deployment test: one compose project driven through podman-compose and podman.

``Stack`` brings ``docker-compose.yml`` up under its own project name (so its network, volumes
and containers are its own), probes health with ``podman healthcheck run`` (Podman 4.3 without
systemd runs no healthcheck timers, so the probe is run here), scales, kills and restarts
containers, runs the driver (``driver.py``) in a container on the project network, and tears
everything down, including what is left after a failure.

podman-compose 1.0.3 has no ``--scale``, no profiles and no health-gated start; ``Stack`` covers
them: services are named explicitly, started in dependency stages that wait for health, and
``scale`` creates the missing replicas through ``deploy.replicas`` (``RLVR_REWARD_REPLICAS``) or
stops and removes the extra ones. Every wait is bounded.

Credentials: ``env`` holds the stack's ``RLVR_API_TOKEN`` and ``RLVR_REDIS_PASSWORD``;
podman-compose passes them into the services' environments, and driver containers get them with
``--env NAME`` (taken from this process's environment, so neither is ever on a command line of
ours). What is written to ``compose.log`` or raised has each replaced by ``<secret>``.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import shutil
import socket
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from rlvr_world.queue.weights import WEIGHTS_KEY, parse_weights

log = logging.getLogger(__name__)

ROOT = Path(__file__).resolve().parents[2]
IMAGE_VERSION = "0.1.0"
DRIVER_IMAGE = f"rlvr-world/deploy-driver:{IMAGE_VERSION}"
TOKEN_ENV = "RLVR_API_TOKEN"
REDIS_PASSWORD_ENV = "RLVR_REDIS_PASSWORD"
IMAGES = [
    f"rlvr-world/{r}:{IMAGE_VERSION}"
    for r in ("redis", "prometheus", "reward", "reward-text", "decoder", "rollout", "trainer")
]


class StackError(RuntimeError):
    """A podman or podman-compose call failed, or a wait ran out; the message says which."""


def run(
    argv: Sequence[str],
    *,
    timeout_s: float = 600.0,
    check: bool = True,
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        list(argv),
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
        env=env,
        cwd=ROOT,
    )
    if check and done.returncode != 0:
        raise StackError(
            f"{' '.join(argv[:6])}...: exit {done.returncode}\n{done.stdout[-2000:]}\n"
            f"{done.stderr[-2000:]}"
        )
    return done


@dataclass
class Stack:
    """One compose project (module docstring)."""

    project: str
    workdir: Path
    env: dict[str, str] = field(default_factory=dict, repr=False)  # holds the secrets

    @property
    def network(self) -> str:
        return f"{self.project}_default"

    def redact(self, text: str) -> str:
        for name in (TOKEN_ENV, REDIS_PASSWORD_ENV):
            secret = self.env.get(name)
            text = text.replace(secret, "<secret>") if secret else text
        return text

    def compose(self, *args: str, timeout_s: float = 600.0) -> str:
        env = {**os.environ, **self.env}
        done = run(
            ["podman-compose", "-p", self.project, "-f", "docker-compose.yml", *args],
            env=env,
            timeout_s=timeout_s,
            check=False,
        )
        with (self.workdir / "compose.log").open("a") as fh:
            fh.write(
                self.redact(f"$ podman-compose {' '.join(args)}\n{done.stdout}\n{done.stderr}\n")
            )
        if done.returncode != 0:
            raise StackError(f"podman-compose {' '.join(args)}: exit {done.returncode}")
        return done.stdout

    def up(self, *services: str) -> None:
        self.compose("up", "-d", "--no-build", *services)

    def containers(self, service: str | None = None, *, all_states: bool = False) -> list[str]:
        argv = [
            "podman",
            "ps",
            "--format",
            "{{.Names}}",
            "--filter",
            f"label=io.podman.compose.project={self.project}",
        ]
        if service is not None:
            argv += ["--filter", f"label=com.docker.compose.service={service}"]
        if all_states:
            argv.append("--all")
        names = run(argv).stdout.split()
        return sorted(names, key=lambda n: (n.rsplit("_", 1)[0], int(n.rsplit("_", 1)[1])))

    def health(self, name: str) -> str | None:
        """None when the container's own healthcheck passes, else why not."""
        done = run(["podman", "healthcheck", "run", name], check=False, timeout_s=60)
        if done.returncode == 0:
            return None
        return (done.stdout + done.stderr).strip()[-300:] or f"exit {done.returncode}"

    def wait_healthy(self, names: Sequence[str], timeout_s: float) -> dict[str, float]:
        """Seconds until each container's healthcheck first passed (from this call)."""
        t0 = time.monotonic()
        ready: dict[str, float] = {}
        last: dict[str, str | None] = {}
        while len(ready) < len(names):
            for name in names:
                if name not in ready:
                    last[name] = self.health(name)
                    if last[name] is None:
                        ready[name] = round(time.monotonic() - t0, 1)
            if len(ready) < len(names):
                if time.monotonic() - t0 > timeout_s:
                    waiting = {n: last.get(n) for n in names if n not in ready}
                    raise StackError(
                        f"not healthy after {timeout_s:.0f}s: {waiting}\n"
                        + "\n".join(self.logs(n, 30) for n in waiting)
                    )
                time.sleep(2)
        return ready

    def logs(self, name: str, tail: int = 50) -> str:
        done = run(["podman", "logs", "--tail", str(tail), name], check=False, timeout_s=60)
        return self.redact(f"--- {name} ---\n{done.stdout}{done.stderr}")

    def scale(self, service: str, replicas: int, timeout_s: float = 240.0) -> dict[str, float]:
        """Bring ``service`` to ``replicas`` running containers; returns new ones' time to
        healthy. Extra replicas (highest numbers first) get SIGTERM and 15 s to drain."""
        current = self.containers(service)
        if replicas > len(current):
            self.env[f"RLVR_{service.upper()}_REPLICAS"] = str(replicas)
            self.up(service)
            new = [n for n in self.containers(service) if n not in current]
            return self.wait_healthy(new, timeout_s)
        for name in current[replicas:][::-1]:
            run(["podman", "stop", "-t", "15", name], timeout_s=60)
            run(["podman", "rm", name], timeout_s=60)
        self.env[f"RLVR_{service.upper()}_REPLICAS"] = str(replicas)
        return {}

    def driver(
        self,
        *args: str,
        detach: bool = False,
        volumes: Sequence[str] = (),
        network: bool = True,
        timeout_s: float = 900.0,
    ) -> dict[str, object] | str:
        """Run ``driver.py ARGS`` in a container on the project network; its JSON result, or
        the container name when ``detach``."""
        argv = [
            "podman",
            "run",
            "--label",
            f"io.podman.compose.project={self.project}",
            "--network",
            self.network if network else "none",
            "-v",
            f"{ROOT / 'tests' / 'deploy'}:/driver:ro",
            "-v",
            f"{ROOT / 'deploy' / 'grafana' / 'dashboards'}:/dashboards:ro",
            "--env",
            TOKEN_ENV,
            "--env",
            REDIS_PASSWORD_ENV,
        ]
        for volume in volumes:
            argv += ["-v", volume]
        env = {**os.environ, **self.env}
        if detach:
            name = f"{self.project}_driver_{int(time.monotonic() * 1000) % 10**8}"
            self._run([*argv, "-d", "--name", name, DRIVER_IMAGE, *args], env=env)
            return name
        done = self._run(
            [*argv, "--rm", DRIVER_IMAGE, *args], env=env, timeout_s=timeout_s, check=False
        )
        return self._result(done.returncode, done.stdout, done.stderr, args[0])

    def _run(
        self,
        argv: Sequence[str],
        *,
        env: dict[str, str],
        timeout_s: float = 600.0,
        check: bool = True,
    ) -> subprocess.CompletedProcess[str]:
        """``run`` with the token redacted from its output and from what it raises."""
        try:
            done = run(argv, env=env, timeout_s=timeout_s, check=check)
        except StackError as exc:
            raise StackError(self.redact(str(exc))) from None
        done.stdout, done.stderr = self.redact(done.stdout), self.redact(done.stderr)
        return done

    def wait_driver(self, name: str, timeout_s: float) -> dict[str, object]:
        """Wait for a detached driver to exit; its JSON result (removes the container)."""
        done = run(["podman", "wait", name], timeout_s=timeout_s, check=False)
        if done.returncode != 0:
            run(["podman", "rm", "-f", name], check=False)
            raise StackError(f"driver {name} did not finish: {done.stderr}")
        out = self._run(["podman", "logs", name], env=dict(os.environ), check=False)
        run(["podman", "rm", name], check=False)
        return self._result(int(done.stdout.strip() or 1), out.stdout, out.stderr, name)

    @staticmethod
    def _result(code: int, stdout: str, stderr: str, what: str) -> dict[str, object]:
        lines = [ln for ln in stdout.splitlines() if ln.startswith("{")]
        result: dict[str, object] = json.loads(lines[-1]) if lines else {}
        if code != 0:
            raise StackError(
                f"driver {what}: exit {code}\n{json.dumps(result)[:3000]}\n{stderr[-3000:]}"
            )
        return result

    def exec(self, name: str, *argv: str) -> str:
        return run(["podman", "exec", name, *argv], timeout_s=60).stdout

    def state(self, name: str) -> str:
        return run(
            ["podman", "inspect", "--format", "{{.State.Status}} {{.State.ExitCode}}", name]
        ).stdout.strip()

    def leftovers(self) -> dict[str, list[str]]:
        """This project's containers, volumes and networks that still exist."""
        label = f"label=io.podman.compose.project={self.project}"
        ps = ["podman", "ps", "-a", "--format", "{{.Names}}", "--filter", label]
        volumes = ["podman", "volume", "ls", "--format", "{{.Name}}", "--filter", label]
        networks = run(["podman", "network", "ls", "--format", "{{.Name}}"], check=False)
        return {
            "containers": run(ps, check=False).stdout.split(),
            "volumes": run(volumes, check=False).stdout.split(),
            "networks": [n for n in networks.stdout.split() if n.startswith(f"{self.project}_")],
        }

    def down(self) -> tuple[dict[str, list[str]], dict[str, list[str]]]:
        """``podman-compose down -v``, then remove what it left (1.0.3 leaves the network, and
        the driver containers are not services); returns (left by compose, left at the end)."""
        try:
            self.compose("down", "-v", timeout_s=300)
        except StackError as exc:
            log.warning("%s", exc)
        left = self.leftovers()
        for name in left["containers"]:
            run(["podman", "rm", "-f", "-t", "0", name], check=False)
        for name in left["volumes"]:
            run(["podman", "volume", "rm", "-f", name], check=False)
        for name in left["networks"]:
            run(["podman", "network", "rm", "-f", name], check=False)
        return left, self.leftovers()


def report(title: str, value: object) -> None:
    """One block of the test's output."""
    text = value if isinstance(value, str) else json.dumps(value, indent=1, sort_keys=True)
    print(f"\n== {title}\n{text}", flush=True)


def free_port() -> int:
    """A TCP port free on the host now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def preflight() -> None:
    """What ``make deploy-test`` sets up; a missing piece fails with the step that makes it."""
    if os.geteuid() != 0:
        pytest.fail("the deployment test needs root (podman); run it as root")
    for tool in ("podman", "podman-compose"):
        if shutil.which(tool) is None:
            pytest.fail(f"{tool} not installed: run deploy/podman/setup.sh (make deploy-test)")
    missing = [i for i in IMAGES if run(["podman", "image", "exists", i], check=False).returncode]
    if missing:
        pytest.fail(f"images not built: {missing}; run deploy/build-images.sh")
    # The driver image (build-images.sh mounts the host's pip set-up into the build).
    built = run(
        ["deploy/build-images.sh"],
        env={**os.environ, "RLVR_BUILD_ONLY": "driver", "RLVR_IMAGE_VERSION": IMAGE_VERSION},
        timeout_s=600,
    )
    report("driver image", built.stdout.strip())
    assert run(["podman", "image", "exists", DRIVER_IMAGE], check=False).returncode == 0


def published(stack: Stack) -> int:
    """The trainer's last published version (0 before the first), read in the Redis container."""
    # The password from the container's own environment, through REDISCLI_AUTH: on no command line.
    get = f'REDISCLI_AUTH="${REDIS_PASSWORD_ENV}" redis-cli --no-auth-warning GET {WEIGHTS_KEY}'
    raw = stack.exec(stack.containers("redis")[0], "sh", "-c", get)
    message = parse_weights(raw.strip() or None)
    return 0 if message is None else message.version


def new_stack(name: str, work: Path, **env: str) -> Stack:
    """A project ``<name><pid>`` in ``work`` with what every deployment test stack needs: a
    models folder the containers' user (uid 10001) may write (``RLVR_MODELS_DIR``), an API token
    and a Redis password made for this run, and one reward scoring process per replica; ``env``
    adds to or overrides that."""
    models = work / "models"
    models.mkdir()
    os.chown(models, 10001, 10001)
    base = {
        "RLVR_MODELS_DIR": str(models),
        "RLVR_REWARD_WORKERS": "1",
        TOKEN_ENV: secrets.token_urlsafe(32),
        REDIS_PASSWORD_ENV: secrets.token_hex(32),
    }
    return Stack(project=f"{name}{os.getpid()}", workdir=work, env={**base, **env})
