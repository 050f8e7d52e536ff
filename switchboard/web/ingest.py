"""The receiver's hot path off the event loop: a source cache and one grouped delivery writer.

Issue 11 measured the receiver at 2 % of a bare async route, with the event loop blocked on
SQLite's write lock (health stalled 9.7 s while another process held it). Two parts fix it:

- :class:`SourceCache`: sources and their secrets, loaded once (in a worker thread) and kept
  until the ``sources`` change stamp moves. Triggers (migration 0007) bump the stamp on every
  change to ``sources`` or ``source_secrets`` from any process, so a rotation or a disable made
  by the CLI or another server is honoured: the writer checks the stamp inside the same
  transaction as the insert, and a delivery verified against a stale entry is verified again
  against fresh rows before anything is stored or acknowledged. Secret expiry is honoured by
  time: an entry is only used until its earliest secret expiry.
- :class:`DeliveryWriter`: one thread that takes every waiting delivery, inserts them in one
  write transaction with one compiled ``INSERT ... ON CONFLICT DO NOTHING`` (the dedup SELECT
  only on conflict), commits, hands them to processing, then resolves each request's future on
  its event loop. The loop never waits on the database: it awaits a future. Nothing is
  acknowledged before its commit (``tests/test_crash.py``).
"""

from __future__ import annotations

import asyncio
import logging
import queue as stdqueue
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

import anyio
import sqlalchemy as sa

from switchboard import admin, direct
from switchboard.errors import DependencyUnavailable, MalformedPayload, MalformedRequest, SwitchboardError
from switchboard.models import Delivery, Source, SourceSecret
from switchboard.models.stamps import read_stamp
from switchboard.prepared import Prepared
from switchboard.queue.dispatcher import drain
from switchboard.sources import SourceAdapter, SourceOptions, adapter_for

if TYPE_CHECKING:
    from switchboard.db import Database
    from switchboard.hub import Hub

log = logging.getLogger(__name__)

DELIVERIES = Delivery.__table__  # type: ignore[attr-defined]
SOURCE_ID = re.compile(r"src_[a-z2-7]{10,60}")
"""The shape of a source id in a hook URL (``new_id("src", 16)``; DESIGN.md §1); anything else
is an unknown source without a look-up."""
NO_SUCH_SOURCE = "no such source"
"""The 404's detail for every hook URL that names no enabled source (guard and receiver alike)."""
MAX_BATCH = 256
"""Deliveries per write transaction at most (one commit, one fsync on PostgreSQL)."""

@dataclass(frozen=True)
class CachedSource:
    """A source as the receiver needs it, with the secrets valid when it was loaded.

    Attributes:
        source: a detached ``Source`` row (read only; verifiers with per-source options read it).
        secrets: the secrets valid at load time.
        valid_until: the earliest expiry among ``secrets`` (``None``: none expires); past it the
            entry is reloaded, so an expired secret is never accepted.
        stamp: the ``sources`` change stamp the entry was read under.
        adapter: the provider's adapter (:func:`~switchboard.sources.adapter_for`).
        options: the source's verification options (``SourceOptions.of(source)``).
    """

    source: Source
    secrets: tuple[str, ...]
    valid_until: datetime | None
    stamp: int
    adapter: SourceAdapter = field(init=False)
    options: SourceOptions = field(init=False)

    def __post_init__(self) -> None:
        # Made once per load, not per delivery (the ORM's attribute reads and the look-ups were
        # about 3 % of the receiver's time on the event loop, issue 11).
        object.__setattr__(self, "adapter", adapter_for(self.source.provider))
        object.__setattr__(self, "options", SourceOptions.of(self.source))

    def usable(self, now: datetime) -> bool:
        """True while no secret of the entry has expired."""
        return self.valid_until is None or now < self.valid_until


