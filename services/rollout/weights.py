"""Which weights the rollout service agrees to load, through ``LoadWeights`` or the watcher.

``WeightsGate.check(version, path, served, published)`` returns the checkpoint folder to load, or
raises ``WeightsRefused`` with the gRPC status to answer:

- ``FAILED_PRECONDITION``: no ``weights_roots`` are configured, or ``version`` is not above the
  served one (versions strictly increase, so an old or replayed version cannot roll the policy
  back);
- ``PERMISSION_DENIED``: ``version`` is ahead of the trainer's latest published version (when
  the service follows a Redis; a version from the future would defeat the staleness gate), or
  ``path`` lies outside every configured root (after resolving ``..`` and symbolic links);
- ``INVALID_ARGUMENT``: a relative path, a negative version;
- ``NOT_FOUND``: inside a root but not a folder of ``*.safetensors`` files.

``WeightLoads`` runs the check and the engine's load under one lock, so two concurrent loads
cannot land out of order; ``LoadWeights`` and the watcher share it.

Messages never echo an operating-system error and say the same thing whether a path is missing,
is a file or is an empty folder, so a caller learns nothing about the filesystem beyond "no
checkpoint there". The gate is pure except for the ``stat`` calls of the last check.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import Executor
from pathlib import Path

import grpc

from services.rollout.engine import GenerationEngine

NOT_LOADABLE = "path: no loadable checkpoint there (a folder of *.safetensors files is expected)"


class WeightsRefused(Exception):
    """A load the gate refuses; ``code`` is the gRPC status to answer."""

    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code


def _inside(path: Path, roots: Sequence[Path]) -> bool:
    return any(path == root or root in path.parents for root in roots)


class WeightsGate:
    """The rules of the module docstring for one service's ``weights_roots``."""

    def __init__(self, roots: Sequence[Path]) -> None:
        self.roots = [Path(os.path.normpath(Path(r).expanduser().absolute())) for r in roots]
        self.resolved = [r.resolve() for r in self.roots]

    def check(self, version: int, path: str, served: int, published: int | None = None) -> Path:
        """The folder to load; ``WeightsRefused`` otherwise (module docstring)."""
        if not self.roots:
            raise WeightsRefused(
                grpc.StatusCode.FAILED_PRECONDITION,
                "weights: this service loads no new weights (no weights_roots configured; start "
                "it with --weights-root DIR or RLVR_ROLLOUT_WEIGHTS_ROOTS)",
            )
        if version < 0:
            raise WeightsRefused(
                grpc.StatusCode.INVALID_ARGUMENT, f"version = {version}: must be >= 0"
            )
        if version <= served:
            raise WeightsRefused(
                grpc.StatusCode.FAILED_PRECONDITION,
                f"version {version}: not newer than the served version {served} (versions must "
                "strictly increase)",
            )
        if published is not None and version > published:
            raise WeightsRefused(
                grpc.StatusCode.PERMISSION_DENIED,
                f"version {version}: ahead of the trainer's latest published version {published}",
            )
        return self.folder(path)

    def folder(self, path: str) -> Path:
        """``path`` as a checkpoint folder inside a root (the path checks of ``check``)."""
        if not path or "\x00" in path:
            raise WeightsRefused(grpc.StatusCode.INVALID_ARGUMENT, "path: empty or not a path")
        given = Path(path)
        if not given.is_absolute():
            raise WeightsRefused(grpc.StatusCode.INVALID_ARGUMENT, "path: must be absolute")
        lexical = Path(os.path.normpath(given))
        if not _inside(lexical, self.roots):
            raise WeightsRefused(
                grpc.StatusCode.PERMISSION_DENIED, "path: outside the configured weights roots"
            )
        try:
            real = lexical.resolve()
        except (OSError, RuntimeError):  # a symlink loop
            raise WeightsRefused(grpc.StatusCode.NOT_FOUND, NOT_LOADABLE) from None
        if not _inside(real, self.resolved):
            raise WeightsRefused(
                grpc.StatusCode.PERMISSION_DENIED, "path: outside the configured weights roots"
            )
        try:
            loadable = real.is_dir() and any(real.glob("*.safetensors"))
        except OSError:
            loadable = False
        if not loadable:
            raise WeightsRefused(grpc.StatusCode.NOT_FOUND, NOT_LOADABLE)
        return real


#: The trainer's latest published version, or None where the service follows no trainer.
Published = Callable[[], Awaitable[int | None]]


async def nothing_published() -> int | None:
    """``Published`` of a service that follows no trainer: always None."""
    return None


class WeightLoads:
    """Checks (``WeightsGate``) and loads weights one load at a time, so that two concurrent
    loads cannot land out of order; shared by ``LoadWeights`` and the watcher."""

    def __init__(self, engine: GenerationEngine, executor: Executor, gate: WeightsGate) -> None:
        self.engine = engine
        self.executor = executor
        self.gate = gate
        self._lock = asyncio.Lock()

    async def load(self, version: int, path: str, published: Published) -> float:
        """Seconds the load took; ``WeightsRefused`` or the engine's error otherwise."""
        async with self._lock:
            served = self.engine.policy_version
            latest = await published() if version > served else None
            folder = self.gate.check(version, path, served, latest)
            return await asyncio.get_running_loop().run_in_executor(
                self.executor, self.engine.load_weights, version, str(folder)
            )
