"""Processing a stored delivery into a todo or feed event (DESIGN.md §2).

``process_delivery`` is the one job (``process_batch`` runs several in one transaction): parse, screen (reject ``<channel>`` breaks, secrets to
refs: :mod:`switchboard.intake.screening`), attribute (else quarantine), seal the refs in the
vault, then route to a todo and/or feed event in ONE transaction with the delivery's new
state. Parse and screening run before that transaction, without the write lock. It is safe to run any number of times and in many processes at once: only a delivery
still in ``received`` is taken (row-locked on PostgreSQL, under the single writer on SQLite),
and the unique origin keys make each todo and event exactly once.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from sqlalchemy import and_, or_, select, update
from sqlmodel import Session

from switchboard import metrics
from switchboard.db import unreachable
from switchboard.errors import InvalidArgument
from switchboard.feed import events as feed
from switchboard.inbox import chat_verdicts
from switchboard.inbox.items import DECIDED
from switchboard.intake import quarantine, screening, vault
from switchboard.intake.attribution import Attribution
from switchboard.intake.channel_break import Break
from switchboard.models import Delivery, Source
from switchboard.models.sources import MAX_PROCESS_FAILURES
from switchboard.notify import sessions
from switchboard.notify.wakes import Wake, route
from switchboard.queue import todos
from switchboard.queue.batch import (
    READ_DELIVERIES,
    READ_SOURCES,
    DeliveryRow,
    DirectoryCache,
    chunks,
    directory_cache,
    still_received,
    write_rows,
)
from switchboard.sources import SOURCE_SENDER, Envelope, adapter_for, routing

if TYPE_CHECKING:
    from switchboard.hub import Hub

log = logging.getLogger(__name__)


@dataclass
class _Prepared:
    """A delivery parsed and screened outside the write transaction."""

    row: DeliveryRow
    envelope: Envelope | None = None
    screened: Any = None
    parse_error: InvalidArgument | None = None


def _prepare(hub: Hub, delivery_ids: list[str]) -> list[_Prepared | None]:
    """Read the deliveries (one read session, one query for them and one for their sources'
    provider and queue) and run parse + screening without holding the write lock (issue 11:
    screening grows with the payload, 3.7 ms at 50 KB, and ran inside the write transaction).

    Returns:
        Per id in order, ``None`` when the delivery is gone or no longer ``received``, or the id
        came earlier in ``delivery_ids`` (a repeat is processed once: its screening would store
        the delivery's secrets in the vault a second time, under refs nothing names). The
        outcome depends only on the stored body and headers, which never change while the
        delivery is ``received``; the write transaction reads the sources again
        (:meth:`~switchboard.queue.batch.DirectoryCache.sources_of`).
    """
    with hub.db.read() as session:
        # Prepared statements (compiled once, issue 11): a batch of one delivery spent 1.8 ms here
        # building, cache-keying and loading two ORM selects, more than the rest of processing it.
        rows = {r["id"]: r for chunk in chunks(delivery_ids) for r in READ_DELIVERIES.run(session, {"b_ids": chunk})}
        wanted = sorted({r["source_id"] for r in rows.values() if r["status"] == "received"})
        sources = {r["id"]: r for chunk in chunks(wanted) for r in READ_SOURCES.run(session, {"b_ids": chunk})}
    out: list[_Prepared | None] = []
    seen: set[str] = set()
    for delivery_id in delivery_ids:
        delivery = rows.get(delivery_id)
        if delivery is None or delivery["status"] != "received" or delivery_id in seen:
            out.append(None)
            continue
        seen.add(delivery_id)
        body, headers = delivery["raw_body"] or b"", delivery["headers"] or {}
        source = sources[delivery["source_id"]]
        adapter = adapter_for(source["provider"])
        row = DeliveryRow(delivery)
        try:
            envelope = adapter.parse(body, headers)
        except InvalidArgument as exc:  # MalformedPayload, MalformedRequest
            out.append(_Prepared(row, parse_error=exc))
            continue
        out.append(_Prepared(row, envelope, screening.screen(body, headers, envelope, adapter, source["queue"])))
    return out


def process_delivery(hub: Hub, delivery_id: str) -> str | None:
    """Process one delivery if it is still ``received``.

    Returns:
        The delivery's new status, or ``None`` when there was nothing to do.
    """
    return process_batch(hub, [delivery_id])[0]


def process_batch(hub: Hub, delivery_ids: list[str]) -> list[str | None]:
    """Process deliveries in ONE write transaction (parse and screening before it), then
    publish their wakes. Each delivery's outcome is what :func:`process_delivery` would give.

    Raises:
        Exception: whatever failed; nothing of the batch is committed then (callers retry
        the deliveries one at a time, see :class:`~switchboard.queue.dispatcher.InlineDispatcher`).
    """
    started = time.perf_counter()
    prepared = _prepare(hub, delivery_ids)
    wakes: list[tuple[Wake, Any]] = []
    statuses: list[str | None] = []
    decided_for: list[str] = []  # agents whose prompt a chat verdict decided
    cache: DirectoryCache | None = None
    try:
        with hub.db.write() as session:
            cache = directory_cache(hub, session)
            picker = sessions.Picker(session, hub.clock)
            rows = still_received(hub, session, [item.row for item in prepared if item is not None])
            sources = cache.sources_of(session, rows)
            live = {row.id for row in rows}
            for item in prepared:
                if item is None or item.row.id not in live:
                    statuses.append(None)
                    continue
                status, wake, received_at = _apply(hub, session, item, cache, picker, decided_for,
                                                   sources[item.row.source_id])
                statuses.append(status)
                if wake is not None:
                    wakes.append((wake, received_at))
            write_rows(session, rows)  # every live row, changed by _apply
            # Last, after every event of the transaction: each wake learns the event before it
            # on its stream, so the stream can send it without reading (SQLite; issue 11).
            linked = sessions.link(session, [wake for wake, _ in wakes])
            wakes = [(wake, received_at) for wake, (_, received_at) in zip(linked, wakes, strict=True)]
    except BaseException:
        # Nothing committed: what the cache learnt in this transaction may rest on its writes.
        if cache is not None:
            cache.reset_to(-1)
        raise
    # Each delivery of the batch waited for the whole batch: that is its processing time.
    metrics.processing_observed(time.perf_counter() - started, sum(1 for st in statuses if st is not None))
    for agent_id in decided_for:  # the verdict goes out after the commit
        hub.after_decision(agent_id)
    for _, received_at in wakes:
        metrics.wake_published(received_at, hub.clock.now())
    hub.broker.publish_wakes([wake for wake, _ in wakes])
    return statuses


def _apply(
    hub: Hub,
    session: Session,
    item: _Prepared,
    cache: DirectoryCache,
    picker: sessions.Picker,
    decided_for: list[str],
    source: Source,
) -> tuple[str, Wake | None, Any]:
    """The database half of processing of a delivery still ``received``, in the caller's write
    transaction. Its own row's changes are assigned to ``item.row`` (the caller writes them).

    ``decided_for`` collects the agents whose permission prompt a chat verdict decided, so the
    caller can send the verdict after the commit (DESIGN.md §6.5).

    Returns:
        ``(new status, the wake to publish or None, the delivery's received_at)``.
    """
    delivery = item.row
    project_id = delivery.project_id
    now = hub.clock.now()
    delivery.processed_at = now
    if item.parse_error is not None:
        exc = item.parse_error
        delivery.status, delivery.error_code, delivery.error_detail = "failed", exc.code, exc.message
        delivery.raw_body = None  # nothing of an unparseable body is kept or shown
        return delivery.status, None, delivery.received_at
    envelope, screened = item.envelope, item.screened
    assert envelope is not None and screened is not None
    delivery.event = envelope.kind[:100]
    if screened.rejected is not None:
        metrics.delivery_outcome(source.provider, "rejected")
        return (
            _reject(hub, session, delivery, project_id, envelope.kind, screened.rejected),
            None,
            delivery.received_at,
        )
    assert screened.envelope is not None
    envelope = screened.envelope

    if envelope.event == "ping":
        delivery.status = "processed"
        feed.append(
            session,
            hub.clock,
            project_id,
            "delivery.received",
            envelope.summary or "Ping",
            subject_id=delivery.id,
            data={"kind": envelope.kind},
            origin_key=f"{delivery.id}:received",
        )
        return delivery.status, None, delivery.received_at

    sender = envelope.sender
    if sender is not None and sender.external_id == SOURCE_SENDER:
        sender = replace(sender, external_id=source.id)
    who = cache.attribute(session, sender, source)
    verdict = None
    if who.human_id is not None and source.provider in chat_verdicts.PROVIDERS:
        # Only the sender's own attributed identity can answer a prompt, never a release.
        verdict = chat_verdicts.parse(chat_verdicts.message_text(source.provider, envelope.payload))
    if who.human_id is None and delivery.released_by is not None:
        # A human released it from quarantine and answers for it.
        who = Attribution(delivery.released_by, None)
    if who.human_id is None:
        delivery.status, delivery.quarantine_reason = "quarantined", who.reason
        metrics.delivery_outcome(source.provider, "quarantined")
        feed.append(
            session,
            hub.clock,
            project_id,
            "delivery.quarantined",
            f"Quarantined {envelope.kind} delivery: {who.reason}",
            subject_id=delivery.id,
            data={"reason": who.reason, "kind": envelope.kind},
            origin_key=f"{delivery.id}:quarantined{':released' if delivery.released_at else ''}",
        )
        return delivery.status, None, delivery.received_at
    delivery.human_id = who.human_id
    if verdict is not None:
        return (
            _consume_verdict(hub, session, delivery, project_id, who.human_id, verdict, decided_for),
            None,
            delivery.received_at,
        )
    if screened.secrets:
        vault.store(
            session, vault.load_key_ring(hub.settings), project_id, delivery.id, screened.secrets, now
        )

    if envelope.title is None or not routing.wants_todo(source.provider, source.todo_events, envelope):
        # Not work, or not an event kind the source turns into todos: a feed event only.
        delivery.status = "processed"
        feed.append(
            session,
            hub.clock,
            project_id,
            "delivery.received",
            envelope.summary or envelope.title or envelope.kind,
            subject_id=delivery.id,
            data={"kind": envelope.kind},
            origin_key=f"{delivery.id}:received",
        )
        return delivery.status, None, delivery.received_at

    kind = f"{source.provider}.{envelope.kind}"
    todo_id, created = todos.create_rung(
        session,
        hub.clock,
        project_id=project_id,
        queue=source.queue,
        kind=kind,
        title=envelope.title,
        payload=envelope.payload,
        origin_key=f"delivery:{delivery.id}",
        source_id=source.id,
        delivery_id=delivery.id,
        human_id=who.human_id,
    )
    delivery.status, delivery.todo_id = "processed", todo_id
    if not created:
        return "processed", None, delivery.received_at
    # ring() with the recipients from the cache and the session from the batch's picker: a new
    # todo from a delivery is unassigned; its first ring was recorded by create_rung.
    name, agents = cache.recipients_of(session, project_id)
    wake = Wake(todo_id, name, source.queue, kind, source.provider, envelope.title, list(agents))
    target = picker.pick(wake.agent_ids)
    if target is None:
        return "processed", wake, delivery.received_at  # nobody attached: the todo waits (rule 1)
    # Written to the chosen session's stream ledger in this transaction (DESIGN.md §6.5a).
    return "processed", route(session, hub.clock, wake, target), delivery.received_at


def _consume_verdict(
    hub: Hub,
    session: Session,
    delivery: DeliveryRow,
    project_id: str,
    human_id: str,
    verdict: tuple[str, str],
    decided_for: list[str],
) -> str:
    """A chat verdict is consumed: no todo, one feed event (DESIGN.md §6.5); it decides the
    human's one open prompt with that id, else it is ignored (and logged by ``apply``)."""
    decision, request_id = verdict
    outcome = chat_verdicts.apply(session, hub.clock, human_id, decision, request_id)
    delivery.status = "processed"
    if outcome["outcome"] == "decided":
        decided_for.append(outcome["agent_id"])
        title = f"Chat verdict: permission prompt {request_id} {DECIDED[decision]}"
    else:
        title = f"Chat verdict ignored: {outcome['outcome']} request id {request_id}"
    feed.append(
        session,
        hub.clock,
        project_id,
        "delivery.received",
        title,
        subject_id=delivery.id,
        data={"kind": "chat.verdict", "outcome": outcome["outcome"], "request_id": request_id},
        origin_key=f"{delivery.id}:received",
    )
    return delivery.status


def record_failure(hub: Hub, delivery_id: str, exc: BaseException) -> None:
    """Count a crashed processing run; at the limit, mark the delivery ``failed``.

    The error class name is recorded, never its message (it may quote payload text). The row is
    changed with UPDATE statements, never loaded: a body that cannot be opened (a sealed body
    whose key left the ring) is the likeliest crash, and loading the row would open it again.

    An unavailable database (a dropped connection, SQLite locked past the busy timeout, a pool
    that ran dry: :func:`switchboard.db.unreachable`) is not counted: it says nothing about the delivery, and
    five of them in an outage marked a good delivery ``failed`` with no todo (found by a review).
    The delivery stays ``received`` for the sweeper. Any other database error is counted, even
    one PostgreSQL files as "operational" (a statement timeout, a program limit, a full disk), so
    a delivery that trips it every time still ends ``failed`` (a second review).
    """
    if unreachable(exc):
        return
    with hub.db.write() as session:
        failures = session.execute(
            update(Delivery)
            .where(Delivery.id == delivery_id, Delivery.status == "received")  # type: ignore[arg-type]
            .values(process_failures=Delivery.process_failures + 1)
            .returning(Delivery.process_failures)
        ).scalar()
        if failures is None or failures < MAX_PROCESS_FAILURES:
            return
        session.execute(
            update(Delivery)
            .where(Delivery.id == delivery_id)  # type: ignore[arg-type]
            .values(status="failed", error_code="processing_failed", processed_at=hub.clock.now(),
                    error_detail=f"processing crashed {failures} times ({type(exc).__name__})")
        )
    log.error("delivery %s failed processing %d times; marked failed", delivery_id, failures)


_SAFE_KIND = re.compile(r"[^a-z0-9_.-]")


def _reject(hub: Hub, session: Session, delivery: DeliveryRow, project_id: str, kind: str, found: Break) -> str:
    """Mark a delivery ``rejected`` for a channel break; drop its body (DESIGN.md §5).

    The feed event names the field path and rule, never the offending text: paths name only
    plain keys, and the kind is cut to ``[a-z0-9_.-]``.
    """
    safe_kind = _SAFE_KIND.sub("_", kind.lower())[:100]
    delivery.status, delivery.error_code, delivery.error_detail = (
        "rejected",
        "channel_break",
        found.path[:500],
    )
    delivery.event = safe_kind
    delivery.raw_body = None
    feed.append(
        session,
        hub.clock,
        project_id,
        "delivery.rejected",
        f"Rejected {safe_kind} delivery: channel tag at {found.path[:200]}",
        subject_id=delivery.id,
        data={"path": found.path[:500], "rule": found.rule},
        origin_key=f"{delivery.id}:rejected",
    )
    return delivery.status


SWEEP_PAGE = 1000
"""Deliveries a sweep reads (and hands over) at a time."""


def sweep(hub: Hub, received_before: datetime, everything: bool = False, redispatch: bool = True) -> int:
    """Re-dispatch deliveries left in ``received`` (e.g. after a crash); expire old quarantine.

    Args:
        received_before: only deliveries received at or before this UTC time (the start-up
            sweep: when the process started; the periodic one: now less the grace period).
        everything: hand over every such delivery, :data:`SWEEP_PAGE` at a time (the start-up
            sweep, and a new processing process after one died); otherwise the oldest
            :data:`SWEEP_PAGE` (the periodic sweep). Before, a new processing process after a
            burst got the first 1,000 and the rest waited for the periodic sweep (a review).
        redispatch: ``False`` only expires quarantine (the periodic sweep while rq jobs wait for
            a worker: the deliveries are most likely in them; see ``Hub._should_redispatch``).

    Returns:
        How many were handed to the dispatcher.
    """
    total = 0
    after: tuple[datetime, str] | None = None
    while redispatch:
        query = select(Delivery.id, Delivery.received_at).where(
            Delivery.status == "received", Delivery.received_at <= received_before)
        if after is not None:
            query = query.where(or_(Delivery.received_at > after[0],
                                    and_(Delivery.received_at == after[0], Delivery.id > after[1])))
        with hub.db.read() as session:
            rows = session.execute(query.order_by(Delivery.received_at, Delivery.id).limit(SWEEP_PAGE)).all()
        if rows:
            hub.dispatcher.submit([row.id for row in rows])
            total += len(rows)
        if not everything or len(rows) < SWEEP_PAGE:
            break
        after = (rows[-1].received_at, rows[-1].id)
    if total:
        log.info("sweeper re-dispatched %d stuck deliveries", total)
    retention = timedelta(days=hub.settings.quarantine_days)
    with hub.db.read() as session:  # the write lock only when there is something to expire (issue 11)
        due = quarantine.expiry_due(session, hub.clock, retention)
    expired = 0
    if due:
        with hub.db.write() as session:
            expired = quarantine.expire(session, hub.clock, retention)
    if expired:
        log.info("expired %d quarantined deliveries", expired)
    return total


def process_all(hub: Hub, delivery_ids: list[str], after_each: Callable[[], None] | None = None) -> int:
    """Process ``delivery_ids`` in one transaction (:func:`process_batch`); when that fails
    (nothing committed), each one alone, recording the failure of one that fails alone on its
    row. Never raises: embedded mode's worker thread and processing process run this, and the
    rq job (``worker.rq_process_deliveries``) raises on its result.

    Args:
        after_each: called after each commit of the one-at-a-time fallback (the processing
            process sends that delivery's wakes then, not after the rest of the batch).

    Returns:
        How many deliveries failed even alone (they stay ``received``; the sweeper or rq retries them).
    """
    # Once each, in the batch and one at a time: every hand-off (inline thread, processing
    # process, rq job) comes through here, and a sweep can repeat an id the writer handed over.
    delivery_ids = list(dict.fromkeys(delivery_ids))
    try:
        process_batch(hub, delivery_ids)
        return 0
    except Exception:  # noqa: BLE001 - nothing committed; one at a time finds the bad one
        pass
    failed = 0
    for delivery_id in delivery_ids:
        try:
            process_delivery(hub, delivery_id)
        except Exception as exc:  # noqa: BLE001 - the delivery stays 'received'; recorded on its row
            failed += 1
            _record(hub, delivery_id, exc)
        if after_each is not None:
            after_each()
    return failed


def process_or_record(hub: Hub, delivery_id: str) -> str | None:
    """Process one delivery; on failure log it and record it on the row instead of raising.

    The delivery stays ``received`` and the sweeper retries it.

    Returns:
        The delivery's new status, or ``None`` when processing failed.
    """
    try:
        return process_delivery(hub, delivery_id)
    except Exception as exc:  # noqa: BLE001 - the delivery stays 'received'; the sweeper retries it
        _record(hub, delivery_id, exc)
        return None


def _record(hub: Hub, delivery_id: str, exc: Exception) -> None:
    """Log a failed processing run and count it on the row (:func:`record_failure`)."""
    log.warning("processing failed for delivery %s (%s); it will be retried", delivery_id, type(exc).__name__)
    try:
        record_failure(hub, delivery_id, exc)
    except Exception:  # noqa: BLE001 - the database itself is down; the sweeper retries
        log.warning("could not record the failure of delivery %s", delivery_id)