class SourceCache:
    """Enabled sources by id, read through on a miss, dropped when the change stamp moves.

    Args:
        hub: the process hub (database and clock).
    """

    def __init__(self, hub: Hub) -> None:
        self.hub = hub
        self._entries: dict[str, CachedSource] = {}
        self._stamp = -1
        self._lock = threading.Lock()
        # Source id -> provider of every source this process loaded; kept across invalidations
        # (a source's provider never changes), bounded like the refusal tally.
        self._providers: dict[str, str] = {}

    def provider_of(self, source_id: str) -> str | None:
        """The provider of a source this process has loaded, else ``None`` (no I/O: safe on
        the loop; the refusal counters use it, :func:`switchboard.metrics.delivery_refused`)."""
        return self._providers.get(source_id)

    def peek(self, source_id: str, now: datetime) -> CachedSource | None:
        """The cached entry if present and not past a secret's expiry (no I/O: safe on the loop)."""
        entry = self._entries.get(source_id)
        if entry is not None and entry.usable(now):
            return entry
        return None

    def load(self, source_id: str) -> CachedSource | None:
        """Read the source, its valid secrets and the stamp in one read transaction (blocking).

        Returns:
            The entry, or ``None`` when the source does not exist or is disabled (not cached).
        """
        now = self.hub.clock.now()
        with self.hub.db.read() as s:
            stamp = read_stamp(s.connection())
            # One statement whose cost does not depend on whether a disabled row exists (s.get
            # built the disabled row's object first: ~40 us more than a miss, a timing oracle).
            source = s.execute(sa.select(Source).where(Source.id == source_id, Source.enabled)).scalar_one_or_none()
            if source is None:
                self._entries.pop(source_id, None)
                return None
            secrets = admin.source_secrets(s, source.id, now)
            expiries = s.execute(sa.select(SourceSecret.expires_at).where(
                SourceSecret.source_id == source.id, SourceSecret.expires_at.is_not(None),  # type: ignore[union-attr]
                SourceSecret.expires_at > now)).scalars().all()  # type: ignore[operator]
            s.expunge(source)
        entry = CachedSource(source, tuple(secrets), min(expiries) if expiries else None, stamp)
        if len(self._providers) > 100_000:
            self._providers.clear()
        self._providers[source_id] = source.provider
        with self._lock:
            # Loads run in worker threads: compare and insert under one lock, and never cache
            # an entry read under an older stamp than the one the cache already holds (a load
            # that read before a change could otherwise land in the dict a newer load started,
            # where no stamp check would ever drop it; a review found the interleaving).
            if stamp > self._stamp:
                # Everything read under an older stamp may be stale: start afresh.
                self._entries = {}
                self._stamp = stamp
            if stamp == self._stamp:
                self._entries[source_id] = entry
        return entry

    def invalidate(self) -> None:
        """Forget every entry (the writer saw the stamp move)."""
        with self._lock:
            self._entries = {}

    def check(self) -> bool:
        """Read the ``sources`` change stamp and forget every entry when it moved (blocking; the
        maintenance pass calls it every ``reap_interval_seconds``).

        The writer finds a moved stamp only when a delivery is stored; until then the request
        guard would read bodies sent to a source disabled while cached (the writer refuses them:
        nothing is accepted, but a quiet instance kept the entry indefinitely, a review found).

        Returns:
            True when entries were dropped.
        """
        if not self._entries:
            return False
        with self.hub.db.read() as s:
            stamp = read_stamp(s.connection())
        with self._lock:
            if stamp == self._stamp and all(entry.stamp == stamp for entry in self._entries.values()):
                return False
            self._entries = {}
            self._stamp = max(self._stamp, stamp)
        return True


async def known_source(hub: Hub, source_id: str, fresh: bool = False) -> CachedSource | None:
    """The enabled source a hook URL names, from the cache or read in a worker thread on a
    miss (never on the loop); ``None`` for an id of the wrong shape, an unknown or a disabled
    source (one answer for all three: no existence oracle, DESIGN.md §5).

    Args:
        fresh: skip the cache (re-verifying against rows read now).
    """
    if not SOURCE_ID.fullmatch(source_id):
        return None
    entry = None if fresh else hub.source_cache.peek(source_id, hub.clock.now())
    if entry is None:
        entry = await anyio.to_thread.run_sync(hub.source_cache.load, source_id)
    return entry


STALE = "stale"
"""Writer outcome: the source changed after the request was verified; verify again."""
MALFORMED = "malformed"
"""Writer outcome ``(MALFORMED, message)``: a row the adapter's admit refused (:func:`failed_row`,
by the receiver or by :func:`admit_row`) was stored ``failed``; the request is answered 400
``malformed_payload`` with ``message``, its ``error_detail`` (DESIGN.md §6.1)."""
REFUSED = "refused"
"""Writer outcome ``(REFUSED, message)``: the adapter's ``admit`` refused a header
(``MalformedRequest``); nothing was stored, and the request is answered 400
``malformed_request`` with ``message``; STALE instead when the stamp moved since verification."""
STORE_FAILED = "the delivery could not be stored; retry the delivery"
"""The 503's message for a row the database refused (both writers; never the driver's words)."""


