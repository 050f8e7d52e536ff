"""Embedded mode's processing process: deliveries processed beside ``serve``, not inside it.

Issue 11: in embedded mode (SQLite, no Redis) the receiver, its delivery writer and processing
shared one interpreter lock, so processing took its time out of the acks (517 acked/s and
375 processed/s, against 1,009 acked/s when processing ran elsewhere). With
``SWITCHBOARD_PROCESSING=process`` (the default of ``serve``) ``serve`` starts one child process
that runs :func:`switchboard.queue.jobs.process_batch` with its own hub and interpreter lock.

The contract is the one of :class:`~switchboard.queue.dispatcher.InlineDispatcher`:

- ``submit(delivery_ids)`` only queues the ids in memory (no I/O: the delivery writer calls it
  once per commit); a sender thread writes the waiting ids to the child's pipe as one list.
- The child takes every list waiting (up to :data:`BATCH` ids) into one write transaction, and
  one at a time after a batch fails (the failure is recorded on the row).
- What processing publishes comes back on a second pipe and is published by ``serve``: wakes
  to its attached sessions, inbox rings and stream nudges (:class:`ForwardingBroker`), feed bell
  rings, and the metrics processing observes. They are sent after their transaction commits,
  one message per processed batch (``("batch", [...])``).
- Nothing acknowledged is lost: the database is the record. Ids in a pipe when the child dies
  are deliveries still ``received``: a supervisor thread starts another child (after
  :data:`RESTART_SECONDS`, doubling while children die young or cannot be started), and once it
  is ready every delivery still ``received`` is handed to it. The child exits when ``serve``
  goes (its pipe closes); it ignores SIGINT and SIGTERM, which reach the whole process group,
  and stops when ``serve`` closes it. ``/api/v1/ready`` reports it (``checks.processing``).
"""

from __future__ import annotations

import atexit
import logging
import multiprocessing as mp
import queue as stdqueue
import signal
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from switchboard.queue.dispatcher import drain

if TYPE_CHECKING:
    from multiprocessing.connection import Connection

    from switchboard.config import Settings
    from switchboard.hub import Hub
    from switchboard.notify.broker import Broker

log = logging.getLogger(__name__)

BATCH = 32
"""Deliveries per processing transaction at most (the receiver's writer waits for the lock
meanwhile: about 0.3 ms per delivery). Measured with ``bench/ingest.py`` (issue 11): at 16 the
child processed 0.87 of the ack rate during a burst, at 32 0.99 (it keeps up), with the ack
p99 within the run-to-run noise; at 64 the wake p99 at full speed fell further, but the
writer's wait grows with it."""
RESTART_SECONDS = 1.0
"""Wait before starting a new child after one died (doubled while children die young)."""
MAX_RESTART_SECONDS = 30.0
YOUNG_SECONDS = 10.0
"""A child that ran less than this died young: the wait before the next one doubles."""


def wait_ready(ready: threading.Event, first_exited: threading.Event, timeout: float) -> bool:
    """Block until ``ready`` is set: False when ``timeout`` seconds passed first or
    ``first_exited`` was set (the first child ended before it was ready). Shared by the
    processing process and the delivery writer process (``web/writer_child.py``)."""
    deadline = time.monotonic() + timeout
    while not ready.wait(max(0.0, min(0.1, deadline - time.monotonic()))):
        if first_exited.is_set() or time.monotonic() >= deadline:
            return False
    return True


def reap(process: Any, timeout: float) -> None:
    """Wait up to ``timeout`` seconds for a child ``process`` (or ``None``) to exit, then kill it."""
    if process is None:
        return
    process.join(timeout=timeout)
    if process.is_alive():
        process.kill()
        process.join(timeout=5)


