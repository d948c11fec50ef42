"""End to end on a real Redis: producer process -> stream -> trainer process, SIGKILL, --resume.

Checks: the trainer takes steps with finite losses and moves the parameters; killed mid-run and
restarted with --resume it continues from its last checkpoint; every pushed group is trained on
or counted as dropped (stale / too few valid samples), bad entries are dead-lettered with reasons,
and nothing is left pending.
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rlvr_world.queue.schema import ScoredGroup
from rlvr_world.queue.server import REDIS_URL_ENV, RedisHandle, connect
from rlvr_world.queue.stream import StreamNames
from rlvr_world.queue.weights import read_weights

pytestmark = [pytest.mark.integration, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
GROUPS = 16
RESUMED_IDLE = "queue.idle_timeout_s=20"


@pytest.fixture
def redis_handle(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[RedisHandle]:
    monkeypatch.delenv(REDIS_URL_ENV, raising=False)
    handle = connect(tmp_path / "redis")
    yield handle
    handle.close()


@pytest.fixture
def tiny_model(tmp_path: Path) -> Path:
    import torch

    from trainer.config import TinyModel
    from trainer.model import build_tiny

    torch.set_num_threads(1)
    path = tmp_path / "model"
    build_tiny(
        TinyModel(vocab_size=128, hidden_size=32, num_layers=2, num_heads=2)
    ).save_pretrained(path)
    return path


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop(REDIS_URL_ENV, None)
    env["PYTHONPATH"] = str(REPO)
    env["OMP_NUM_THREADS"] = "1"
    return env


def _events(log: Path) -> list[dict[str, Any]]:
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text().splitlines() if line.endswith("}")]


def _trainer(config: Path, url: str, *extra: str) -> subprocess.Popen[bytes]:
    cmd = [
        sys.executable,
        "-m",
        "trainer",
        "--config",
        str(config),
        "--set",
        f"queue.redis_url={url}",
    ]
    return subprocess.Popen(
        [*cmd, *extra], cwd=REPO, env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )


def _push_stale(handle: RedisHandle) -> list[str]:
    """Two groups sampled 'at policy version 0', pushed once the trainer is far ahead."""
    ids = []
    for i in range(2):
        group = ScoredGroup.model_validate(
            {
                "group_id": f"stale-{i}",
                "prompt_id": "old",
                "task": "toy",
                "policy_version": 0,
                "prompt_token_ids": [1, 2, 3],
                "samples": [
                    {"token_ids": [4, 6], "logprobs": [-4.0, -4.5], "reward": 1.0, "status": "ok"},
                    {"token_ids": [5, 7], "logprobs": [-4.2, -4.9], "reward": 0.0, "status": "ok"},
                ],
            }
        )
        handle.client.xadd(StreamNames().stream, group.to_fields())  # type: ignore[arg-type]
        ids.append(group.group_id)
    return ids


def _push_bad(handle: RedisHandle) -> None:
    stream = StreamNames().stream
    good = json.loads(_push_template())
    lengths = {**good, "group_id": "bad-len"}
    lengths["samples"] = [{**good["samples"][0], "logprobs": [-1.0]}] * 2
    handle.client.xadd(stream, {"schema_version": "1", "group_id": "bad-json", "payload": "{"})
    handle.client.xadd(
        stream, {"schema_version": "7", "group_id": "bad-ver", "payload": json.dumps(good)}
    )
    handle.client.xadd(
        stream, {"schema_version": "1", "group_id": "bad-len", "payload": json.dumps(lengths)}
    )


def _push_template() -> str:
    return json.dumps(
        {
            "group_id": "bad-ver",
            "prompt_id": "p",
            "task": "toy",
            "policy_version": 0,
            "prompt_token_ids": [1],
            "samples": [
                {"token_ids": [2, 3], "logprobs": [-1.0, -1.0], "reward": 1, "status": "ok"}
            ],
        }
    )


def _wait_for(predicate: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def test_train_kill_resume_accounts_for_every_group(
    tmp_path: Path, redis_handle: RedisHandle, tiny_model: Path
) -> None:
    run_dir = tmp_path / "run"
    config = tmp_path / "trainer.yaml"
    config.write_text(
        f"""