@dataclass
class _Job:
    row: dict[str, Any]
    stamp: int
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future[tuple[str, str | None]]
    dispatch: bool = True
    admit: str | None = None
    done: bool = field(default=False)


def _resolve(answers: list[tuple[asyncio.Future[Any], Any, BaseException | None]]) -> None:
    """On the event loop: settle each request's future (skipping one already cancelled)."""
    for future, value, error in answers:
        if future.done():
            continue
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(value)


def _answer(jobs: list[_Job], outcomes: list[Any], errors: list[BaseException | None]) -> None:
    """Settle the jobs' futures with one ``call_soon_threadsafe`` per event loop: each call
    writes the loop's wake-up socket, which cost a fifth of the writer's time when done per
    delivery (issue 11)."""
    by_loop: dict[asyncio.AbstractEventLoop, list[tuple[asyncio.Future[Any], Any, BaseException | None]]] = {}
    for job, outcome, error in zip(jobs, outcomes, errors, strict=True):
        by_loop.setdefault(job.loop, []).append((job.future, outcome, error))
    for loop, answers in by_loop.items():
        try:
            loop.call_soon_threadsafe(_resolve, answers)
        except RuntimeError:  # the loop closed (shutdown): nothing more is acknowledged
            pass


class DeliveryWriter:
    """One thread storing deliveries in grouped write transactions.

    ``store`` (on the event loop) queues a row and awaits its :data:`Outcome`. A batch that
    fails is retried one delivery at a time, so one bad row fails only its own request (with
    the database's error, which the receiver turns into a 503 problem); a database that is
    unavailable fails the whole batch at once.

    Args:
        hub: the process hub.
        on_stored: called in the writer thread with the ids stored by a commit, once per
            commit (the hand-off to processing: ``Dispatcher.submit``).
    """

    def __init__(self, hub: Hub, on_stored: Callable[[list[str]], None]) -> None:
        self.hub = hub
        self.on_stored = on_stored
        self._insert = delivery_insert(hub.db.engine.dialect.name)
        self._queue: stdqueue.SimpleQueue[_Job | None] = stdqueue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="switchboard-delivery-writer", daemon=True)
        self._thread.start()

    async def store(self, row: dict[str, Any], stamp: int, dispatch: bool = True,
                    admit: str | None = None) -> tuple[str, str | None]:
        """Queue ``row`` (a full ``deliveries`` row) verified under ``stamp``; await the outcome.

        Args:
            row: every column of ``deliveries``.
            stamp: the ``sources`` change stamp the request was verified under.
            dispatch: hand the stored delivery to processing (not for a stored parse failure).
            admit: the provider whose adapter admits the body here, before the transaction
                (:func:`admit_row`); ``None`` when the receiver has admitted it.

        Returns:
            The :data:`Outcome`; not changed ``row`` (a STALE retry sends it again).
        """
        loop = asyncio.get_running_loop()
        future: asyncio.Future[tuple[str, str | None]] = loop.create_future()
        self._queue.put(_Job(row, stamp, loop, future, dispatch, admit))
        return await future

    def close(self) -> None:
        """Finish queued work, then stop the thread."""
        self._queue.put(None)
        self._thread.join(timeout=10)

    def _run(self) -> None:
        while True:
            job = self._queue.get()
            if job is None:
                return
            jobs, stop = drain(self._queue, job, MAX_BATCH)
            self._write(jobs)
            if stop:
                return

    def _write(self, jobs: list[_Job]) -> None:
        answers, stale = write_batch(self.hub.db, self._insert,
                                     [(job.row, job.stamp, job.admit) for job in jobs])
        if stale:
            self.hub.source_cache.invalidate()
        outcomes = [outcome for outcome, _ in answers]
        stored = [job.row["id"] for job, outcome in zip(jobs, outcomes, strict=True)
                  if outcome is not None and outcome[0] == "stored" and job.dispatch]
        hand_off(self.on_stored, stored)
        _answer(jobs, outcomes, [error for _, error in answers])


def hand_off(on_stored: Callable[[list[str]], None], stored: list[str]) -> None:
    """Hand a commit's stored deliveries to processing; a failure is logged, never raised (they
    are stored already: the sweeper hands them over). Both delivery writers call this."""
    if not stored:
        return
    try:
        on_stored(stored)
    except Exception:  # noqa: BLE001 - stored already; the sweeper hands them over
        log.warning("hand-off of %d deliveries failed; the sweeper will retry", len(stored))