def supervise(what: str, closing: threading.Event, first_exited: threading.Event, start: Callable[[], Any],
              wait: Callable[[Any], int | None], restarted: Callable[[], None]) -> None:
    """Start a child, wait for it to end, start another, until ``closing`` is set (the loop of
    the processing process and of the delivery writer process; run it on its own thread).

    The wait before the next child is :data:`RESTART_SECONDS`, doubled up to
    :data:`MAX_RESTART_SECONDS` while children die young (:data:`YOUNG_SECONDS`) or cannot be
    started at all (a start that fails, e.g. out of file descriptors, is retried).

    Args:
        what: the child's name in the log (``"processing"``, ``"delivery writer"``).
        closing: set by the owner's ``close``; the loop ends at its next check.
        first_exited: set once the first child has ended (:func:`wait_ready` stops waiting);
            not set when ``close`` came first and the child may still run.
        start: starts one child and returns its handle, or ``None`` when ``closing`` was set
            while it started (it has then stopped that child itself). Raises when the child
            could not be started (logged by class, retried after the backoff).
        wait: blocks until the child of ``handle`` has ended and returns its exit code, or
            returns ``None`` early once ``closing`` is set (the owner's ``close`` stops it).
        restarted: called when a child that ended is about to be replaced (after the backoff;
            not for a retry after a failed start).
    """
    backoff, failures, first = RESTART_SECONDS, 0, True
    while not closing.is_set():
        try:
            handle = start()
        except Exception as exc:  # noqa: BLE001 - serve goes on meanwhile; nothing acknowledged is lost
            failures += 1
            if failures == 1 or failures % 10 == 0:
                log.error("could not start the %s process (%s); retrying in %.0f s",
                          what, type(exc).__name__, backoff)
            if closing.wait(backoff):
                return
            backoff = min(backoff * 2, MAX_RESTART_SECONDS)
            continue
        if handle is None:
            return
        failures = 0
        started = time.monotonic()
        code = wait(handle)
        if code is None and closing.is_set():
            return  # closed while it ran: the owner's close stops the child
        if first:
            first = False
            first_exited.set()
        if closing.is_set():
            return
        young = time.monotonic() - started < YOUNG_SECONDS
        backoff = min(backoff * 2, MAX_RESTART_SECONDS) if young else RESTART_SECONDS
        log.warning("the %s process exited (code %s); starting another in %.0f s", what, code, backoff)
        if closing.wait(backoff):
            return
        restarted()


def hook_exit(callback: Callable[[], None]) -> None:
    """Register ``callback`` to run at interpreter exit before ``multiprocessing``'s own hook.

    Call it after each child's ``start()``: ``multiprocessing`` registers its hook when it
    first starts a process, and atexit runs the last registered first. That hook sends SIGTERM
    to daemon children, which ours ignore, then waits for them without a timeout; the callback
    hangs up the child's pipe and reaps it first.
    """
    atexit.unregister(callback)
    atexit.register(callback)


class ForwardingBroker:
    """The child's broker: every publish becomes a message to ``serve`` (which holds the streams)."""

    def __init__(self, send: Callable[[tuple[Any, ...]], None]) -> None:
        self._send = send

    def publish_wake(self, wake: Any) -> None:
        """Send ``wake`` (a :class:`~switchboard.notify.wakes.Wake`) to ``serve``."""
        self._send(("wake", wake.to_dict()))

    def publish_wakes(self, wakes: Any) -> None:
        """Send each wake to ``serve``, in order (the batch's messages go as one, see ``flush``)."""
        for wake in wakes:
            self._send(("wake", wake.to_dict()))

    def publish_inbox(self, agent_id: str) -> None:
        """Ask ``serve`` to ring the ``inbox_wait`` calls of ``agent_id``."""
        self._send(("inbox", agent_id))

    def publish_event(self, agent_id: str, session_id: str | None) -> None:
        """Ask ``serve`` to nudge the stream of ``session_id`` (any of the agent's for ``None``)."""
        self._send(("event", agent_id, session_id))

    def close(self) -> None:
        """Nothing to stop."""


