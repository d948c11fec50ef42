"""The text-scoring process pool of one reward worker, driven from the service's event loop.

Why not ``ProcessPoolExecutor``: it keeps only ``workers + 1`` calls in its call queue and feeds the
next one from a management thread, which must win the GIL from the busy event-loop thread (5 ms
switch interval) each time; measured on 2 cores, the processes sat idle about a third of the time.
Here each ``spawn`` process has its own socket pair, and the event loop itself (no helper threads)
writes chunks and reads results without blocking: every process always holds ``DEPTH`` chunks (one
running, the next already in its socket), so it never waits for the service process. The rest wait
in a backlog and go to whichever process answers first, which keeps the processes balanced.

Frames are a 4-byte big-endian length and a pickle: ``(chunk_id, rows)`` to a process,
``(chunk_id, results)`` back (``chunk_id`` -1 is the start-up "ready"). A chunk whose future is
cancelled (deadline) before it is sent is dropped; one already sent runs and its result is dropped.
A chunk whose function raises (a bug, ``MemoryError``, an answer that cannot be pickled) is
answered ``ChunkFailed`` and the process goes on: no request can make it exit. A process that dies
anyway (killed, a crash in native code) fails the chunks it held (``ProcessDied``) and is replaced
(after a pause if it died before it was ready); one that dies during ``start()`` makes ``start()``
raise. ``live`` counts the processes ready to score; ``on_change`` reports it, so readiness can
say when the pool is degraded.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import pickle
import signal
import socket
import struct
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing import get_context
from multiprocessing.process import BaseProcess
from typing import Any

log = logging.getLogger(__name__)
#: Chunks held by one process at a time: the running one and the next one, already delivered.
DEPTH = 2
#: ... or more while it holds fewer rows than this (single requests take well under a millisecond).
FEED_ROWS = 8
MAX_HELD = 16
#: Pause before replacing a process that died during its start-up (no tight respawn loop).
RESPAWN_PAUSE_S = 1.0
#: Longest wait for a process whose socket closed to exit, before it is killed.
EXIT_WAIT_S = 30.0
_HEADER = struct.Struct("!I")
_READY = -1
_RECV_BYTES = 1 << 20
#: One chunk's function, module level (it is pickled by name into the processes): work -> answer.
ChunkFn = Callable[[Any], Any]


class ProcessDied(RuntimeError):
    """The process scoring a chunk exited before answering it."""


class ChunkFailed(RuntimeError):
    """The chunk's function raised in the process (which lives on); the message says what."""


def frame(obj: object) -> bytes:
    """``obj`` pickled behind its length (the pool's socket framing)."""
    payload = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    return _HEADER.pack(len(payload)) + payload


