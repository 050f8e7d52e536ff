"""The feed bell: rings this process's human streams after a transaction that wrote feed events.

A doorbell, never the record (DESIGN.md rule 1): a stream that hears it reads the feed from the
database after its last id, and every stream also re-reads every :data:`POLL_SECONDS` so that
events written by another process (the CLI, an rq worker) arrive without a bell.

How a write is noticed: an engine listener marks the thread when a statement inserts into
``feed_events`` (both :func:`switchboard.feed.events.append` and the single-INSERT
:func:`~switchboard.feed.events.record`); the session's ``after_commit`` rings when the thread
is marked, ``after_rollback`` clears the mark. So a stream never hears of an uncommitted event.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable

import sqlalchemy as sa
from sqlalchemy import event
from sqlmodel import Session

POLL_SECONDS = 2.0


class FeedBell:
    """Waiters of this process (one ``asyncio.Event`` each); :meth:`ring` works from any thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._waiters: set[tuple[asyncio.AbstractEventLoop, asyncio.Event]] = set()
        self.forward: Callable[[], None] | None = None
        """Set in embedded mode's processing process (:mod:`switchboard.queue.child`): a ring is
        sent to the serving process, whose streams wait on its bell."""

    def register(self) -> tuple[asyncio.AbstractEventLoop, asyncio.Event]:
        """A waiter on the running loop; pair with :meth:`unregister`."""
        waiter = (asyncio.get_running_loop(), asyncio.Event())
        with self._lock:
            self._waiters.add(waiter)
        return waiter

    def unregister(self, waiter: tuple[asyncio.AbstractEventLoop, asyncio.Event]) -> None:
        """Forget a waiter (its stream closed)."""
        with self._lock:
            self._waiters.discard(waiter)

    def ring(self) -> int:
        """Set every waiter's event; returns how many were rung."""
        if self.forward is not None:
            self.forward()
        with self._lock:
            waiters = list(self._waiters)
        for loop, evt in waiters:
            try:
                loop.call_soon_threadsafe(evt.set)
            except RuntimeError:  # its loop closed: the stream is gone
                pass
        return len(waiters)


BELL = FeedBell()
_marks = threading.local()


def mark_feed_write() -> None:
    """Note that this thread's transaction wrote a feed event (the bell rings after its commit).
    Statements run on the DBAPI cursor directly (:mod:`switchboard.prepared`) call this; the
    engine's own statements are noticed by the listener below."""
    _marks.feed = True


@event.listens_for(sa.Engine, "after_cursor_execute")
def _mark_feed_write(conn: sa.Connection, cursor: object, statement: str, *args: object) -> None:
    if statement[:40].upper().startswith("INSERT INTO FEED_EVENTS"):
        _marks.feed = True


def committed() -> None:
    """This thread's transaction committed: ring the bell if it wrote a feed event. ORM sessions
    call it from their ``after_commit``; :mod:`switchboard.direct` after its own COMMIT."""
    if getattr(_marks, "feed", False):
        _marks.feed = False
        BELL.ring()


def rolled_back() -> None:
    """This thread's transaction rolled back: forget its feed writes (no bell)."""
    _marks.feed = False


@event.listens_for(Session, "after_commit")
def _ring_after_commit(session: Session) -> None:
    committed()


@event.listens_for(Session, "after_rollback")
def _clear_after_rollback(session: Session) -> None:
    rolled_back()
