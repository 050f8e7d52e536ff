"""Appending and reading feed events (DESIGN.md §6.7).

Titles are payload-free one-liners; ``data`` holds only sanitised fields. ``origin_key`` makes
an append idempotent: re-running the same processing step writes the event once.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy import insert, select
from sqlmodel import Session

from switchboard.clock import Clock
from switchboard.models import FeedEvent
from switchboard.prepared import Prepared

KINDS = (
    "delivery.received", "delivery.rejected", "delivery.quarantined", "delivery.released",
    "todo.created", "todo.claimed", "todo.completed", "todo.failed", "todo.dead_lettered",
    "question.posted", "question.answered", "approval.requested", "approval.decided",
    "permission.requested", "permission.decided", "friend.requested", "friend.decided",
    "secret.fetched",
)


def append(
    session: Session,
    clock: Clock,
    project_id: str | None,
    kind: str,
    title: str,
    subject_id: str | None = None,
    data: dict[str, Any] | None = None,
    origin_key: str | None = None,
) -> FeedEvent:
    """Append one event in the caller's transaction.

    Args:
        kind: one of :data:`KINDS`.
        origin_key: when given and already used, the existing event is returned instead.

    Raises:
        ValueError: unknown kind (a programming error).
    """
    if kind not in KINDS:
        raise ValueError(f"unknown feed event kind {kind!r}")
    if origin_key is not None:
        existing = session.execute(select(FeedEvent).where(FeedEvent.origin_key == origin_key)).scalars().first()
        if existing is not None:
            return existing
    event = FeedEvent(project_id=project_id, kind=kind, title=title, subject_id=subject_id, data=data,
                      origin_key=origin_key, created_at=clock.now())
    session.add(event)
    session.flush()
    return event


def record(session: Session, clock: Clock, project_id: str, kind: str, title: str,
           subject_id: str | None = None, data: dict[str, Any] | None = None, origin_key: str | None = None) -> None:
    """Append one event with a single INSERT (nothing read, nothing returned): the hot path for
    ``todo.claimed``, ``todo.completed`` and a new todo's ``todo.created``.

    Args:
        origin_key: stored as given; only for a key no event can hold yet (e.g. one built from
            a todo id made in this transaction). Use :func:`append` when the key may exist.

    Raises:
        ValueError: unknown kind (a programming error).
    """
    if kind not in KINDS:
        raise ValueError(f"unknown feed event kind {kind!r}")
    _RECORD.run(session, {"project_id": project_id, "kind": kind, "title": title, "subject_id": subject_id,
                          "data": data, "created_at": clock.now(), "origin_key": origin_key})


FEED = FeedEvent.__table__  # type: ignore[attr-defined]
_RECORD_COLUMNS = ("project_id", "kind", "title", "subject_id", "data", "created_at", "origin_key")
# Compiled once per dialect, run on the DBAPI cursor (issue 11); the id is the column's default.
_RECORD = Prepared(insert(FEED).values({c: sa.bindparam(c, type_=FEED.c[c].type) for c in _RECORD_COLUMNS}),
                   writes_feed=True)

#: PostgreSQL: the smallest feed position a transaction still running (or starting later) can
#: write; migration 0014 makes every new id ``(transaction id << 16) | n``.
_PG_HORIZON = sa.literal_column("(pg_snapshot_xmin(pg_current_snapshot())::text::bigint << 16)")


def settled(position: Any, session: Session) -> Any:
    """A WHERE clause keeping feed positions no later commit can come before.

    A cursor over feed ids (``feed_read``, the trailer, subscriptions, ``inbox_read``) may only
    move past ids whose transactions have all ended, or it skips an event committed late
    behind it (issue 18.6). On PostgreSQL ids are ordered by transaction id (migration 0014),
    so ``position < pg_snapshot_xmin(pg_current_snapshot()) << 16`` is that set; a transaction
    left open delays delivery, it never loses it. SQLite has one writer: every committed id is
    settled.

    Args:
        position: a column holding feed event ids (``FeedEvent.id``, ``InboxItem.seq``, ...).
        session: the session the query runs in (its dialect decides).

    Returns:
        A SQL boolean expression (``true`` on SQLite).
    """
    if session.get_bind().dialect.name == "postgresql":
        return position < _PG_HORIZON
    return sa.true()