Outcome = tuple[str, str | None]
"""What storing one delivery came to: ``("stored", id)``, ``("duplicate", first_id)``,
``(STALE, None)``, ``(MALFORMED, message)`` or ``(REFUSED, message)``."""


def failed_row(row: dict[str, Any], exc: MalformedPayload) -> dict[str, Any]:
    """A copy of ``row`` for a body the adapter's admit refused: ``failed`` with the error, and
    without its body, dedup key or digest, so the same bytes sent again are refused again, not
    answered as a duplicate (recorded, never acknowledged: DESIGN.md §6.1). The writer answers
    it ``(MALFORMED, error_detail)``."""
    return {**row, "status": "failed", "raw_body": None, "error_code": exc.code, "error_detail": exc.message,
            "dedup_key": None, "body_digest": None}


def admit_row(row: dict[str, Any], provider: str | None) -> tuple[dict[str, Any], Outcome | None]:
    """The receiver's admit of a verified delivery, done by the delivery writer before its
    transaction (adapters with :attr:`~switchboard.sources.base.BaseSource.admits_in_writer`;
    issue 11): ``row`` with its ``event`` and ``body_digest`` filled in, as the receiver would.

    Args:
        row: the receiver's row (``event`` and ``body_digest`` unset); not changed (a STALE
            outcome sends it again).
        provider: the source's provider, or ``None`` when the receiver admitted the body itself.

    Returns:
        ``(row to insert, None)``, the row :func:`failed_row` for a body the adapter refuses; or
        ``(row, (REFUSED, message))`` for a header it refuses, which is not stored.
    """
    if provider is None:
        return row, None
    adapter = adapter_for(provider)
    body, headers = row["raw_body"], row["headers"]
    try:
        envelope = adapter.admit(body, headers)
    except MalformedPayload as exc:
        return failed_row(row, exc), None
    except MalformedRequest as exc:  # a header the adapter needs
        return row, (REFUSED, exc.message)
    return {**row, "event": envelope.kind[:100], "body_digest": adapter.body_digest(headers, body)}, None


def delivery_insert(dialect: str) -> Prepared:
    """The receiver's one statement: ``INSERT INTO deliveries ... ON CONFLICT DO NOTHING
    RETURNING id`` for ``dialect`` (``sqlite`` or ``postgresql``), every column bound by name.

    No conflict target: any unique constraint (the dedup key today, more tomorrow) makes the
    insert a no-op, and :func:`duplicate_of` says which delivery it duplicates. Prepared:
    compiled once, run on the DBAPI cursor with the columns' own conversions (the sealed body,
    UTC times, JSON headers): SQLAlchemy's per-execution bookkeeping was most of the writer's
    time per delivery (issue 11).
    """
    if dialect == "postgresql":
        from sqlalchemy.dialects.postgresql import insert as dialect_insert
    else:
        from sqlalchemy.dialects.sqlite import insert as dialect_insert
    return Prepared(
        dialect_insert(DELIVERIES).values({c.name: sa.bindparam(c.name, type_=c.type) for c in DELIVERIES.c})
        .on_conflict_do_nothing().returning(DELIVERIES.c.id), [DELIVERIES.c.id])


def write_batch(db: Database, insert: Prepared, items: list[tuple[dict[str, Any], int, str | None]]
                ) -> tuple[list[tuple[Outcome | None, BaseException | None]], bool]:
    """Admit and store ``items`` (each a full ``deliveries`` row, the ``sources`` change stamp it
    was verified under, and the provider whose adapter admits it here or ``None``: see
    :func:`admit_row`), the rows in one write transaction (blocking; the delivery writer's
    thread or process).

    A batch that fails is retried one delivery at a time, so one bad row fails only its own
    request; a database that is unavailable (:class:`DependencyUnavailable`) fails the whole
    batch at once, rather than each delivery waiting out the busy timeout again on its own.

    Returns:
        ``([(outcome, None) or (None, error)] in the order of items, stale)``: ``stale`` is true
        when the stamp had moved for one of them (the caller's source cache is out of date).
    """
    answers: list[tuple[Outcome | None, BaseException | None]] = []
    rows: list[tuple[dict[str, Any], int, Outcome | None]] = []  # a refused header too: see _commit
    written_at: list[int] = []  # where each of rows answers
    for row, stamp, provider in items:
        try:
            row, refused = admit_row(row, provider)
        except Exception as exc:  # noqa: BLE001 - an adapter's bug: this request's 503, logged by class
            log.error("a delivery could not be admitted (%s)", type(exc).__name__)
            answers.append((None, DependencyUnavailable(STORE_FAILED)))
            continue
        written_at.append(len(answers))
        answers.append((None, None))  # the transaction's answer, below
        rows.append((row, stamp, refused))
    if not rows:
        return answers, False
    written, stale = _write_rows(db, insert, rows)
    for i, answer in zip(written_at, written, strict=True):
        answers[i] = answer
    return answers, stale


