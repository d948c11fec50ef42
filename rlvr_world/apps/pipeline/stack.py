"""Start the local service stack under a ``Supervisor``: reward, decoder, rollout, trainer.

Each service is a real process (``python -m services.<name>``) on a free loopback port, ready when
its gRPC health service answers SERVING; logs go to ``<run_dir>/logs/<name>.log``. Every service
requires one bearer token, random per run unless ``RLVR_API_TOKEN`` is set
(``client_auth.ensure_local_token``: the services inherit it, this process's clients read it).
The rollout service follows the trainer's published weights in the given Redis and loads them
only from ``weights_root``. The trainer is started from a
generated YAML (``rlvr-world train --config``) and is ready when it logs its start step.
Nothing here stops a process it did not start.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from rlvr_world.apps.supervisor import GrpcHealth, LogLine, ProcessSpec, Supervisor, pick_free_port
from rlvr_world.scaffold.client_auth import ensure_local_token

HOST = "127.0.0.1"
#: One torch/BLAS thread per service process (2-core machines: contention costs up to 35x).
THREAD_ENV = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}


@dataclass(frozen=True)
class Addresses:
    """gRPC addresses of the running services."""

    reward: str
    decoder: str
    rollout: str


def reward_spec(workers: int) -> ProcessSpec:
    port = pick_free_port(HOST)
    argv = [sys.executable, "-m", "services.reward", "--host", HOST, "--grpc-port", str(port)]
    argv += ["--http-port", str(pick_free_port(HOST)), "--workers", str(workers)]
    return ProcessSpec("reward", argv, env=THREAD_ENV, ready=GrpcHealth(f"{HOST}:{port}"))


def decoder_spec(tokenizer: Path, video_tokenizer: Path | None = None) -> ProcessSpec:
    port = pick_free_port(HOST)
    argv = [sys.executable, "-m", "services.decoder", "--tokenizer", str(tokenizer)]
    argv += ["--host", HOST, "--grpc-port", str(port)]
    if video_tokenizer is not None:
        argv += ["--video-tokenizer", str(video_tokenizer)]
    return ProcessSpec("decoder", argv, env=THREAD_ENV, ready=GrpcHealth(f"{HOST}:{port}"))


def rollout_spec(
    model: Path,
    redis_url: str | None,
    max_tokens: int,
    weights_root: Path | None = None,
    *,
    name: str = "rollout",
) -> ProcessSpec:
    """The rollout service serving ``model``; with ``redis_url`` it follows the trainer's
    published weights (from under ``weights_root``), without it it serves ``model`` only (e.g.
    the MLE control)."""
    port = pick_free_port(HOST)
    argv = [sys.executable, "-m", "services.rollout", "--model", str(model), "--host", HOST]
    argv += ["--grpc-port", str(port), "--max-tokens", str(max_tokens)]
    if redis_url is not None:
        argv += ["--redis-url", redis_url]
    if weights_root is not None:
        argv += ["--weights-root", str(weights_root)]
    env = {**THREAD_ENV, "RLVR_ROLLOUT_WATCH_POLL_S": "0.5"}
    return ProcessSpec(name, argv, env=env, ready=GrpcHealth(f"{HOST}:{port}"))


def trainer_spec(config: Path) -> ProcessSpec:
    argv = [sys.executable, "-m", "rlvr_world.apps.cli", "train", "--config", str(config)]
    return ProcessSpec("trainer", argv, env=THREAD_ENV, ready=LogLine(r"trainer at step \d+"))


def address_of(spec: ProcessSpec) -> str:
    """The gRPC address a spec's readiness check probes."""
    if not isinstance(spec.ready, GrpcHealth):
        raise ValueError(f"{spec.name}: no gRPC address")
    return spec.ready.address


def start_services(
    sup: Supervisor,
    *,
    model: Path,
    redis_url: str,
    max_tokens: int,
    reward_workers: int = 1,
    timeout_s: float = 180.0,
    video_tokenizer: Path | None = None,
    weights_root: Path | None = None,
) -> Addresses:
    """Start reward, decoder and rollout (at once: ``Supervisor.start_many``) and return their
    addresses.

    ``video_tokenizer``: the decoder also serves ``DecodeFrames`` with this frame tokenizer.
    ``weights_root``: where the trainer writes checkpoints (default: the supervisor's run
    directory); the rollout service loads weights from nowhere else."""
    ensure_local_token()
    specs = [
        reward_spec(reward_workers),
        decoder_spec(model, video_tokenizer),
        rollout_spec(model, redis_url, max_tokens, weights_root or sup.run_dir),
    ]
    sup.start_many(specs, timeout_s=timeout_s)
    reward, decoder, rollout = (address_of(s) for s in specs)
    return Addresses(reward=reward, decoder=decoder, rollout=rollout)
