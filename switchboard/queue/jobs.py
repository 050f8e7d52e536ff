"""Processing a stored delivery into a todo or feed event (DESIGN.md §2).

``process_delivery`` is the one job: parse, screen (reject ``<channel>`` breaks, secrets to
refs: :mod:`switchboard.intake.screening`), attribute (else quarantine), seal the refs in the
vault, then route to a todo and/or feed event in ONE transaction with the delivery's new
state. It is safe to run any number of times and in many processes at once: only a delivery
still in ``received`` is taken (row-locked on PostgreSQL, under the single writer on SQLite),
and the unique origin keys make each todo and event exactly once.
"""

from __future__ import annotations

import logging
import re
from dataclasses import replace
from typing import TYPE_CHECKING

from sqlalchemy import select
from sqlmodel import Session

from switchboard import metrics
from switchboard.errors import InvalidArgument
from switchboard.feed import events as feed
from switchboard.inbox import chat_verdicts
from switchboard.intake import quarantine, screening, vault
from switchboard.intake.attribution import Attribution, attribute
from switchboard.intake.channel_break import Break
from switchboard.models import Delivery, Project, Source
from switchboard.models.sources import MAX_PROCESS_FAILURES
from switchboard.notify.wakes import Wake, ring
from switchboard.queue import todos
from switchboard.sources import SOURCE_SENDER, adapter_for, routing

if TYPE_CHECKING:
    from switchboard.hub import Hub

log = logging.getLogger(__name__)


@metrics.timed_processing
def process_delivery(hub: Hub, delivery_id: str) -> str | None:
    """Process one delivery if it is still ``received``.

    Returns:
        The delivery's new status, or ``None`` when there was nothing to do.
    """
    decided_for: list[str] = []
    status = _process(hub, delivery_id, decided_for)
    for agent_id in decided_for:  # a chat verdict decided a prompt: after the commit
        hub.after_decision(agent_id)
    return status


def _process(hub: Hub, delivery_id: str, decided_for: list[str]) -> str | None:
    wake: Wake | None = None
    with hub.db.write() as session:
        query = select(Delivery).where(Delivery.id == delivery_id)
        if not hub.db.is_sqlite:
            query = query.with_for_update(skip_locked=True)
        delivery = session.execute(query).scalars().first()
        if delivery is None or delivery.status != "received":
            return None
        source = session.get(Source, delivery.source_id)
        project = session.get(Project, delivery.project_id)
        assert source is not None and project is not None
        now = hub.clock.now()
        delivery.processed_at = now
        adapter = adapter_for(source.provider)
        try:
            envelope = adapter.parse(delivery.raw_body or b"", delivery.headers or {})
        except InvalidArgument as exc:  # MalformedPayload, MalformedRequest
            delivery.status, delivery.error_code, delivery.error_detail = "failed", exc.code, exc.message
            delivery.raw_body = None  # nothing of an unparseable body is kept or shown
            return delivery.status
        delivery.event = envelope.kind[:100]

        screened = screening.screen(delivery.raw_body or b"", delivery.headers or {}, envelope, adapter,
                                    source.queue)
        if screened.rejected is not None:
            metrics.delivery_outcome(source.provider, "rejected")
            return _reject(hub, session, delivery, project.id, envelope.kind, screened.rejected)
        assert screened.envelope is not None
        envelope = screened.envelope

        if envelope.event == "ping":
            delivery.status = "processed"
            feed.append(session, hub.clock, project.id, "delivery.received", envelope.summary or "Ping",
                        subject_id=delivery.id, data={"kind": envelope.kind}, origin_key=f"{delivery.id}:received")
            return delivery.status

        sender = envelope.sender
        if sender is not None and sender.external_id == SOURCE_SENDER:
            sender = replace(sender, external_id=source.id)
        who = attribute(session, sender, source)
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
            feed.append(session, hub.clock, project.id, "delivery.quarantined",
                        f"Quarantined {envelope.kind} delivery: {who.reason}", subject_id=delivery.id,
                        data={"reason": who.reason, "kind": envelope.kind},
                        origin_key=f"{delivery.id}:quarantined{':released' if delivery.released_at else ''}")
            return delivery.status
        delivery.human_id = who.human_id
        if verdict is not None:
            return _consume_verdict(hub, session, delivery, project.id, who.human_id, verdict, decided_for)
        if screened.secrets:
            vault.store(session, vault.load_key_ring(hub.settings), project.id, delivery.id, screened.secrets, now)

        if envelope.title is None or not routing.wants_todo(source.provider, source.todo_events, envelope):
            # Not work, or not an event kind the source turns into todos: a feed event only.
            delivery.status = "processed"
            feed.append(session, hub.clock, project.id, "delivery.received",
                        envelope.summary or envelope.title or envelope.kind, subject_id=delivery.id,
                        data={"kind": envelope.kind}, origin_key=f"{delivery.id}:received")
            return delivery.status

        todo, created = todos.create(
            session, hub.clock, project_id=project.id, queue=source.queue, kind=f"{source.provider}.{envelope.kind}",
            title=envelope.title, payload=envelope.payload, origin_key=f"delivery:{delivery.id}",
            source_id=source.id, delivery_id=delivery.id, human_id=who.human_id,
        )
        delivery.status, delivery.todo_id = "processed", todo.id
        if created:
            wake = ring(session, hub.clock, todo)
    if wake is not None:
        metrics.wake_published(delivery.received_at, hub.clock.now())
        hub.broker.publish_wake(wake)
    return "processed"


