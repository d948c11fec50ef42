"""Run a real reward service in a background thread, for tests, benchmarks and notebooks.

``with ServiceThread(settings) as svc:`` starts the scoring pool, the gRPC server and the HTTP
gateway in an event loop of their own thread (bind port 0 to get free ports) and stops exactly that
service on exit. Callers use ordinary blocking clients against ``svc.grpc_address`` and
``svc.http_url``.
"""

from __future__ import annotations

from rlvr_world.scaffold.thread import ServiceThread as _ServiceThread
from services.reward.server import RunningService, start_service
from services.reward.settings import RewardSettings


class ServiceThread(_ServiceThread[RunningService]):
    """A started reward service owned by this object."""

    def __init__(self, settings: RewardSettings, start_timeout_s: float = 120.0) -> None:
        self.settings = settings
        super().__init__(lambda: start_service(settings), start_timeout_s)

    @property
    def http_url(self) -> str:
        """The running service's HTTP gateway URL."""
        return self.service.http_url
