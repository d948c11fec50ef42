"""Run a real decoder service in a background thread, for tests, benchmarks and notebooks.

``with ServiceThread(settings) as svc:`` loads the tokenizer and starts the gRPC server in an
event loop of its own thread (bind port 0 to get a free port) and stops exactly that service on
exit. Callers use ordinary blocking clients against ``svc.grpc_address``.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

from services.decoder.server import RunningService, start_service
from services.decoder.settings import DecoderSettings

T = TypeVar("T")


class ServiceThread:
    """A started decoder service owned by this object."""

    def __init__(self, settings: DecoderSettings, start_timeout_s: float = 120.0) -> None:
        self.settings = settings
        self._timeout = start_timeout_s
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._service: RunningService | None = None

    def run(self, coro: Coroutine[Any, Any, T], timeout_s: float | None = None) -> T:
        """Run a coroutine in the service's loop and wait for its result."""
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout_s or self._timeout)

    def start(self) -> ServiceThread:
        self._thread.start()
        self._service = self.run(start_service(self.settings))
        return self

    def stop(self, grace_s: float = 2.0) -> None:
        if self._service is not None:
            self.run(self._service.stop(grace_s))
            self._service = None
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)

    @property
    def service(self) -> RunningService:
        if self._service is None:
            raise RuntimeError("service not started")
        return self._service

    @property
    def grpc_address(self) -> str:
        return self.service.grpc_address

    def __enter__(self) -> ServiceThread:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
