"""Run a real rollout service in a background thread, for tests, benchmarks and notebooks.

``with ServiceThread(settings) as svc:`` loads the engine and starts the gRPC server (and the
weights watcher when ``settings.redis_url`` is set) in an event loop of its own thread (bind port 0
to get a free port) and stops exactly that service on exit. Callers use ordinary blocking clients
against ``svc.grpc_address``.
"""

from __future__ import annotations

from rlvr_world.scaffold.thread import ServiceThread as _ServiceThread
from services.rollout.engine import GenerationEngine
from services.rollout.server import RunningService, start_service
from services.rollout.settings import RolloutSettings


class ServiceThread(_ServiceThread[RunningService]):
    """A started rollout service owned by this object (``engine``: reuse an already loaded one)."""

    def __init__(
        self,
        settings: RolloutSettings,
        engine: GenerationEngine | None = None,
        start_timeout_s: float = 300.0,
    ) -> None:
        self.settings = settings
        super().__init__(lambda: start_service(settings, engine), start_timeout_s)

    def __enter__(self) -> ServiceThread:
        self.start()
        return self
