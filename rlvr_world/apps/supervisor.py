"""Supervised local processes: start a command, wait until it is ready, stop exactly that process.

``Supervisor(run_dir)`` starts each ``ProcessSpec`` in a process group of its own (so a service's
children, e.g. a scoring pool, go with it), writes its stdout and stderr to
``run_dir/logs/<name>.log``, and waits for a readiness check: the standard gRPC health service
answering SERVING, an HTTP URL answering 2xx, or a line in the log. A process that exits before
it is ready raises ``ProcessFailed`` with the tail of its log. ``launch`` starts a process without
waiting, for a caller that has other work meanwhile; ``probe`` then tells whether it is ready (and
raises when it exited first). Each process records when it was started and when it was first
found ready (wall clock), for start-up breakdowns. ``stop`` sends SIGTERM to the group
and SIGKILL after a timeout; ``kill`` sends SIGKILL at once (failure tests). The supervisor stops
only the processes it started; it never looks processes up by name.

Those stops run when the ``with Supervisor`` block is left, which a signal's default action
skips: ``exits_on_termination()`` turns SIGTERM and SIGHUP into ``SystemExit(128 + signum)``
in the main thread, so a run stopped by ``kill``, ``timeout`` or a closed terminal unwinds and
stops what it started instead of leaving its services running (``rlvr-world run`` does this).
A SIGKILL skips even that: every group started here is also registered with the reaper
(``rlvr_world.reaper``), a process of its own that stops the groups when this process dies
without having stopped them.

It does not restart crashed processes on its own (no watchdog); ``restart(name)`` is explicit.
Pure stdlib plus grpc, which is imported only by ``GrpcHealth`` (its probe and ``HttpReady``'s
are ``rlvr_world.apps.healthcheck``'s). POSIX only.
"""

from __future__ import annotations

import contextlib
import logging
import os
import random
import re
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Protocol

from rlvr_world import reaper
from rlvr_world.apps.healthcheck import check_grpc, check_http

log = logging.getLogger(__name__)

#: Seconds between two readiness probes.
POLL_S = 0.1
#: Seconds one gRPC health or HTTP readiness probe may take (``rlvr_world.apps.healthcheck``).
PROBE_TIMEOUT_S = 1.0
#: Characters of the log shown in a start-up error.
LOG_TAIL_CHARS = 4000


#: Lowest port ``pick_free_port`` draws (below it: well-known and registered service ports).
PICK_LOW = 20000
#: Fewest ports below the ephemeral range for ``pick_free_port`` to draw from there.
PICK_MIN_SPAN = 1000
_EPHEMERAL_DEFAULT = (32768, 60999)
_handed_out: set[int] = set()


def ephemeral_range(path: str = "/proc/sys/net/ipv4/ip_local_port_range") -> tuple[int, int]:
    """The kernel's ephemeral port range (outgoing connections and ``bind(("", 0))`` take from
    it); Linux's default where the file cannot be read."""
    try:
        low, high = (int(x) for x in Path(path).read_text().split()[:2])
    except (OSError, ValueError):
        return _EPHEMERAL_DEFAULT
    return low, high


def pick_free_port(host: str = "127.0.0.1") -> int:
    """A TCP port free on ``host`` now, for a process started next to bind.

    Drawn at random from ``[PICK_LOW, ephemeral low)``, below the kernel's ephemeral range, so
    that no outgoing connection and no ``bind(0)`` of another process can take it between this
    pick and the bind; never the same port twice in one process (two services of one stack
    cannot be handed one port). Each candidate is checked by binding it. Where the ephemeral range
    leaves fewer than 1,000 ports below it, the OS picks (``bind(0)``), as before. Another process
    drawing the same port at the same moment is still possible, rare (1 in ~12,000 per pair)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    low = ephemeral_range()[0]
    rng = random.SystemRandom()
    for _ in range(200 if low - PICK_LOW >= PICK_MIN_SPAN else 0):
        port = rng.randrange(PICK_LOW, low)
        if port in _handed_out:
            continue
        with socket.socket(family, socket.SOCK_STREAM) as sock:
            try:
                sock.bind((host, port))
            except OSError:
                continue
        _handed_out.add(port)
        return port
    for _ in range(50):
        with socket.socket(family, socket.SOCK_STREAM) as sock:
            sock.bind((host, 0))
            port = int(sock.getsockname()[1])
        if port not in _handed_out:
            _handed_out.add(port)
            return port
    raise OSError(f"no free TCP port found on {host}")


class ReadyCheck(Protocol):
    """One readiness probe; ``ready`` must return quickly (it is polled)."""

    def ready(self, log_path: Path) -> bool: ...

    def describe(self) -> str: ...


@dataclass(frozen=True)
class GrpcHealth:
    """Ready when ``grpc.health.v1.Health/Check`` at ``address`` answers SERVING."""

    address: str
    service: str = ""

    def ready(self, log_path: Path) -> bool:
        return check_grpc(self.address, self.service, PROBE_TIMEOUT_S) is None

    def describe(self) -> str:
        return f"gRPC health SERVING at {self.address}"


@dataclass(frozen=True)
class HttpReady:
    """Ready when a GET of ``url`` answers 2xx."""

    url: str

    def ready(self, log_path: Path) -> bool:
        return check_http(self.url, PROBE_TIMEOUT_S) is None

    def describe(self) -> str:
        return f"HTTP 2xx from {self.url}"


@dataclass(frozen=True)
class LogLine:
    """Ready when a line of the process's log matches ``regex``."""

    regex: str

    def ready(self, log_path: Path) -> bool:
        try:
            text = log_path.read_text(errors="replace")
        except FileNotFoundError:
            return False
        return re.search(self.regex, text, re.MULTILINE) is not None

    def describe(self) -> str:
        return f"log line matching {self.regex!r}"