def _consume_verdict(hub: Hub, session: Session, delivery: Delivery, project_id: str, human_id: str,
                     verdict: tuple[str, str], decided_for: list[str]) -> str:
    """A chat verdict is consumed: no todo, one feed event (DESIGN.md §6.5); it decides the
    human's one open prompt with that id, else it is ignored (and logged by ``apply``)."""
    decision, request_id = verdict
    outcome = chat_verdicts.apply(session, hub.clock, human_id, decision, request_id)
    delivery.status = "processed"
    if outcome["outcome"] == "decided":
        decided_for.append(outcome["agent_id"])
        title = f"Chat verdict: permission prompt {request_id} {decision}d"
    else:
        title = f"Chat verdict ignored: {outcome['outcome']} request id {request_id}"
    feed.append(session, hub.clock, project_id, "delivery.received", title, subject_id=delivery.id,
                data={"kind": "chat.verdict", "outcome": outcome["outcome"], "request_id": request_id},
                origin_key=f"{delivery.id}:received")
    return delivery.status


def record_failure(hub: Hub, delivery_id: str, exc: BaseException) -> None:
    """Count a crashed processing run; at the limit, mark the delivery ``failed``.

    The error class name is recorded, never its message (it may quote payload text).
    """
    with hub.db.write() as session:
        delivery = session.get(Delivery, delivery_id)
        if delivery is None or delivery.status != "received":
            return
        delivery.process_failures += 1
        if delivery.process_failures >= MAX_PROCESS_FAILURES:
            delivery.status, delivery.error_code = "failed", "processing_failed"
            delivery.error_detail = f"processing crashed {delivery.process_failures} times ({type(exc).__name__})"
            delivery.processed_at = hub.clock.now()
            log.error("delivery %s failed processing %d times; marked failed", delivery_id,
                      delivery.process_failures)


_SAFE_KIND = re.compile(r"[^a-z0-9_.-]")


def _reject(hub: Hub, session: Session, delivery: Delivery, project_id: str, kind: str, found: Break) -> str:
    """Mark a delivery ``rejected`` for a channel break; drop its body (DESIGN.md §5).

    The feed event names the field path and rule, never the offending text: paths name only
    plain keys, and the kind is cut to ``[a-z0-9_.-]``.
    """
    safe_kind = _SAFE_KIND.sub("_", kind.lower())[:100]
    delivery.status, delivery.error_code, delivery.error_detail = "rejected", "channel_break", found.path[:500]
    delivery.event = safe_kind
    delivery.raw_body = None
    feed.append(session, hub.clock, project_id, "delivery.rejected",
                f"Rejected {safe_kind} delivery: channel tag at {found.path[:200]}",
                subject_id=delivery.id, data={"path": found.path[:500], "rule": found.rule},
                origin_key=f"{delivery.id}:rejected")
    return delivery.status


def sweep(hub: Hub, older_than_seconds: float) -> int:
    """Re-dispatch deliveries left in ``received`` (e.g. after a crash); expire old quarantine.

    Returns:
        How many were handed to the dispatcher.
    """
    from datetime import timedelta

    cutoff = hub.clock.now() - timedelta(seconds=older_than_seconds)
    with hub.db.read() as session:
        ids = session.execute(
            select(Delivery.id).where(Delivery.status == "received", Delivery.received_at <= cutoff)
            .order_by(Delivery.received_at).limit(1000)
        ).scalars().all()
    for delivery_id in ids:
        hub.dispatcher.submit(delivery_id)
    if ids:
        log.info("sweeper re-dispatched %d stuck deliveries", len(ids))
    with hub.db.write() as session:
        expired = quarantine.expire(session, hub.clock, timedelta(days=hub.settings.quarantine_days))
    if expired:
        log.info("expired %d quarantined deliveries", expired)
    return len(ids)


def rq_process_delivery(delivery_id: str) -> str | None:
    """The rq job entry point: process with this worker process's hub (built from the environment)."""
    from switchboard.hub import worker_hub

    hub = worker_hub()
    try:
        return process_delivery(hub, delivery_id)
    except Exception as exc:
        record_failure(hub, delivery_id, exc)
        raise