def child_main(make_hub: Callable[..., Hub], settings: Settings, inbox: Connection, outbox: Connection) -> None:
    """The child process: process the id lists read from ``inbox`` until it closes or sends ``None``.

    Args:
        make_hub: the :class:`~switchboard.hub.Hub` class (passed in: the hub composes this module).
        settings: the serving process's settings (same database and vault key ring).
        inbox: lists of delivery ids from ``serve``; ``None`` asks the child to stop.
        outbox: messages for ``serve`` (see :meth:`ProcessDispatcher._apply`).
    """
    # Ctrl-C and a service manager's SIGTERM reach the whole process group: serve stops us (it
    # sends None after what is queued), so a shutdown never cuts a batch or starts a new child.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    from switchboard import logs, metrics
    from switchboard.feed import bell
    from switchboard.log_redaction import install
    from switchboard.queue import jobs

    logs.configure(settings.log_level, settings.log_format)
    install()  # as in serve: no payloads or credentials in any log (issue 13 item 6)
    send_lock = threading.Lock()
    pending: list[tuple[Any, ...]] = []
    main_thread = threading.get_ident()

    def flush() -> None:
        """Send what the batch produced as one message (one pickle, one write, one wake-up of
        serve's relay thread instead of one per wake and metric: issue 11)."""
        with send_lock:
            if not pending:
                return
            message = pending[0] if len(pending) == 1 else ("batch", list(pending))
            pending.clear()
            try:
                outbox.send(message)
            except (OSError, ValueError):  # serve is gone; the records are in the database
                pass

    def send(message: tuple[Any, ...]) -> None:
        with send_lock:
            pending.append(message)
        if threading.get_ident() != main_thread:
            flush()  # not the processing loop: nothing else would flush it soon

    metrics.forward_to(lambda name, args: send(("metric", name, args)))
    bell.BELL.forward = lambda: send(("bell",))
    hub = make_hub(settings, role="processing")
    hub.broker = ForwardingBroker(send)
    hub.settle()  # the intake rules built before the first delivery; the start-up heap frozen
    send(("ready",))
    flush()
    try:
        while True:
            try:
                first = inbox.recv()
            except (EOFError, OSError):
                return
            except Exception:  # a message that cannot be read: serve starts a fresh child
                log.exception("unreadable message from serve; the processing process stops")
                return
            if first is None:
                return
            ids, stop = list(first), False
            while len(ids) < BATCH and not stop and inbox.poll():
                try:
                    more = inbox.recv()
                except Exception:  # noqa: BLE001 - EOF or unreadable: finish this batch, then stop
                    stop = True
                    break
                if more is None:
                    stop = True
                else:
                    ids.extend(more)
            for start in range(0, len(ids), BATCH):
                # After each commit the wakes it produced go out: the batch's after its one
                # commit, and each delivery's at once when the batch failed and they are
                # processed one at a time (a later one may wait out a lock meanwhile).
                jobs.process_all(hub, ids[start:start + BATCH], after_each=flush)
                flush()
            if stop:
                return
    finally:
        hub.close()
        flush()