@dataclass
class ProcessSpec:
    """A command to supervise. ``env`` is added to (and overrides) this process's environment;
    with ``inherit_env=False`` it is the whole environment."""

    name: str
    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    ready: ReadyCheck | None = None
    cwd: Path | None = None
    inherit_env: bool = True


class ProcessFailed(RuntimeError):
    """A supervised process exited, or did not become ready in time."""


@dataclass
class Managed:
    """A process started by a ``Supervisor``."""

    spec: ProcessSpec
    popen: subprocess.Popen[bytes]
    log_path: Path
    log_file: IO[bytes]
    started_at: float = field(default_factory=time.time)  # wall clock at spawn
    ready_at: float | None = None  # wall clock when its readiness check first passed

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def log_tail(self, chars: int = LOG_TAIL_CHARS) -> str:
        self.log_file.flush()
        try:
            text = self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""
        return text[-chars:]


#: Signals ``exits_on_termination`` turns into ``SystemExit``.
TERMINATION_SIGNALS = (signal.SIGTERM, signal.SIGHUP)


def _exit_on_signal(signum: int, frame: object) -> None:
    log.warning("%s received: stopping", signal.Signals(signum).name)
    raise SystemExit(128 + signum)


@contextlib.contextmanager
def exits_on_termination() -> Iterator[None]:
    """Inside: SIGTERM and SIGHUP raise ``SystemExit(128 + signum)`` in the main thread (module
    docstring); the previous handlers come back on leaving. Outside the main thread (where
    Python cannot set handlers) it changes nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.signal(sig, _exit_on_signal) for sig in TERMINATION_SIGNALS}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


class Supervisor:
    """Starts, watches and stops named local processes; a context manager (stops all on exit)."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = Path(run_dir)
        self.log_dir = self.run_dir / "logs"
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self._procs: dict[str, Managed] = {}

    def __enter__(self) -> Supervisor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop_all()

    def __contains__(self, name: str) -> bool:
        return name in self._procs

    def names(self) -> list[str]:
        """Names in start order."""
        return list(self._procs)

    def pids(self) -> dict[str, int]:
        """Pids of the processes not reaped yet, by name (a reaped pid may be reused by another
        process). For samplers in other threads: reads attributes only, never waits."""
        return {n: m.pid for n, m in list(self._procs.items()) if m.popen.returncode is None}

    def get(self, name: str) -> Managed:
        try:
            return self._procs[name]
        except KeyError:
            raise KeyError(f"no supervised process named {name!r}") from None

    def start(self, spec: ProcessSpec, timeout_s: float = 120.0) -> Managed:
        """Start ``spec`` and wait until it is ready (or raise ``ProcessFailed``)."""
        return self.start_many([spec], timeout_s)[0]

    def start_many(self, specs: Sequence[ProcessSpec], timeout_s: float = 120.0) -> list[Managed]:
        """Start every spec at once, then wait until all are ready: start-up takes as long as the
        slowest process, not the sum (most of it is imports, which overlap). If one exits early
        or is not ready within ``timeout_s``, all of these are stopped and ``ProcessFailed``
        names it (the first in ``specs`` order that failed) with the tail of its log."""
        started = self._launch_all(specs)
        try:
            self._wait_ready(started, timeout_s)
        except ProcessFailed:
            for managed in started:
                self.stop(managed.spec.name, timeout_s=5)
            raise
        return started

    def launch(self, spec: ProcessSpec) -> Managed:
        """Start ``spec`` and return at once, without waiting for it to be ready: the caller polls
        ``probe`` (and stops the process if it gives up on it)."""
        return self._launch_all([spec])[0]

    def probe(self, name: str) -> bool:
        """True once ``name``'s readiness check has passed (a spec without one is ready at once);
        ``ProcessFailed`` with the tail of its log if it exited before it was ready."""
        managed = self.get(name)
        if managed.ready_at is not None:
            return True
        code = managed.popen.poll()  # before the check: a log line written, then an exit, is ready
        check = managed.spec.ready
        if check is None or check.ready(managed.log_path):
            managed.ready_at = time.time()
            log.info("%s ready after %.1fs", name, managed.ready_at - managed.started_at)
            return True
        if code is not None:
            raise ProcessFailed(
                f"{name} exited with code {code} before it was ready; "
                f"last lines of {managed.log_path}:\n{managed.log_tail()}"
            )
        return False

    def not_ready(self, name: str, timeout_s: float) -> ProcessFailed:
        """The error for ``name`` not being ready after ``timeout_s``, with the tail of its log."""
        managed = self.get(name)
        check = managed.spec.ready
        waiting = check.describe() if check is not None else "nothing"
        return ProcessFailed(
            f"{name} not ready after {timeout_s:.0f}s (waiting for {waiting}); last lines of "
            f"{managed.log_path}:\n{managed.log_tail()}"
        )

    def _launch_all(self, specs: Sequence[ProcessSpec]) -> list[Managed]:
        names = [spec.name for spec in specs]
        if len(set(names)) != len(names):
            raise ValueError(f"duplicate process names in one start: {names}")
        for spec in specs:
            old = self._procs.get(spec.name)
            if old is not None and old.alive():
                raise ValueError(f"process {spec.name!r} is already running (pid {old.pid})")
        return [self._spawn(spec) for spec in specs]

    def _spawn(self, spec: ProcessSpec) -> Managed:
        log_path = self.log_dir / f"{spec.name}.log"
        log_file = log_path.open("ab")
        env = {**os.environ, **spec.env} if spec.inherit_env else dict(spec.env)
        popen = subprocess.Popen(
            spec.argv,
            stdin=subprocess.DEVNULL,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=spec.cwd,
            start_new_session=True,
        )
        reaper.watch(popen.pid, group=True)  # stopped even if this process is SIGKILLed
        managed = Managed(spec, popen, log_path, log_file)
        self._procs.pop(spec.name, None)
        self._procs[spec.name] = managed
        log.info("started %s (pid %d): %s", spec.name, popen.pid, " ".join(spec.argv))
        return managed

    def _wait_ready(self, pending: Sequence[Managed], timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        waiting = list(pending)
        while True:
            waiting = [m for m in waiting if not self.probe(m.spec.name)]
            if not waiting:
                return
            if time.monotonic() > deadline:
                raise self.not_ready(waiting[0].spec.name, timeout_s)
            time.sleep(POLL_S)

    def _signal_group(self, managed: Managed, sig: signal.Signals) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(managed.pid, sig)  # the group id is the leader's pid (start_new_session)

    def stop(self, name: str, timeout_s: float = 15.0) -> int:
        """SIGTERM the process group, SIGKILL it after ``timeout_s``; the leader's exit code."""
        managed = self.get(name)
        if managed.alive():
            self._signal_group(managed, signal.SIGTERM)
            try:
                managed.popen.wait(timeout_s)
            except subprocess.TimeoutExpired:
                log.warning("%s did not stop within %.0fs; killing it", name, timeout_s)
                self._signal_group(managed, signal.SIGKILL)
                managed.popen.wait()
        # children left in the group (the leader exited first) go too
        self._signal_group(managed, signal.SIGKILL)
        reaper.forget(managed.pid)
        managed.log_file.close()
        return int(managed.popen.returncode)

    def kill(self, name: str) -> int:
        """SIGKILL the process group now (failure tests); the leader's exit code."""
        managed = self.get(name)
        self._signal_group(managed, signal.SIGKILL)
        managed.popen.wait()
        reaper.forget(managed.pid)
        managed.log_file.close()
        return int(managed.popen.returncode)

    def restart(self, name: str, timeout_s: float = 120.0) -> Managed:
        """Stop ``name`` (if running) and start its spec again."""
        spec = self.get(name).spec
        self.stop(name)
        return self.start(spec, timeout_s)

    def alive(self, name: str) -> bool:
        return self.get(name).alive()

    def stop_all(self, timeout_s: float = 15.0) -> dict[str, int]:
        """Stop every process, the last started first; their exit codes by name."""
        codes: dict[str, int] = {}
        for name in reversed(list(self._procs)):
            try:
                codes[name] = self.stop(name, timeout_s)
            except OSError as exc:
                log.error("stopping %s failed: %s", name, exc)
        return codes
