"""Run a real decoder service in a background thread, for tests, benchmarks and notebooks.

``with ServiceThread(settings) as svc:`` loads the tokenizer and starts the gRPC server in an
event loop of its own thread (bind port 0 to get a free port) and stops exactly that service on
exit. Callers use ordinary blocking clients against ``svc.grpc_address``.
"""

from __future__ import annotations

from rlvr_world.scaffold.thread import ServiceThread as _ServiceThread
from services.decoder.server import RunningService, start_service
from services.decoder.settings import DecoderSettings


class ServiceThread(_ServiceThread[RunningService]):
    """A started decoder service owned by this object."""

    def __init__(self, settings: DecoderSettings, start_timeout_s: float = 120.0) -> None:
        self.settings = settings
        super().__init__(lambda: start_service(settings), start_timeout_s)
