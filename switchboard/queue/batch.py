"""What processing keeps per transaction and across them (issue 11): the directory cache of
attribution outcomes and wake recipients, and the batch's delivery rows, read before the write
transaction and written back with one executemany UPDATE per set of changed columns.

Split from :mod:`switchboard.queue.jobs`, which applies them.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from sqlalchemy import bindparam, select, update
from sqlmodel import Session

from switchboard.intake.attribution import Attribution, attribute
from switchboard.models import Delivery, Source, by_key_only
from switchboard.models.stamps import DIRECTORY_STAMP, read_stamp
from switchboard.notify.wakes import recipients
from switchboard.prepared import Prepared

if TYPE_CHECKING:
    from switchboard.hub import Hub


class DirectoryCache:
    """Sources, attribution outcomes and wake recipients, valid while the ``directory`` stamp holds.

    Issue 11: attribution and the wake look-ups were 43 % of processing. They are functions of
    sources (trust lists, queue, todo events), identities, project owners, grants, agents and
    projects, whose every change bumps the ``directory`` change stamp (triggers, migration
    0007). The stamp is read once per processing transaction; a different value empties the
    cache, so a source is never older than the stamp an attribution is cached under.
    """

    def __init__(self) -> None:
        self.stamp = -1
        self.sources: dict[str, Source] = {}
        self.attributions: dict[tuple[Any, ...], Attribution] = {}
        self.recipients: dict[str, tuple[str, list[str]]] = {}

    def reset_to(self, stamp: int) -> None:
        """Forget everything read or computed under another stamp."""
        if stamp != self.stamp:
            self.stamp = stamp
            self.sources = {}
            self.attributions = {}
            self.recipients = {}

    def sources_of(self, session: Session, rows: list[DeliveryRow]) -> dict[str, Source]:
        """The rows' sources (detached rows, column attributes only), read in the caller's
        transaction the first time under this stamp (one statement for those missing).

        They are expunged at once: left in the session, a rollback of this transaction would
        expire them, and every later delivery of those sources would fail on the cached, expired
        rows (``DetachedInstanceError``) until the stamp changed."""
        sources = self.sources  # one dict throughout: another thread may reset the cache meanwhile
        missing = {row.source_id for row in rows} - sources.keys()
        if missing:
            query = select(Source).where(Source.id.in_(missing))  # type: ignore[attr-defined]
            loaded = list(session.execute(query).scalars())
            for src in loaded:
                session.expunge(src)
            sources.update((src.id, src) for src in loaded)
        return sources

    def attribute(self, session: Session, sender: Any, source: Source) -> Attribution:
        """:func:`~switchboard.intake.attribution.attribute`, remembered per source and sender."""
        key = (
            (source.id, None)
            if sender is None
            else (source.id, sender.provider, sender.workspace, sender.external_id, bool(sender.is_bot))
        )
        found = self.attributions.get(key)
        if found is None:
            found = self.attributions[key] = attribute(session, sender, source)
        return found

    def recipients_of(self, session: Session, project_id: str) -> tuple[str, list[str]]:
        """:func:`~switchboard.notify.wakes.recipients` of an unassigned todo, remembered per project."""
        found = self.recipients.get(project_id)
        if found is None:
            found = self.recipients[project_id] = recipients(session, project_id)
        return found


_CACHE_LOCK = threading.Lock()


def directory_cache(hub: Hub, session: Session) -> DirectoryCache:
    """The hub's processing cache, checked against the ``directory`` stamp in this transaction."""
    cache = getattr(hub, "_directory_cache", None)
    if cache is None:
        with _CACHE_LOCK:
            cache = getattr(hub, "_directory_cache", None)
            if cache is None:
                cache = DirectoryCache()
                hub._directory_cache = cache  # type: ignore[attr-defined]
    cache.reset_to(read_stamp(session.connection(), DIRECTORY_STAMP))
    return cache


class DeliveryRow:
    """A delivery as processing read it before its write transaction, and what processing
    changes on it (``changes``: column name to new value), written by :func:`write_rows`.

    Issue 11: loading the batch's deliveries as ORM objects under the write lock and writing
    them back with the ORM's flush were a third of the time the processing process held
    SQLite's one write lock. Of the fields read here only ``released_by`` and ``released_at``
    can differ the next time a delivery is ``received`` (quarantined, then released): the write
    transaction checks that it still is ``received`` and reads those two again
    (:func:`still_received`).
    """

    FIELDS = ("id", "source_id", "project_id", "received_at", "released_by", "released_at")

    def __init__(self, delivery: Mapping[str, Any]) -> None:
        """``delivery``: the row as :data:`READ_DELIVERIES` read it (column name to value)."""
        self.__dict__["changes"] = {}
        self.read(**{name: delivery[name] for name in self.FIELDS})

    def read(self, **values: Any) -> None:
        """Set fields as read from the database (not changes to write)."""
        self.__dict__.update(values)

    def __setattr__(self, name: str, value: Any) -> None:
        self.__dict__[name] = value
        self.changes[name] = value