model: {{path: {tiny_model}}}
optim: {{lr: 0.01}}
batch: {{groups_per_step: 2, micro_batch_size: 3}}
queue: {{idle_timeout_s: 4, max_staleness: 1, block_ms: 200}}
run: {{run_dir: {run_dir}, total_steps: 1000, checkpoint_every: 2, device: cpu, progress: false}}
"""
    )
    log = run_dir / "train_log.jsonl"
    ids_file = tmp_path / "pushed.txt"
    _push_bad(redis_handle)
    producer = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "trainer.toy_producer",
            "--model",
            str(tiny_model),
            "--redis-url",
            redis_handle.url,
            "--groups",
            str(GROUPS),
            "--group-size",
            "3",
            "--fail-every",
            "5",
            "--max-len",
            "6",
            "--interval",
            "0.15",
            "--push-timeout",  # the queue is full while no trainer runs: wait for the resumed one
            "240",
            "--ids-out",
            str(ids_file),
        ],
        cwd=REPO,
        env=_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    # The first trainer is killed, never idle-stopped (its producer may start late on a loaded
    # machine). The resumed one stops when idle for RESUMED_IDLE (20 s, far above the producer's
    # pause between groups: 0.15 s and a weights reload): the one time bound left in this test.
    first = _trainer(config, redis_handle.url, "--set", "queue.idle_timeout_s=0")
    second: subprocess.Popen[bytes] | None = None
    try:

        def killable() -> bool:
            ev = _events(log)
            ckpts = [e["step"] for e in ev if e["event"] == "checkpoint"]
            return bool(ckpts) and any(e["event"] == "step" and e["step"] > ckpts[0] for e in ev)

        _wait_for(killable, 240, "a checkpoint followed by another step")
        first.send_signal(signal.SIGKILL)
        first.wait(60)
        before_kill = _events(log)
        stale_ids = _push_stale(redis_handle)  # version 0, trainer already at step >= 2
        second = _trainer(config, redis_handle.url, "--resume", "--set", RESUMED_IDLE)
        assert producer.wait(240) == 0, producer.stderr.read() if producer.stderr else ""
        _, err = second.communicate(timeout=240)
        assert second.returncode == 0, err.decode()[-2000:]
    finally:
        for proc in (first, producer, second):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait()

    events = _events(log)
    starts = [i for i, e in enumerate(events) if e["event"] == "start"]
    assert len(starts) == 2
    run1, run2 = events[: starts[1]], events[starts[1] :]
    resumed_step = run2[0]["step"]
    ckpt_steps = [e["step"] for e in before_kill if e["event"] == "checkpoint"]
    assert resumed_step == max(ckpt_steps) >= 2
    assert run2[0]["resumed_from"].endswith(f"step_{resumed_step:08d}")
    steps2 = [e for e in run2 if e["event"] == "step"]
    assert steps2 and steps2[0]["step"] == resumed_step + 1

    _assert_every_group_accounted(
        _accounting(run1, run2, resumed_step), ids_file.read_text().split(), stale_ids
    )

    every_step = [e for e in events if e["event"] == "step"]
    assert all(math.isfinite(e["loss"]) and math.isfinite(e["grad_norm"]) for e in every_step)

    _assert_dead_letters_and_empty_queue(redis_handle)
    end = next(e for e in reversed(run2) if e["event"] == "end")
    latest = read_weights(redis_handle.client)
    assert latest is not None and latest.version == end["step"]
    _assert_parameters_moved(tiny_model, Path(latest.path))


def _assert_parameters_moved(initial: Path, checkpoint: Path) -> None:
    from safetensors.torch import load_file

    before = load_file(initial / "model.safetensors")
    after = load_file(checkpoint / "model.safetensors")
    assert before.keys() == after.keys()
    moved = sum(float((after[k].float() - before[k].float()).abs().sum()) for k in before)
    assert moved > 0.0
    assert all(bool(after[k].isfinite().all()) for k in after)


#: Drop reasons the trainer acks when it reads the entry (``trainer.loop``).
FINAL_DROPS = ("stale", "duplicate", "zero_spread")


def _accounting(
    run1: list[dict[str, Any]], run2: list[dict[str, Any]], resumed_step: int
) -> dict[str, str]:
    """group id -> trained / drop reason: run 1 up to its last checkpoint, plus all of run 2.

    Stale and duplicate drops are final and acked when read, so run 1's count wherever they
    fall; a too-few-valid drop is acked with the checkpoint, like a trained group."""
    accounted: dict[str, str] = {}
    step = 0
    for ev in run1:
        if ev["event"] == "step":
            step = ev["step"]
        if ev["event"] == "drop" and ev["reason"] in FINAL_DROPS:
            accounted.setdefault(ev["group_id"], ev["reason"])
        if step > resumed_step:
            continue
        if ev["event"] == "step":
            accounted.update(dict.fromkeys(ev["group_ids"], "trained"))
        elif ev["event"] == "drop":
            accounted.setdefault(ev["group_id"], ev["reason"])
    for ev in run2:
        if ev["event"] == "step":
            accounted.update(dict.fromkeys(ev["group_ids"], "trained"))
        elif ev["event"] == "drop" and ev["reason"] != "duplicate":
            accounted.setdefault(ev["group_id"], ev["reason"])
    return accounted


def _assert_dead_letters_and_empty_queue(handle: RedisHandle) -> None:
    client = handle.client
    names = StreamNames()
    dead = {
        f[b"group_id"].decode(): f[b"dead_reason"].decode()
        for _, f in client.xrange(names.dead_letter)
    }
    assert set(dead) == {"bad-json", "bad-ver", "bad-len"}
    assert "payload is not JSON" in dead["bad-json"]
    assert "schema_version '7'" in dead["bad-ver"]
    assert "one behaviour log-prob per response token" in dead["bad-len"]
    assert client.xlen(names.stream) == 0
    assert client.xpending(names.stream, names.group)["pending"] == 0


def _assert_every_group_accounted(
    accounted: dict[str, str], pushed: list[str], stale_ids: list[str]
) -> None:
    assert len(pushed) == GROUPS
    missing = set(pushed + stale_ids) - set(accounted)
    assert not missing, f"groups neither trained nor dropped: {missing}"
    assert {accounted[i] for i in stale_ids} == {"stale"}
    assert "too_few_valid" in accounted.values()
    assert sum(v == "trained" for v in accounted.values()) >= 4