class ProcessDispatcher:
    """Embedded mode with ``SWITCHBOARD_PROCESSING=process``: processing in one child process.

    Args:
        make_hub: the :class:`~switchboard.hub.Hub` class; the child builds its own hub with it.
        settings: passed to the child.
        broker: the serving process's broker; the child's wakes, inbox rings and nudges are
            published on it.
        ring_bell: rings the serving process's feed bell (the child wrote feed events).
        on_restart: called (in a background thread) once a new child is ready after one died:
            the hub sweeps every delivery still ``received`` to it, so the ids lost with the
            old child's pipe do not wait for the sweeper's grace period.
    """

    name = "process"
    """The job mode ``/api/v1/health`` names."""

    def __init__(self, make_hub: Callable[..., Hub], settings: Settings, broker: Broker,
                 ring_bell: Callable[[], object], on_restart: Callable[[], object] | None = None) -> None:
        self._make_hub = make_hub
        self._on_restart = on_restart
        self._settings = settings
        self._broker = broker
        self._ring_bell = ring_bell
        self._ids: stdqueue.SimpleQueue[list[str] | None] = stdqueue.SimpleQueue()
        self._lock = threading.Lock()
        self._closing = threading.Event()
        self._ready = threading.Event()
        self._first_exited = threading.Event()  # the first child ended before it was ready
        self._context = mp.get_context("spawn")
        self._process: Any = None
        self._to_child: Connection | None = None
        self._unavailable_logged = False
        self.restarts = 0
        self._supervisor = threading.Thread(target=self._supervise, name="switchboard-processing-supervisor",
                                            daemon=True)
        self._supervisor.start()
        self._sender = threading.Thread(target=self._send_loop, name="switchboard-processing-sender", daemon=True)
        self._sender.start()

    @property
    def pid(self) -> int | None:
        """The child's process id (``None`` before it started)."""
        with self._lock:
            return None if self._process is None else self._process.pid

    def healthy(self) -> bool:
        """True while a child is running and ready (``/api/v1/ready`` reports it)."""
        return self._ready.is_set()

    def _spawn(self) -> Connection:
        to_child_r, to_child_w = self._context.Pipe(duplex=False)
        from_child_r, from_child_w = self._context.Pipe(duplex=False)
        try:
            process = self._context.Process(
                target=child_main, args=(self._make_hub, self._settings, to_child_r, from_child_w),
                name="switchboard-processing", daemon=True)
            process.start()
            hook_exit(self._at_exit)
        except BaseException:
            for end in (to_child_r, to_child_w, from_child_r, from_child_w):
                end.close()
            raise
        to_child_r.close()
        from_child_w.close()
        with self._lock:
            self._process, self._to_child = process, to_child_w
            self._unavailable_logged = False
        return from_child_r

    def _supervise(self) -> None:
        """The supervisor thread: :func:`supervise` with this dispatcher's start and wait."""
        supervise("processing", self._closing, self._first_exited, self._spawn, self._child_ended,
                  self._restarted)

    def _child_ended(self, pipe: Connection) -> int | None:
        """Relay the child's messages until it ends; its exit code."""
        self._relay(pipe)
        with self._lock:
            process, self._to_child = self._process, None
        self._ready.clear()
        process.join(timeout=5)
        return process.exitcode

    def _restarted(self) -> None:
        self.restarts += 1

    def _relay(self, pipe: Connection) -> None:
        """Apply the child's messages until its pipe closes (it exited)."""
        try:
            while True:
                try:
                    message = pipe.recv()
                except (EOFError, OSError):
                    return
                try:
                    self._apply(message)
                except Exception:  # a doorbell lost; the records are in the database
                    log.exception("could not apply a message from the processing process")
        finally:
            pipe.close()

    def wait_ready(self, timeout: float) -> bool:
        """Block until the child has built its hub and intake rules (``serve`` waits for this
        before it listens, so the first delivery is not processed by a cold child).

        Returns:
            False when ``timeout`` seconds passed first, or the first child ended before it was
            ready (serve starts anyway; the supervisor keeps trying).
        """
        return wait_ready(self._ready, self._first_exited, timeout)

    def submit(self, delivery_ids: list[str]) -> None:
        """Queue deliveries for the child (no I/O; never raises)."""
        if delivery_ids:
            self._ids.put(list(delivery_ids))

    def _send_loop(self) -> None:
        """The one writer of the child's pipe: lists of ids, then ``None`` when closing."""
        while True:
            first = self._ids.get()
            stop = first is None
            batch: list[str] = []
            if first is not None:
                lists, stop = drain(self._ids, first, 500)
                batch = [i for ids in lists for i in ids]
            with self._lock:
                pipe = self._to_child
            try:
                if pipe is None:
                    raise OSError("no processing process")
                if batch:
                    pipe.send(batch)
                if stop:
                    pipe.send(None)
            except (OSError, ValueError):
                # No child now; these deliveries are 'received' in the database: the next child
                # gets them from the sweep that follows its start (or the sweeper's next pass).
                with self._lock:
                    logged, self._unavailable_logged = self._unavailable_logged, True
                if batch and not logged:
                    log.warning("processing process unavailable; deliveries wait for the next one")
            if stop:
                return

    def _apply(self, message: tuple[Any, ...]) -> None:
        """Publish one message of the child in this process."""
        kind = message[0]
        if kind == "batch":
            for each in message[1]:
                try:
                    self._apply(each)
                except Exception:  # one doorbell lost, not the rest of the batch's
                    log.exception("could not apply a message from the processing process")
        elif kind == "wake":
            from switchboard.notify.wakes import Wake

            self._broker.publish_wake(Wake.from_dict(message[1]))
        elif kind == "inbox":
            self._broker.publish_inbox(message[1])
        elif kind == "event":
            self._broker.publish_event(message[1], message[2])
        elif kind == "ready":
            self._ready.set()
            if self.restarts and self._on_restart is not None:
                threading.Thread(target=self._resend, name="switchboard-processing-resend", daemon=True).start()
        elif kind == "bell":
            self._ring_bell()
        elif kind == "metric":
            from switchboard import metrics

            metrics.observe(message[1], tuple(message[2]))
        else:
            log.warning("ignored a message of kind %r from the processing process", kind)

    def _resend(self) -> None:
        try:
            assert self._on_restart is not None
            self._on_restart()
        except Exception:  # noqa: BLE001 - the sweeper's next pass does it
            log.exception("could not re-send the deliveries waiting for processing")

    def _at_exit(self) -> None:
        """At interpreter exit without :meth:`close` (``serve`` force-quit, or its start-up
        failed): close the child's pipe so it reads end-of-file and stops, then reap it (kill
        after 5 s). ``multiprocessing``'s own exit hook would wait for it forever: the child
        ignores the SIGTERM that hook sends."""
        self._closing.set()
        with self._lock:
            pipe, process = self._to_child, self._process
        if pipe is not None:
            try:
                pipe.close()
            except OSError:
                pass
        reap(process, 5.0)

    def close(self) -> None:
        """Send what is queued, let the child finish it (10 s at most), then stop it."""
        self._closing.set()
        self._ids.put(None)  # the sender sends the rest, then None: one writer per pipe
        self._sender.join(timeout=10)
        with self._lock:
            process = self._process
        reap(process, 10.0)
        self._supervisor.join(timeout=5)
