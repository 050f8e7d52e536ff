"""The delivery writer in a child process of ``serve`` (``SWITCHBOARD_DELIVERY_WRITER=process``).

Issue 11: the receiver's writer thread shared the serving process's interpreter lock with the
event loop. Measured with ``bench/ingest.py`` on two cores, the writer thread spent about 1 ms
of wall time per delivery (0.36 ms of it its own work: binding, sealing, SQLite) and the
event loop alone, with no writer, acked twice as fast as with it. :class:`ProcessWriter` keeps
the :class:`~switchboard.web.ingest.DeliveryWriter` contract (``store`` awaits ``("stored",
id)``, ``("duplicate", first_id)`` or ``(STALE, None)``) and runs the write transactions in a
child process with its own interpreter lock:

- ``store`` (on the event loop) queues the row and awaits a future. The rows go to the child's
  pipe, pickled into one message, when the child has nothing in flight (at once), when
  :data:`SEND_EVERY` rows wait, and at the end of the loop's pass (see :meth:`ProcessWriter.store`).
- The child takes every message waiting (up to :data:`~switchboard.web.ingest.MAX_BATCH`
  rows) into one write transaction (:func:`~switchboard.web.ingest.write_batch`, the thread
  writer's own code), commits, and sends the outcomes back as one message.
- ``serve``'s event loop reads the outcomes, hands the stored deliveries to processing
  (``Dispatcher.submit``, as the thread writer does after its commit; with Redis the child
  enqueues their rq jobs itself, after answering) and settles the futures. Nothing is
  acknowledged before the child's commit.
- A child that dies fails the requests waiting on it with a 503 (the provider retries; a row
  committed just before the death is then a duplicate, answered 200 with its id); while no
  child runs, deliveries are written by a :class:`~switchboard.web.ingest.DeliveryWriter`
  thread in ``serve``, so ingest never stops. A supervisor starts another child (after
  :data:`~switchboard.queue.child.RESTART_SECONDS`, doubling while children die young). The
  child exits when ``serve`` goes (its pipe closes), ignores SIGINT and SIGTERM (they reach
  the whole process group), and stops when ``serve`` closes it, after the rows already sent.
"""

from __future__ import annotations

import asyncio
import logging
import multiprocessing as mp
import os
import pickle
import socket
import struct
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from switchboard.errors import DependencyUnavailable, SwitchboardError
from switchboard.queue.child import hook_exit, reap, supervise, wait_ready
from switchboard.web.ingest import STALE, DeliveryWriter, Outcome, hand_off
from switchboard.web.ingest import STORE_FAILED as _STORE_FAILED
from switchboard.web.writer_main import to_pipe, writer_main

if TYPE_CHECKING:
    from collections.abc import Callable

    from switchboard.hub import Hub

log = logging.getLogger(__name__)

SEND_EVERY = 8
"""While the child is busy, the rows of one pass of the event loop go to it in messages of this
many (and what is left at the end of the pass), not all at the end of the pass (issue 11). The
child's transactions are smaller for it; with Redis, the rq hand-off's wait
(:data:`~switchboard.queue.dispatcher.RQ_LINGER_SECONDS`) gathers their ids into jobs large
enough for the workers to keep up. 8 rather than 4 (2026-12-07, with time-ordered delivery ids,
ten rounds of 20,000 alternated): 59.8 % of the bare route against 56.9 % for neither change,
58.1 % for the ids alone and 58.2 % for 8 alone, the child 144 against 159 µs a row; the
commit against its parent, 59.7 % against 58.9 %. Fewer messages and fewer, larger
transactions (docs/PERFORMANCE.md)."""


ANSWER_SECONDS = 15.0
"""A row the child has not answered this long after ``store`` took it fails with a 503, and
``/ready`` fails until a child answers or is replaced (:meth:`ProcessWriter._watch`). Above
SQLite's busy timeout (10 s), after which a waiting child answers a 503 itself."""
WATCH_SECONDS = 1.0
"""How often the event loop looks for rows past :data:`ANSWER_SECONDS` (one timer, not one a row:
a timer per request was about 3 % of the loop's samples at full ingest, issue 11)."""