def _write_rows(db: Database, insert: Prepared, items: list[tuple[dict[str, Any], int, Outcome | None]]
                ) -> tuple[list[tuple[Outcome | None, BaseException | None]], bool]:
    """:func:`write_batch`'s transaction: ``items`` are rows, their stamps and refused answers."""
    try:
        outcomes = _commit(db, insert, items)
    except Exception as exc:  # noqa: BLE001 - retried alone, then reported to each request
        if len(items) > 1 and not isinstance(exc, DependencyUnavailable):
            answers: list[tuple[Outcome | None, BaseException | None]] = []
            stale = False
            for item in items:
                one, one_stale = _write_rows(db, insert, [item])
                answers.extend(one)
                stale = stale or one_stale
            return answers, stale
        log.warning("could not store %d deliveries (%s)", len(items), type(exc).__name__)
        if not isinstance(exc, SwitchboardError):
            # Not the database being down: a row the database refused. The request gets the
            # retryable 503 with a generic message, never a 500 with the driver's words, and
            # the log names the error's class only (the driver's message quotes the row).
            exc = DependencyUnavailable(STORE_FAILED)
        return [(None, exc)] * len(items), False
    return [(outcome, None) for outcome in outcomes], any(outcome[0] == STALE for outcome in outcomes)


def _commit(db: Database, insert: Prepared, items: list[tuple[dict[str, Any], int, Outcome | None]]
            ) -> list[Outcome]:
    # A direct write (switchboard.direct): the ORM session around the batch (its check-out,
    # transaction objects and commit bookkeeping) was about a fifth of the writer's CPU per
    # delivery (issue 11); only prepared statements run in it.
    outcomes: list[Outcome] = []
    with direct.write(db) as s:
        conn = s.connection()
        stamp = read_stamp(conn)
        for row, verified_under, refused in items:
            if verified_under != stamp or refused is not None:  # a refused header: STALE first too
                outcomes.append((STALE, None) if verified_under != stamp else refused)
                continue
            if insert.run(conn, row):
                # A refused body (failed_row) is recorded, never acknowledged.
                failed = row["status"] == "failed"
                outcomes.append((MALFORMED, row["error_detail"]) if failed else ("stored", row["id"]))
                continue
            first = duplicate_of(conn, row)
            if first is None:
                raise RuntimeError("the delivery insert was refused by a constraint that names no delivery")
            outcomes.append(("duplicate", first))
    return outcomes


def duplicate_of(conn: Any, row: dict[str, Any]) -> str | None:
    """The id of the stored delivery that ``row`` conflicts with, if any.

    Called only after ``INSERT ... ON CONFLICT DO NOTHING`` inserted nothing. Each unique
    constraint of ``deliveries`` that means "already received" gets a lookup here:
    ``(source_id, dedup_key)`` and ``(source_id, body_digest)`` (a captured body re-sent with
    fresh unsigned headers, issue 12 #7). Prepared statements on the driver's cursor: the writer's
    transaction is a direct write (:mod:`switchboard.direct`), where SQLAlchemy's own execution
    would begin a second transaction.

    Args:
        conn: a SQLAlchemy ``Connection`` in the writer's transaction (or a session).
    """
    for column, lookup in _DUPLICATE_OF.items():
        if row.get(column) is not None:
            found = lookup.run(conn, {"source_id": row["source_id"], "value": row[column]})
            if found:
                return str(found[0]["id"])
    return None


_DUPLICATE_OF = {
    column: Prepared(sa.select(DELIVERIES.c.id).where(DELIVERIES.c.source_id == sa.bindparam("source_id"),
                                                      DELIVERIES.c[column] == sa.bindparam("value")),
                     [DELIVERIES.c.id])
    for column in ("dedup_key", "body_digest")
}
"""The look-ups of :func:`duplicate_of`, one per unique constraint meaning "already received"."""