def _worker_main(sock: socket.socket, fn: ChunkFn, init: Callable[[], None] | None) -> None:
    """Process side: read ``(id, rows)`` frames until EOF, answer ``(id, fn(rows))`` each.

    Ctrl-C in a terminal, and a supervisor's SIGTERM to the service's process group, reach every
    process of the group: the service drains, then closes the pool, so the processes ignore SIGINT
    and SIGTERM instead of dying under the chunks they hold (the drain then answered those rows
    "scoring process died"). They exit when the pool closes their socket, or on SIGKILL."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if init is not None:
        init()
    reader = sock.makefile("rb")
    sock.sendall(frame((_READY, None)))
    while True:
        head = reader.read(_HEADER.size)
        if len(head) < _HEADER.size:
            return  # the pool closed its end: shut down
        (size,) = _HEADER.unpack(head)
        chunk_id, rows = pickle.loads(reader.read(size))
        sock.sendall(_answer(chunk_id, fn, rows))


def _answer(chunk_id: int, fn: ChunkFn, rows: Any) -> bytes:
    """The framed answer to one chunk; ``ChunkFailed`` instead of dying when anything raises."""
    try:
        return frame((chunk_id, fn(rows)))
    except Exception as exc:  # everything a request could trigger; the process must live on
        log.exception("chunk %d failed in the scoring process", chunk_id)
        return frame((chunk_id, ChunkFailed(f"{type(exc).__name__}: {str(exc)[:500]}")))


@dataclass
class _Chunk:
    id: int
    rows: Any
    future: asyncio.Future[Any]
    size: int


@dataclass
class _Worker:
    proc: BaseProcess
    sock: socket.socket
    ready: bool = False
    held: dict[int, _Chunk] = field(default_factory=dict)
    inbox: bytearray = field(default_factory=bytearray)
    outbox: bytearray = field(default_factory=bytearray)
    writing: bool = False


class ScoringPool:
    """``workers`` processes running ``fn`` on chunks; ``submit`` is called on the event loop."""

    def __init__(
        self,
        workers: int,
        fn: ChunkFn,
        init: Callable[[], None] | None = None,
        on_change: Callable[[int, int], None] | None = None,
        on_live: Callable[[int], None] | None = None,
    ) -> None:
        """``on_change(busy_processes, outstanding_chunks)`` is called whenever either may have
        changed, ``on_live(live_processes)`` likewise (on the event loop)."""
        self.workers = workers
        self._fn = fn
        self._init = init
        self._on_change = on_change
        self._on_live = on_live
        self._loop: asyncio.AbstractEventLoop | None = None
        self._procs: list[_Worker] = []
        self._backlog: deque[_Chunk] = deque()
        self._next_id = 0
        self._closed = False
        self._ready_waiters: list[asyncio.Future[None]] = []

    # ------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        """Spawn the processes and wait until each has imported and warmed up its scorers."""
        self._loop = asyncio.get_running_loop()
        for _ in range(self.workers):
            self._spawn()
        try:
            while not all(w.ready for w in self._procs):
                waiter = self._loop.create_future()
                self._ready_waiters.append(waiter)
                await waiter
        except RuntimeError:
            self.close()
            raise

    def _spawn(self) -> None:
        assert self._loop is not None
        ours, theirs = socket.socketpair()
        proc = get_context("spawn").Process(
            target=_worker_main,
            args=(theirs, self._fn, self._init),
            name="reward-scorer",
            daemon=True,
        )
        proc.start()
        theirs.close()  # the process holds it now; its exit closes the pair
        ours.setblocking(False)
        worker = _Worker(proc, ours)
        self._procs.append(worker)
        self._loop.add_reader(ours.fileno(), self._on_readable, worker)

    def close(self, timeout_s: float = 10.0) -> None:
        """Stop the processes after the chunks they hold (callable from any thread)."""
        if self._closed:
            return
        self._closed = True
        loop = self._loop
        if loop is not None and loop.is_running() and not _in_loop(loop):
            done = threading.Event()

            def detach() -> None:
                self._detach()
                done.set()

            loop.call_soon_threadsafe(detach)
            done.wait(timeout_s)
        else:
            self._detach()
        for w in self._procs:
            w.proc.join(timeout_s)
            if w.proc.is_alive():
                log.warning("scoring process %s did not stop; killing it", w.proc.pid)
                w.proc.kill()
                w.proc.join(timeout_s)
            w.sock.close()
        for chunk in self._backlog:
            if not chunk.future.done():
                chunk.future.get_loop().call_soon_threadsafe(_cancel, chunk.future)
        self._backlog.clear()

    def _detach(self) -> None:
        """Loop side of ``close``: stop watching the sockets, send EOF to every process."""
        for w in self._procs:
            if self._loop is not None and not self._loop.is_closed():
                self._loop.remove_reader(w.sock.fileno())
                self._loop.remove_writer(w.sock.fileno())
            with contextlib.suppress(OSError):  # already gone
                w.sock.shutdown(socket.SHUT_WR)

    # ------------------------------------------------------------ work

    def submit(self, rows: Any, size: int | None = None) -> asyncio.Future[Any]:
        """Queue one chunk of ``size`` requests (default ``len(rows)``); its future gets
        ``fn(rows)``, or ``ProcessDied``."""
        if self._loop is None or self._closed:
            raise RuntimeError("scoring pool not running")
        chunk = _Chunk(
            self._next_id, rows, self._loop.create_future(), len(rows) if size is None else size
        )
        self._next_id += 1
        self._backlog.append(chunk)
        self._dispatch()
        return chunk.future

    @property
    def outstanding(self) -> int:
        """Chunks submitted and not yet answered."""
        return len(self._backlog) + sum(len(w.held) for w in self._procs)

    def _dispatch(self) -> None:
        """Give backlog chunks to ready processes that can take more, emptiest first."""
        while self._backlog:
            free = [w for w in self._procs if w.ready and _hungry(w)]
            if not free:
                break
            chunk = self._backlog.popleft()
            if chunk.future.done():  # cancelled by its deadline before it ran
                continue
            worker = min(free, key=lambda w: len(w.held))
            worker.held[chunk.id] = chunk
            worker.outbox += frame((chunk.id, chunk.rows))
            self._flush(worker)
        self._changed()

    @property
    def live(self) -> int:
        """Processes started and ready to score (fewer than ``workers``: degraded)."""
        return sum(1 for w in self._procs if w.ready)

    def _changed(self) -> None:
        if self._on_change is not None:
            busy = sum(1 for w in self._procs if w.held)
            self._on_change(busy, self.outstanding)
        if self._on_live is not None:
            self._on_live(self.live)

    def _flush(self, worker: _Worker) -> None:
        """Write as much of the outbox as the socket takes; the rest when it is writable."""
        assert self._loop is not None
        try:
            sent = worker.sock.send(worker.outbox)
        except BlockingIOError:
            sent = 0
        except OSError:
            sent = len(worker.outbox)  # the process is gone; the reader reports it
        del worker.outbox[:sent]
        if worker.outbox and not worker.writing:
            self._loop.add_writer(worker.sock.fileno(), self._flush, worker)
            worker.writing = True
        elif not worker.outbox and worker.writing:
            self._loop.remove_writer(worker.sock.fileno())
            worker.writing = False

    def _on_readable(self, worker: _Worker) -> None:
        try:
            data = worker.sock.recv(_RECV_BYTES)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            self._lost(worker)
            return
        worker.inbox += data
        answered = False
        while len(worker.inbox) >= _HEADER.size:
            (size,) = _HEADER.unpack_from(worker.inbox)
            end = _HEADER.size + size
            if len(worker.inbox) < end:
                break
            chunk_id, results = pickle.loads(memoryview(worker.inbox)[_HEADER.size : end])
            del worker.inbox[:end]
            if chunk_id == _READY:
                worker.ready = True
                self._wake_starters()
                self._changed()
            else:
                chunk = worker.held.pop(chunk_id)
                if chunk.future.done():
                    pass
                elif isinstance(results, ChunkFailed):
                    chunk.future.set_exception(results)
                else:
                    chunk.future.set_result(results)
            answered = True
        if answered:
            self._dispatch()

    def _wake_starters(self) -> None:
        for waiter in self._ready_waiters:
            if not waiter.done():
                waiter.set_result(None)
        self._ready_waiters.clear()

    def _lost(self, worker: _Worker) -> None:
        """A process closed its socket (EOF): stop using it; once it has exited, fail what it
        held and replace it (``_exited``).

        The socket can close before the process has exited (``SystemExit`` in ``init`` drops the
        socket, then the interpreter shuts down), and on a loaded machine that gap can be long:
        waiting on the process's sentinel instead of a fixed join keeps the event loop free and
        the exit code known. One that does not exit within ``EXIT_WAIT_S`` is killed."""
        assert self._loop is not None
        self._loop.remove_reader(worker.sock.fileno())
        if worker.writing:
            self._loop.remove_writer(worker.sock.fileno())
        worker.sock.close()
        self._procs.remove(worker)
        self._changed()
        if worker.proc.exitcode is not None:
            self._exited(worker)
            return
        loop, sentinel = self._loop, worker.proc.sentinel
        kill = loop.call_later(EXIT_WAIT_S, worker.proc.kill)

        def on_exit() -> None:
            loop.remove_reader(sentinel)
            kill.cancel()
            self._exited(worker)

        loop.add_reader(sentinel, on_exit)

    def _exited(self, worker: _Worker) -> None:
        """The process of ``worker`` has exited: fail what it held; replace it, or fail
        ``start()`` if it died starting."""
        assert self._loop is not None
        worker.proc.join(1.0)  # its sentinel closed: reaped at once
        code = worker.proc.exitcode
        log.error(
            "scoring process %s died (exit code %s); starting a new one", worker.proc.pid, code
        )
        err = ProcessDied(f"scoring process died (exit code {code})")
        for chunk in worker.held.values():
            if not chunk.future.done():
                chunk.future.set_exception(err)
        worker.held.clear()
        if not worker.ready and self._ready_waiters:  # start() is waiting: fail it, no retries
            for waiter in self._ready_waiters:
                if not waiter.done():
                    waiter.set_exception(RuntimeError(f"{err} while starting"))
            self._ready_waiters.clear()
        elif not self._closed:
            # one that died before it was ready is retried after a pause, not in a tight loop
            self._loop.call_later(0 if worker.ready else RESPAWN_PAUSE_S, self._respawn)
        self._changed()

    def _respawn(self) -> None:
        if not self._closed:
            self._spawn()


def _hungry(worker: _Worker) -> bool:
    held = len(worker.held)
    if held < DEPTH:
        return True
    return held < MAX_HELD and sum(c.size for c in worker.held.values()) < FEED_ROWS


def _in_loop(loop: asyncio.AbstractEventLoop) -> bool:
    try:
        return asyncio.get_running_loop() is loop
    except RuntimeError:
        return False


def _cancel(fut: asyncio.Future[Any]) -> None:
    if not fut.done():
        fut.cancel()