@dataclass(slots=True)
class _Pending:
    """A row handed to :meth:`ProcessWriter.store`, until its child answers."""

    future: asyncio.Future[Outcome]
    delivery_id: str
    dispatch: bool
    sent: float = 0.0  # when store() took it, the event loop's clock (seconds)
    link: _Link | None = None
    """The child's pipe it was sent on; ``None`` while it waits for this pass's flush."""


def _frame(data: bytes) -> list[bytes]:
    """``data`` in ``multiprocessing``'s framing (what ``Connection.recv`` reads): a 4-byte
    big-endian length, or -1 and an 8-byte length past 2 GiB, then the bytes."""
    head = struct.pack("!i", len(data)) if len(data) <= 0x7FFFFFFF else struct.pack("!iQ", -1, len(data))
    return [head, data]


def _error(described: tuple[str, str]) -> SwitchboardError:
    """The receiver's error for a child's ``(kind, message)``: a 503 to retry either way."""
    return DependencyUnavailable(described[1] if described[0] == "unavailable" else _STORE_FAILED)


class _Link(asyncio.Protocol):
    """The serving side of the child's pipe, on the event loop: frames of ``multiprocessing``'s
    ``Connection`` (see :func:`_frame`: a big-endian length, then a pickle) in both directions."""

    def __init__(self, writer: ProcessWriter) -> None:
        self.writer = writer
        self.transport: asyncio.Transport | None = None
        self._buffer = bytearray()
        self.closed = asyncio.get_running_loop().create_future()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self._buffer += data
        while len(self._buffer) >= 4:
            size = struct.unpack_from("!i", self._buffer)[0]
            head = 4
            if size == -1:  # multiprocessing's header for a message over 2 GiB
                if len(self._buffer) < 12:
                    return
                size, head = struct.unpack_from("!Q", self._buffer, 4)[0], 12
            if len(self._buffer) < head + size:
                return
            message = pickle.loads(self._buffer[head:head + size])  # our own child's pipe
            del self._buffer[:head + size]
            self.writer._received(self, message)

    def connection_lost(self, exc: Exception | None) -> None:
        self.writer._lost(self)
        if not self.closed.done():
            self.closed.set_result(None)


