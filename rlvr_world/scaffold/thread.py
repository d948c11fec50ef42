"""Run a service in a background thread (tests, notebooks), or in the foreground until a signal.

Each service's ``testing`` module subclasses ``ServiceThread`` with its own start coroutine, so
``with ServiceThread(settings) as svc:`` starts the service in an event loop of its own thread
(bind port 0 to get free ports) and stops exactly that service on exit. Callers use ordinary
blocking clients against ``svc.grpc_address``. Imports nothing heavy.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine
from typing import Any, Generic, Protocol, TypeVar

T = TypeVar("T")


class RunningService(Protocol):
    """What every service's ``start_service`` returns."""

    @property
    def grpc_address(self) -> str:
        """``host:port`` of its gRPC server."""
        ...

    async def stop(self, grace_s: float | None = None) -> None:
        """Drain and stop; ``grace_s`` None: the service's own grace period."""
        ...


S = TypeVar("S", bound=RunningService)


class ServiceThread(Generic[S]):
    """A started service owned by this object."""

    def __init__(
        self, starter: Callable[[], Coroutine[Any, Any, S]], start_timeout_s: float = 120.0
    ) -> None:
        self._starter = starter
        self._timeout = start_timeout_s
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._service: S | None = None

    def run(self, coro: Coroutine[Any, Any, T], timeout_s: float | None = None) -> T:
        """Run a coroutine in the service's loop and wait for its result."""
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout_s or self._timeout)

    def start(self) -> ServiceThread[S]:
        """Start the loop thread and the service in it; raises what the start raises, or
        ``TimeoutError`` past ``start_timeout_s``."""
        self._thread.start()
        self._service = self.run(self._starter())
        return self

    def stop(self, grace_s: float = 2.0) -> None:
        """Drain the service (``grace_s`` for in-flight calls), stop the loop, join the thread."""
        if self._service is not None:
            self.run(self._service.stop(grace_s))
            self._service = None
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)

    @property
    def service(self) -> S:
        """The running service; ``RuntimeError`` before ``start`` or after ``stop``."""
        if self._service is None:
            raise RuntimeError("service not started")
        return self._service

    @property
    def grpc_address(self) -> str:
        """The running service's ``host:port``."""
        return self.service.grpc_address

    def __enter__(self) -> ServiceThread[S]:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


async def serve_until_signal(service: RunningService) -> None:
    """Run a started service until SIGTERM or SIGINT, then drain it gracefully (a second signal
    during the drain is ignored: the drain is already bounded by the grace period)."""
    import logging
    import signal

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    logging.getLogger(__name__).info("signal received; shutting down (draining)")
    await service.stop()
