"""The delivery writer process's own side (``SWITCHBOARD_DELIVERY_WRITER=process``): the loop
that stores the rows ``serve`` sends and answers their outcomes. ``serve``'s side, the protocol
and the supervisor are in :mod:`switchboard.web.writer_child`."""

from __future__ import annotations

import logging
import signal
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any

from switchboard.clock import EPOCH
from switchboard.errors import DependencyUnavailable
from switchboard.web.ingest import MAX_BATCH, STORE_FAILED, Outcome

if TYPE_CHECKING:
    from multiprocessing.connection import Connection

    from switchboard.config import Settings
    from switchboard.queue.dispatcher import PacedHandOff

log = logging.getLogger(__name__)

_MICROSECOND = timedelta(microseconds=1)


def to_pipe(row: dict[str, Any]) -> dict[str, Any]:
    """``row`` as ``serve`` pickles it for the child: an aware UTC ``received_at`` as whole
    microseconds since the epoch (an ``int``). Pickling ``timezone.utc`` cost about 11 µs a
    message on the event loop, more than the rest of a row with its 5 KB body (issue 11).
    Any other value is sent as it is. :func:`from_pipe` undoes it exactly."""
    at = row["received_at"]
    if isinstance(at, datetime) and at.tzinfo is timezone.utc:
        return {**row, "received_at": (at - EPOCH) // _MICROSECOND}
    return row


def from_pipe(row: dict[str, Any]) -> dict[str, Any]:
    """The row :func:`to_pipe` sent, with ``received_at`` an aware UTC datetime again."""
    at = row["received_at"]
    if isinstance(at, int):
        row["received_at"] = EPOCH + at * _MICROSECOND
    return row


def writer_main(settings: Settings, pipe: Connection) -> None:
    """The child process: store the rows read from ``pipe`` until it closes or sends ``None``.

    Messages in: lists of ``(seq, row, stamp, dispatch, admit)``, each row as :func:`to_pipe` made
    it, ``admit`` the provider whose adapter admits it here or ``None`` (see
    :func:`~switchboard.web.ingest.write_batch`); ``None`` asks the child to stop.
    With Redis (``settings.redis_url``) the child hands what it stored to rq itself; without,
    ``serve`` hands it to its dispatcher when the outcomes arrive. Messages out:
    ``("ready",)`` once, then one list of ``(seq, outcome, error)`` per transaction, where
    ``error`` is ``None`` or ``(kind, message)`` (``kind`` ``"unavailable"`` for a
    :class:`DependencyUnavailable`, whose message is safe to show; ``"failed"`` otherwise,
    logged here by its class, its text never sent on).
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    from switchboard import logs
    from switchboard.db import Database
    from switchboard.intake import vault
    from switchboard.log_redaction import install
    from switchboard.web.ingest import delivery_insert, write_batch

    logs.configure(settings.log_level, settings.log_format)
    install()  # as in serve: no payloads or credentials in any log (issue 13 item 6)
    db = Database(settings)
    # The key ring is read once per transaction, not once per sealed body (one stat() of the
    # key file each: a twentieth of the writer's time per delivery); a rotation made by
    # `switchboard vault rotate` is still seen by the next transaction.
    ring = [vault.load_key_ring(settings)]
    vault.attach(db, lambda: ring[0])
    insert = delivery_insert(db.engine.dialect.name)
    # With Redis the child enqueues the rq jobs of what it stored itself (after answering), so
    # the hand-off's Redis pipeline (about 0.13 ms of interpreter time a delivery) is not
    # taken from serve's event loop; on this thread, between transactions (PacedHandOff).
    handoff = None
    if settings.redis_url:
        from switchboard.queue.dispatcher import PacedHandOff

        handoff = PacedHandOff(settings.redis_url)
    try:
        pipe.send(("ready",))
        while True:
            try:
                if handoff is not None:
                    _wait_for_rows(pipe, handoff)
                first = pipe.recv()
            except (EOFError, OSError):
                return
            if first is None:
                return
            items, stop = list(first), False
            while len(items) < MAX_BATCH and pipe.poll():
                try:
                    more = pipe.recv()
                except (EOFError, OSError):
                    stop = True
                    break
                if more is None:
                    stop = True
                    break
                items.extend(more)
            ring[0] = vault.load_key_ring(settings)
            answers: list[tuple[int, Outcome | None, tuple[str, str] | None]] = []
            stored: list[str] = []
            for start in range(0, len(items), MAX_BATCH):
                chunk = items[start:start + MAX_BATCH]
                written, _ = write_batch(db, insert,
                                         [(from_pipe(row), stamp, admit) for _, row, stamp, _, admit in chunk])
                for (seq, row, _, dispatch, _), (outcome, error) in zip(chunk, written, strict=True):
                    answers.append((seq, outcome, None if error is None else _describe(error)))
                    if dispatch and outcome is not None and outcome[0] == "stored":
                        stored.append(row["id"])
            try:
                pipe.send(answers)
            except (OSError, ValueError):
                return  # serve is gone; what was committed is in the database (the sweeper's)
            finally:
                if handoff is not None:
                    handoff.add(stored)
                    handoff.run_due()
            if stop:
                return
    finally:
        if handoff is not None:
            handoff.close()
        db.dispose()


def _wait_for_rows(pipe: Connection, handoff: PacedHandOff) -> None:
    """Return once ``serve``'s next message (or the pipe's end) is there to read; meanwhile hand
    off the ids that wait as their time comes (:meth:`PacedHandOff.wait`)."""
    while True:
        wait = handoff.wait()
        if wait is None or (wait > 0 and pipe.poll(wait)):
            return
        handoff.run_due()


def _describe(error: BaseException) -> tuple[str, str]:
    if isinstance(error, DependencyUnavailable):
        return "unavailable", error.message
    log.error("a delivery could not be stored (%s)", type(error).__name__)  # no values: they quote the row
    return "failed", STORE_FAILED