class ProcessWriter:
    """:class:`~switchboard.web.ingest.DeliveryWriter`'s contract, the transactions in a child.

    The pipe is read and written on the serving event loop (no thread between the request and
    the child: a thread hand-off each way cost the loop about 0.3 ms a delivery in interpreter
    lock switches, more than the write itself; issue 11). :meth:`start` (on the loop, from
    ``serve``'s lifespan) starts the child; until it is ready, and whenever it is not, rows
    are written by a :class:`~switchboard.web.ingest.DeliveryWriter` thread in ``serve``.

    Args:
        hub: the serving process's hub (its settings, source cache and fallback thread writer).
        on_stored: called on the event loop with the ids stored by each of the child's commits,
            for the deliveries to hand to processing (``Dispatcher.submit``: no I/O). Not with
            Redis: the child enqueues their rq jobs itself.
    """

    def __init__(self, hub: Hub, on_stored: Callable[[list[str]], None]) -> None:
        self.hub = hub
        self.on_stored = on_stored
        self._settings = hub.settings
        self._lock = threading.Lock()
        self._pending: dict[int, _Pending] = {}  # by sequence number
        self._seq = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._link: _Link | None = None
        self._out: list[tuple[int, dict[str, Any], int, bool, str | None]] = []
        self._child_hands_off = bool(hub.settings.redis_url)  # see writer_main
        self._flush_scheduled = False
        self._process: Any = None
        self._ready = threading.Event()
        self._first_exited = threading.Event()
        self._closing = threading.Event()
        self._fallback: DeliveryWriter | None = None
        self._fallback_logged = False
        self._context = mp.get_context("spawn")
        self._supervisor: threading.Thread | None = None
        self._sock: socket.socket | None = None
        self._stop_sent = False
        self._stalled = False
        self.restarts = 0

    @property
    def pid(self) -> int | None:
        """The child's process id (``None`` before it started)."""
        with self._lock:
            return None if self._process is None else self._process.pid

    def healthy(self) -> bool:
        """True while a child is running and ready."""
        return self._ready.is_set()

    @property
    def stalled(self) -> bool:
        """True from a row's :data:`ANSWER_SECONDS` without an answer until a child answers."""
        return self._stalled

    def _watch(self) -> None:
        """Every :data:`WATCH_SECONDS`: fail the rows the child has not answered in
        :data:`ANSWER_SECONDS` (503, as after its death). A break run stopped the child
        (``SIGSTOP``): every hook request hung with no deadline and ``/ready`` said ok."""
        assert self._loop is not None
        if self._closing.is_set():
            return
        self._loop.call_later(WATCH_SECONDS, self._watch)
        late = self._loop.time() - ANSWER_SECONDS
        old = [seq for seq, entry in self._pending.items() if entry.link is not None and entry.sent < late]
        if old:
            self._stalled = True
            log.error("the delivery writer process answered none of %d deliveries in %s s; they get 503",
                      len(old), ANSWER_SECONDS)
            self._fail(old, f"the delivery writer did not answer in {ANSWER_SECONDS:g} s; retry the delivery")

    def start(self) -> None:
        """Start the child and its supervisor; call on the serving event loop, once."""
        if self._supervisor is not None:
            return
        self._loop = asyncio.get_running_loop()
        self._loop.call_later(WATCH_SECONDS, self._watch)
        self._supervisor = threading.Thread(target=self._supervise, name="switchboard-writer-supervisor",
                                            daemon=True)
        self._supervisor.start()

    def wait_ready(self, timeout: float) -> bool:
        """Block until the child is ready (``serve`` waits before it listens). False when
        ``timeout`` seconds passed first or the first child ended before it was ready."""
        return wait_ready(self._ready, self._first_exited, timeout)

    async def store(self, row: dict[str, Any], stamp: int, dispatch: bool = True,
                    admit: str | None = None) -> tuple[str, str | None]:
        """As :meth:`DeliveryWriter.store`; the row is admitted and written by the child process."""
        loop = asyncio.get_running_loop()
        if loop is not self._loop or self._link is None or not self._ready.is_set():
            return await self._fallback_writer().store(row, stamp, dispatch, admit)
        future: asyncio.Future[Outcome] = loop.create_future()
        self._seq += 1
        self._pending[self._seq] = _Pending(future, row["id"], dispatch, loop.time())
        self._out.append((self._seq, row, stamp, dispatch, admit))
        # Sent early rather than only once at the end of this pass of the loop: a pass can run a
        # dozen requests (several ms), and meanwhile the child sat idle, or finished its
        # transaction and found nothing waiting. The child takes every message waiting into one
        # transaction, so what is sent while it writes still makes one batch. bench/ingest.py's
        # ack path, seven runs each alternated: 59 -> 64 % of the bare route (medians, PERFORMANCE).
        if self._in_flight == 0 or len(self._out) >= SEND_EVERY:
            self._flush()
        elif not self._flush_scheduled:
            self._flush_scheduled = True
            loop.call_soon(self._end_of_pass)
        return await future

    @property
    def _in_flight(self) -> int:
        """Rows sent to a child and not answered yet: every pending row not waiting in ``_out``
        (an answer, a failure and the thread writer's fallback each take a row off ``_pending``)."""
        return len(self._pending) - len(self._out)

    def _end_of_pass(self) -> None:
        self._flush_scheduled = False
        self._flush()

    def _flush(self) -> None:
        out, self._out = self._out, []
        link = self._link
        if not out:
            return
        if link is None or link.transport is None or link.transport.is_closing():
            # The child went between store() and this flush: these never reached it, so the
            # thread writer stores them (the request waits for that, no 503).
            for seq, row, stamp, dispatch, admit in out:
                entry = self._pending.pop(seq, None)
                if entry is not None:
                    asyncio.ensure_future(self._write_here(entry.future, row, stamp, dispatch, admit))
            return
        try:
            message = [(seq, to_pipe(row), stamp, dispatch, admit) for seq, row, stamp, dispatch, admit in out]
            link.transport.writelines(_frame(pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)))
        except Exception as exc:  # noqa: BLE001 - e.g. out of memory: these requests get their 503
            log.warning("could not send %d deliveries to the writer process (%s)", len(out), type(exc).__name__)
            self._fail([item[0] for item in out])
            return
        for item in out:
            entry = self._pending.get(item[0])
            if entry is not None:
                entry.link = link

    async def _write_here(self, future: asyncio.Future[Outcome], row: dict[str, Any], stamp: int,
                          dispatch: bool, admit: str | None) -> None:
        try:
            outcome = await self._fallback_writer().store(row, stamp, dispatch, admit)
        except Exception as exc:  # noqa: BLE001 - the request's own answer (a 503 for the database)
            if not future.done():
                future.set_exception(exc)
            return
        if not future.done():
            future.set_result(outcome)

    def _fallback_writer(self) -> DeliveryWriter:
        with self._lock:
            if self._fallback is None:
                self._fallback = DeliveryWriter(self.hub, self.on_stored)
            logged, self._fallback_logged = self._fallback_logged, True
            fallback = self._fallback
        if not logged:
            log.warning("the delivery writer process is not running; deliveries are written by serve meanwhile")
        return fallback

    def _stop_frame(self) -> None:
        """On the loop: send what waits, then ``None`` (the child stops after what it has)."""
        link = self._link
        if self._stop_sent or link is None or link.transport is None or link.transport.is_closing():
            return
        self._stop_sent = True
        self._flush()
        link.transport.writelines(_frame(pickle.dumps(None)))

    async def aclose(self, timeout: float = 10.0) -> None:
        """On the loop (``serve``'s lifespan, before :meth:`close`): ask the child to stop and
        wait for it while the loop keeps running, so a large row still in the pipe's buffer
        reaches it (a blocked loop could not send it)."""
        self._closing.set()
        link = self._link
        self._stop_frame()
        if link is not None:
            try:
                await asyncio.wait_for(asyncio.shield(link.closed), timeout)
            except TimeoutError:
                log.warning("the delivery writer process did not stop within %.0f s", timeout)

    def close(self) -> None:
        """Ask the child to stop after what it has (10 s at most), then stop the supervisor."""
        self._closing.set()
        if self._loop is not None:
            if _running_loop() is self._loop:
                self._stop_frame()
            else:
                try:
                    self._loop.call_soon_threadsafe(self._stop_frame)
                except RuntimeError:  # the loop is closed: the child reads end-of-file instead
                    self._hang_up()
        self._reap(10.0)
        if self._supervisor is not None:
            self._supervisor.join(timeout=5)
        with self._lock:
            fallback, self._fallback = self._fallback, None
        if fallback is not None:
            fallback.close()
        self._ready.clear()

    def _hang_up(self) -> None:
        """Shut our end of the pipe down: the child reads end-of-file and stops after its batch."""
        with self._lock:
            sock = self._sock
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def _reap(self, timeout: float) -> None:
        """Wait up to ``timeout`` seconds for the child to exit, then kill it."""
        with self._lock:
            process = self._process
        reap(process, timeout)

    def _at_exit(self) -> None:
        """At interpreter exit (registered after ``multiprocessing``'s own hook, so it runs
        first): a child still running (``serve`` force-quit, or its start-up failed before the
        lifespan's shutdown) is hung up on and reaped, or ``multiprocessing`` would wait for it
        forever (it ignores the SIGTERM that hook sends)."""
        self._closing.set()
        self._hang_up()
        self._reap(5.0)

    # On the loop: the child's messages.

    def _received(self, link: _Link, message: Any) -> None:
        if message == ("ready",):
            self._link, self._stalled = link, False  # a new child (a stalled one was killed)
            with self._lock:
                self._fallback_logged = False
            self._ready.set()
            return
        self._stalled = False
        stored: list[str] = []
        stale = False
        settled: list[tuple[asyncio.Future[Outcome], Outcome | None, tuple[str, str] | None]] = []
        for seq, outcome, error in message:
            entry = self._pending.pop(seq, None)
            if entry is None:
                continue
            if outcome is not None and outcome[0] == "stored" and entry.dispatch:
                stored.append(entry.delivery_id)
            stale = stale or (outcome is not None and outcome[0] == STALE)
            settled.append((entry.future, outcome, error))
        if stale:
            self.hub.source_cache.invalidate()
        if not self._child_hands_off:
            hand_off(self.on_stored, stored)
        for future, outcome, error in settled:
            if future.done():
                continue
            if error is not None:
                future.set_exception(_error(error))
            else:
                future.set_result(outcome)  # type: ignore[arg-type]

    def _lost(self, link: _Link) -> None:
        if self._link is link:
            self._link, self._stalled = None, False  # serve writes deliveries itself meanwhile
            self._ready.clear()
        # What this child was sent fails (committed or not); what is still waiting for this
        # pass's flush never reached it and goes to the thread writer there; what a newer
        # child was sent is that child's.
        self._fail([seq for seq, entry in self._pending.items() if entry.link is link])

    def _fail(self, seqs: list[int], why: str = "the delivery writer restarted; retry the delivery") -> None:
        """Answer these requests with a 503: their child died or stalled, committed or not (a
        retry is then a duplicate, answered 200 with the delivery's id)."""
        for seq in seqs:
            entry = self._pending.pop(seq, None)
            if entry is not None and not entry.future.done():
                entry.future.set_exception(DependencyUnavailable(why))

    # The supervisor: start the child, wait for it to end, start another.

    def _spawn(self) -> socket.socket:
        here, there = self._context.Pipe(duplex=True)
        try:
            process = self._context.Process(target=writer_main, args=(self._settings, there),
                                            name="switchboard-delivery-writer", daemon=True)
            process.start()
            hook_exit(self._at_exit)
            sock = socket.socket(fileno=os.dup(here.fileno()))
        except BaseException:
            here.close()
            there.close()
            raise
        here.close()
        there.close()
        with self._lock:
            self._process, self._sock = process, sock
        return sock

    async def _attach(self, sock: socket.socket) -> _Link:
        loop = asyncio.get_running_loop()
        _, link = await loop.create_unix_connection(lambda: _Link(self), sock=sock)
        return link

    def _supervise(self) -> None:
        """The supervisor thread: :func:`~switchboard.queue.child.supervise` with this writer's
        start (spawn, then attach the pipe on the loop) and wait."""
        supervise("delivery writer", self._closing, self._first_exited, self._start_child, self._child_ended,
                  self._restarted)

    def _start_child(self) -> _Link | None:
        """Spawn a child and attach its pipe on the loop; ``None`` when closed meanwhile.
        Raises when either fails, after killing what was started (serve writes meanwhile)."""
        assert self._loop is not None
        attaching = None
        try:
            sock = self._spawn()
            if self._closing.is_set():  # closed while this child was starting
                self._hang_up()
                self._reap(5.0)
                return None
            attaching = asyncio.run_coroutine_threadsafe(self._attach(sock), self._loop)
            return attaching.result(timeout=30)
        except Exception:
            if attaching is not None:
                attaching.cancel()  # a late attach must not adopt a child killed here
            with self._lock:
                process, self._process = self._process, None
                sock, self._sock = self._sock, None
            attached = (attaching is not None and attaching.done() and not attaching.cancelled()
                        and attaching.exception() is None)
            if sock is not None and not attached:  # an attached one is its transport's to close
                sock.close()
            if process is not None:
                reap(process, 0)  # killed now, and joined
            raise

    def _child_ended(self, link: _Link) -> int | None:
        """Wait for the child to end and for the loop to see its pipe close (which fails what
        was pending on it); its exit code (``None`` when serve is closing)."""
        assert self._loop is not None
        with self._lock:
            process = self._process
        while process.is_alive() and not self._closing.is_set():
            process.join(timeout=0.5)
        if self._closing.is_set():
            return None
        try:
            asyncio.run_coroutine_threadsafe(asyncio.wait_for(asyncio.shield(link.closed), 10),
                                             self._loop).result(timeout=15)
        except Exception as exc:  # noqa: BLE001 - the loop is gone (shutdown) or slow; go on
            log.debug("the writer pipe's close was not seen (%s)", type(exc).__name__)
        return process.exitcode

    def _restarted(self) -> None:
        self.restarts += 1


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None