def still_received(hub: Hub, session: Session, rows: list[DeliveryRow]) -> list[DeliveryRow]:
    """The rows still ``received``, in the caller's write transaction: one statement, which also
    refreshes ``released_by`` and ``released_at`` (a delivery quarantined and released again
    between the read and this transaction is ``received`` once more, and its releaser answers
    for it). On PostgreSQL the rows are locked ``FOR UPDATE SKIP LOCKED`` (one a concurrent
    worker holds is skipped, and processed by that worker)."""
    if not rows:
        return []
    statement = _STILL_RECEIVED[hub.db.is_sqlite]
    found = {}
    for chunk in chunks([row.id for row in rows]):
        found.update((r["id"], r) for r in statement.run(session, {"b_ids": chunk}))
    live = [row for row in rows if row.id in found]
    for row in live:
        row.read(released_by=found[row.id]["released_by"], released_at=found[row.id]["released_at"])
    return live


DELIVERIES = Delivery.__table__  # type: ignore[attr-defined]
SOURCES = Source.__table__  # type: ignore[attr-defined]
CHUNK = 32
"""Ids per prepared ``IN`` list at most: each length is compiled once (:class:`Prepared`), so
longer lists are read in chunks and the compiled statements stay a bounded set."""


def chunks(ids: list[str]) -> list[list[str]]:
    """``ids`` in lists of at most :data:`CHUNK`."""
    return [ids[i:i + CHUNK] for i in range(0, len(ids), CHUNK)]


def _ids_in(table: Any, *columns: Any) -> Any:
    return select(*columns).where(table.c.id.in_(bindparam("b_ids", expanding=True)))


_STILL_COLUMNS = (DELIVERIES.c.id, DELIVERIES.c.released_by, DELIVERIES.c.released_at)
# The key, not the status index, finds the rows (``by_key_only``: SQLite read every received
# delivery through ix_deliveries_status_received_at for each batch).
_STILL = _ids_in(DELIVERIES, *_STILL_COLUMNS).where(by_key_only(DELIVERIES.c.status) == "received")
_STILL_RECEIVED = {
    # True: SQLite (its one writer excludes the others); False: PostgreSQL, rows locked.
    True: Prepared(_STILL, _STILL_COLUMNS, "b_ids"),
    False: Prepared(_STILL.with_for_update(skip_locked=True), _STILL_COLUMNS, "b_ids"),
}
_READ_COLUMNS = (DELIVERIES.c.id, DELIVERIES.c.source_id, DELIVERIES.c.project_id, DELIVERIES.c.received_at,
                 DELIVERIES.c.released_by, DELIVERIES.c.released_at, DELIVERIES.c.status, DELIVERIES.c.raw_body,
                 DELIVERIES.c.headers)
READ_DELIVERIES = Prepared(_ids_in(DELIVERIES, *_READ_COLUMNS), _READ_COLUMNS, "b_ids")
"""Processing's read of a batch before its write transaction: the :class:`DeliveryRow` fields,
the status, the body (opened by its sealed column type) and the headers."""
_SOURCE_COLUMNS = (SOURCES.c.id, SOURCES.c.provider, SOURCES.c.queue)
READ_SOURCES = Prepared(_ids_in(SOURCES, *_SOURCE_COLUMNS), _SOURCE_COLUMNS, "b_ids")
"""The provider and queue of a batch's sources (parse and screening, before the transaction)."""
_UPDATES: dict[tuple[str, ...], Any] = {}


def write_rows(session: Session, rows: list[DeliveryRow]) -> None:
    """Write each row's ``changes`` with ``UPDATE deliveries SET ... WHERE id = :id``, one
    executemany per set of changed columns (usually one or two per batch)."""
    groups: dict[tuple[str, ...], list[dict[str, Any]]] = {}
    for row in rows:
        if row.changes:
            names = tuple(sorted(row.changes))
            groups.setdefault(names, []).append({"b_id": row.id, **{f"v_{n}": v for n, v in row.changes.items()}})
    for names, params in groups.items():
        stmt = _UPDATES.get(names)
        if stmt is None:
            stmt = _UPDATES[names] = Prepared(
                update(DELIVERIES)
                .where(DELIVERIES.c.id == bindparam("b_id"))
                .values({n: bindparam(f"v_{n}", type_=DELIVERIES.c[n].type) for n in names})
            )
        stmt.run_many(session, params)
