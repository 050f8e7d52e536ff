"""Appending and reading feed events (DESIGN.md §6.7).

Titles are payload-free one-liners; ``data`` holds only sanitised fields. ``origin_key`` makes
an append idempotent: re-running the same processing step writes the event once. :func:`tail`
reads the events past cursors in several projects and kinds (``feed_read``, the trailer).
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator, Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy import and_, insert, or_, select, union_all
from sqlmodel import Session

from switchboard.clock import Clock
from switchboard.errors import InvalidArgument
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


def _pg_position_of(bound: str) -> Any:
    """PostgreSQL: the first event id of the transaction id ``pg_snapshot_<bound>`` of the current
    snapshot; migration 0014 makes every new id ``((transaction id + offset) << 16) | n``, the
    offset (migration 0023) a constant function that :func:`align_ids` raises after a restore."""
    return sa.literal_column(
        f"((pg_snapshot_{bound}(pg_current_snapshot())::text::bigint + switchboard_xid_offset()) << 16)")


#: The smallest position a transaction still running (or starting later) can write.
_PG_HORIZON = _pg_position_of("xmin")
#: No committed transaction's event id is this large (``xmax``: the first transaction id not
#: yet given when the snapshot was taken).
_PG_GIVEN = _pg_position_of("xmax")
#: Every column that holds feed or agent event ids (positions, DESIGN.md §6.4, §6.5a, §6.7).
_POSITIONS = (("feed_events", "id"), ("agent_events", "id"), ("agent_cursors", "position"),
              ("subscriptions", "seed_event_id"), ("inbox_items", "seq"), ("inbox_items", "resolved_event_id"))
#: ``pg_advisory_xact_lock`` key of :func:`align_ids` (two processes starting at once).
_ALIGN_LOCK = 0x5B_FEED_1D
#: What :func:`align_ids` reads, in one statement: the largest id held, xmin, the offset.
_ALIGN_READ = ("SELECT coalesce(greatest(" + ", ".join(f"(SELECT max({c}) FROM {t})" for t, c in _POSITIONS)
               + "), 0), pg_snapshot_xmin(pg_current_snapshot())::text::bigint, switchboard_xid_offset()")


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
    return _settled(position, session.get_bind().dialect.name == "postgresql")


def _settled(position: Any, postgresql: bool) -> Any:
    return position < _PG_HORIZON if postgresql else sa.true()


def ahead(session: Session, position: int, table: str = "feed_events") -> bool:
    """Whether ``position`` is past every id this database has given in ``table``.

    Such a position comes from another timeline: a client's ``Last-Event-ID`` or ``since`` kept
    across the restore of an older backup, or across migration 0022 of a table retention had
    emptied (ids given before are not known to SQLite then). Read after it, every new event
    would be skipped until the ids caught up; streams start afresh instead, reads refuse it.
    Only until the new ids pass it: a client that comes back later skips the events between.
    SQLite: past ``sqlite_sequence``'s largest id given (``AUTOINCREMENT``, migration 0022).
    PostgreSQL: at or past ``(pg_snapshot_xmax + offset) << 16``: every transaction that has
    committed has an id below ``xmax``. Not the readers' horizon (``xmin``): an id committed
    while an older transaction is still open is above that, and is handed out at once (an
    inbox item's ``seq`` in ``question_post``'s answer; a review found the refusal there).

    Args:
        session: the session to read in.
        position: an event id a client gave back.
        table: ``feed_events`` or ``agent_events``.

    Returns:
        True when no id this large was ever given.
    """
    if table not in ("feed_events", "agent_events"):
        raise ValueError(f"no event ids in {table}")
    if session.get_bind().dialect.name == "postgresql":
        return position >= int(session.execute(sa.select(_PG_GIVEN)).scalar_one())
    given = session.execute(sa.text("SELECT seq FROM sqlite_sequence WHERE name = :t"), {"t": table}).scalar()
    return position > int(given or 0)


def refuse_ahead(session: Session, since: int | None) -> None:
    """Refuse a read's ``since`` (or ``cursor``) past every feed id this database has given.

    Raises:
        InvalidArgument: :func:`ahead` (a position kept across a restore of the hub's database):
            read after it, every new event would be skipped until the ids caught up.
    """
    if since is not None and ahead(session, since):
        raise InvalidArgument(f"since {since} is past every feed event id this hub has given (its database was "
                              "restored from a backup?): read without since to use your stored position, or "
                              "from since=0")


def align_ids(connection: sa.Connection) -> int | None:
    """PostgreSQL: make new event ids larger than every id the database already holds.

    Ids are made from transaction ids (migration 0014). A dump restored into another cluster
    (``pg_restore``) holds ids made from that cluster's transaction ids, usually far ahead of
    the new one's: new events got smaller ids than the restored ones, so every cursor and
    ``Last-Event-ID`` kept from before skipped them, and the restored events stood above the
    readers' horizon, unread. When the largest id any row holds (events, cursors, subscription
    seeds, inbox items) is at or past ``(oldest running transaction id + offset) << 16``, the offset
    (``switchboard_xid_offset()``, migration 0023) is raised just past it. It never goes down.
    Run by the migration environment at head (``migrations/env.py``: ``switchboard migrate``,
    ``serve``, ``worker`` and ``init`` at start-up, a plain ``alembic upgrade head``), in its
    transaction.

    Args:
        connection: a connection in a transaction, at schema head.

    Returns:
        The new offset (transaction ids) when it was raised, else ``None`` (and always on SQLite,
        whose ids are ``AUTOINCREMENT``, migration 0022).
    """
    if connection.dialect.name != "postgresql":
        return None
    connection.exec_driver_sql(f"SELECT pg_advisory_xact_lock({_ALIGN_LOCK})")
    # The oldest transaction still running, not this one: a writer that began before this raise
    # and inserts after it must get an id above the restored ones too (a review: with this
    # transaction's own id, such a writer's event went below them, or collided with one).
    largest, xmin, offset = connection.exec_driver_sql(_ALIGN_READ).one()
    if xmin + offset > largest >> 16:
        return None
    raised = (largest >> 16) + 1 - xmin
    connection.exec_driver_sql("CREATE OR REPLACE FUNCTION switchboard_xid_offset() RETURNS bigint "
                               f"LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$ SELECT {int(raised)}::bigint $$")
    return int(raised)


#: Ranges one :func:`tail` statement reads as branches of its own at most. SQLite allows 500
#: terms in a compound SELECT (``SQLITE_MAX_COMPOUND_SELECT``); past this (an agent reading a
#: kinds filter over dozens of projects) one filtered statement reads the same events.
MAX_BRANCHES = 200


def tail(session: Session, ranges: Sequence[tuple[str, str | None, int]], limit: int) -> list[FeedEvent]:
    """The first ``limit`` settled events, oldest first, of several ranges, in one statement.

    Each range is read by a branch of its own, ``project_id = ? [AND kind = ?] AND id > ?
    ORDER BY id LIMIT limit``: one index range of ``ix_feed_project_kind_id`` (or
    ``ix_feed_project_id`` without a kind), no event of another kind read (issue 11). A single
    ``kind IN (2+ kinds)`` was planned through ``ix_feed_project_id`` with the kind as a filter
    (SQLite has no planner statistics here): every event of the project after the cursor read,
    16 ms for a drain past 100,000 events of another kind. The ranges are disjoint and the
    first ``limit`` events of their union are among the first ``limit`` of each, so the outer
    ``ORDER BY id LIMIT`` returns what one filtered statement would. It stays one statement so
    that on PostgreSQL every branch sees one snapshot, the same rows and the same
    :func:`settled` horizon: statements apart could skip an event committed between them.

    Args:
        session: the session to read in.
        ranges: ``(project_id, kind or None for every kind, after)``, ``after`` a feed event id
            (exclusive); ranges must not overlap (distinct projects, or distinct kinds).
        limit: events at most (callers ask one more than a page to learn ``has_more``).

    Returns:
        Events by ascending id, settled (:func:`settled`), at most ``limit``.
    """
    if not ranges:
        return []
    postgresql = session.get_bind().dialect.name == "postgresql"
    if len(ranges) > MAX_BRANCHES:
        return list(session.execute(_filtered(ranges, limit, postgresql)).scalars().all())
    params: dict[str, Any] = {"b_limit": limit}
    for i, (pid, kind, after) in enumerate(ranges):
        params.update({f"b_project_{i}": pid, f"b_after_{i}": after})
        if kind is not None:
            params[f"b_kind_{i}"] = kind
    shape = tuple(kind is not None for _, kind, _ in ranges)
    statement = _branches(postgresql, shape)
    with _unprepared(session) if postgresql else contextlib.nullcontext():
        return list(session.execute(statement, params).scalars().all())


@contextlib.contextmanager
def _unprepared(session: Session) -> Iterator[None]:
    """Run :func:`tail`'s statement unprepared on PostgreSQL: planned for its values each time.

    psycopg prepares a statement on the server from its fifth run, and PostgreSQL then switches
    to a plan made for any values (a generic plan) when its estimate is not above the custom
    plans'. For this union the generic plan walks ``feed_events_pkey`` from each cursor,
    filtering on project and kind, in every branch: a feed read past 120,000 events of another
    kind took 57-87 ms from its eleventh run on a connection, against 1.5-3 ms before (a
    review's reproduction, ``pg_prepared_statements`` showing 10 generic plans). The
    connection's ``prepare_threshold`` is set aside for this one execution only.
    """
    driver = session.connection().connection.driver_connection
    threshold = driver.prepare_threshold  # type: ignore[union-attr]
    driver.prepare_threshold = None  # type: ignore[union-attr]
    try:
        yield
    finally:
        driver.prepare_threshold = threshold  # type: ignore[union-attr]


@functools.lru_cache(maxsize=128)
def _branches(postgresql: bool, kinded: tuple[bool, ...]) -> Any:
    """The statement of :func:`tail` for ranges with (True) or without a kind, built once: the
    union's column proxies cost ~1.5 ms of Python per call, more than the read itself."""
    ordered = FeedEvent.id.asc()  # type: ignore[union-attr]
    limit = sa.bindparam("b_limit", type_=sa.Integer)
    branches = [
        select(FeedEvent).where(FeedEvent.project_id == sa.bindparam(f"b_project_{i}"),
                                FeedEvent.id > sa.bindparam(f"b_after_{i}"),  # type: ignore[operator]
                                *([FeedEvent.kind == sa.bindparam(f"b_kind_{i}")] if kind else []),
                                _settled(FeedEvent.id, postgresql)).order_by(ordered).limit(limit)
        for i, kind in enumerate(kinded)]
    if len(branches) == 1:
        return branches[0]
    # SQLite takes no ORDER BY or LIMIT on a compound's terms: each branch is a subquery.
    union = union_all(*[branch.subquery().select() for branch in branches]).subquery()
    return select(FeedEvent).from_statement(select(union).order_by(union.c.id).limit(limit))


def _filtered(ranges: Sequence[tuple[str, str | None, int]], limit: int, postgresql: bool) -> Any:
    """Past :data:`MAX_BRANCHES`: one statement, an OR of ``(project, after)`` with ``kind IN``."""
    spans: dict[tuple[str, int], list[str]] = {}
    for pid, kind, after in ranges:
        spans.setdefault((pid, after), []).extend([kind] if kind is not None else [])
    where = or_(*[and_(FeedEvent.project_id == pid, FeedEvent.id > after,  # type: ignore[operator]
                       *([FeedEvent.kind.in_(kinds)] if kinds else []))  # type: ignore[attr-defined]
                  for (pid, after), kinds in spans.items()])
    return (select(FeedEvent).where(where, _settled(FeedEvent.id, postgresql))
            .order_by(FeedEvent.id.asc()).limit(limit))  # type: ignore[union-attr]
