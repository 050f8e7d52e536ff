"""Quarantine: deliveries held until a human links the sender, releases or discards them.

A delivery is quarantined by processing (DESIGN.md §5) with a reason: ``unknown_sender``,
``bot_sender`` or ``untrusted_sender``. A quarantined delivery never wakes anyone and makes no
todo. From here a human can:

- **release** it: it goes back to ``received`` and is processed again, once (the todo's
  unique origin key and the conditional state change make a second release a ``Conflict``).
  The sender's identity must be linked and trusted by then, or the releasing human answers
  for it (``as_human``);
- **discard** it: ``discarded``, its raw body dropped;
- or let it **expire** after the retention (default 30 days, ``SWITCHBOARD_QUARANTINE_DAYS``):
  ``expired``, raw body dropped.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import Any

from sqlalchemy import select, update
from sqlmodel import Session

from switchboard import paging
from switchboard.clock import Clock
from switchboard.errors import Conflict, MalformedPayload, MalformedRequest, NotFound
from switchboard.feed import events as feed
from switchboard.intake.attribution import attribute
from switchboard.models import Delivery, Source, fixed_limit
from switchboard.sources import SOURCE_SENDER, Sender, adapter_for
from switchboard.text import readable


def _sender(delivery: Delivery, source: Source) -> Sender | None:
    try:
        sender = adapter_for(source.provider).parse(delivery.raw_body or b"", delivery.headers or {}).sender
    except (MalformedPayload, MalformedRequest):  # a stored body or header that no longer parses: no sender
        return None
    if sender is not None and sender.external_id == SOURCE_SENDER:
        sender = replace(sender, external_id=source.id)
    return sender


LIST_NAME = "quarantine"
_KEY = ("time", "str")


def list_quarantined(session: Session, project_id: str | None = None, limit: int = 100) -> list[dict[str, Any]]:
    """Quarantined deliveries, oldest first, with the sender to link (the first page of
    :func:`page_quarantined`).

    Returns:
        ``[{id, project_id, source_id, provider, reason, reason_now, event, received_at, sender}]``,
        where ``reason`` is why it was held, ``reason_now`` what attribution says today (``None``:
        the sender is linked and trusted now, so ``release`` will process it), and ``sender`` is
        ``{provider, workspace, external_id, login, is_bot}`` or ``None``.
    """
    return page_quarantined(session, None if project_id is None else [project_id], limit=limit)["deliveries"]


def page_quarantined(session: Session, project_ids: list[str] | None = None, *, limit: int = 100,
                     cursor: str | None = None) -> dict[str, Any]:
    """One page of quarantined deliveries in ``project_ids`` (all when None), oldest first.

    Keyset paging on ``(received_at, id)`` (:mod:`switchboard.paging`): a delivery released,
    discarded or newly quarantined between pages never makes another skipped or repeated.

    Returns:
        ``{deliveries: [row as in list_quarantined], has_more, next_cursor}``; ``next_cursor``
        is None on the last page.

    Raises:
        InvalidArgument: a malformed cursor.
    """
    query = select(Delivery, Source).join(Source, Source.id == Delivery.source_id).where(
        Delivery.status == "quarantined")
    if project_ids is not None:
        query = query.where(Delivery.project_id.in_(project_ids))  # type: ignore[attr-defined]
    if cursor is not None:
        query = query.where(paging.after((Delivery.received_at, Delivery.id), paging.decode(cursor, LIST_NAME, _KEY)))
    rows, next_cursor = paging.page(
        session.execute(query.order_by(Delivery.received_at, Delivery.id).limit(limit + 1)).all(),
        limit, LIST_NAME, _KEY, lambda r: (r[0].received_at, r[0].id))
    out = []
    for delivery, source in rows:
        sender = _sender(delivery, source)
        now = attribute(session, sender, source)
        out.append({"reason_now": now.reason,
            "id": delivery.id, "project_id": delivery.project_id, "source_id": source.id,
            "provider": source.provider, "reason": delivery.quarantine_reason, "event": delivery.event,
            "received_at": delivery.received_at.isoformat(),
            "sender": None if sender is None else {
                "provider": sender.provider, "workspace": sender.workspace, "external_id": sender.external_id,
                # The login is the sender's own text, shown to the human deciding: nothing hidden
                # (bidi, escapes: switchboard.text). Ids stay exact (they are what gets linked).
                "login": None if sender.login is None else readable(str(sender.login)), "is_bot": sender.is_bot},
        })
    return {"deliveries": out, "has_more": next_cursor is not None, "next_cursor": next_cursor}


def _quarantined(session: Session, delivery_id: str) -> tuple[Delivery, Source]:
    delivery = session.get(Delivery, delivery_id) if isinstance(delivery_id, str) else None
    if delivery is None:
        raise NotFound(f"no delivery {delivery_id!r}")
    if delivery.status != "quarantined":
        raise Conflict(f"delivery {delivery.id} is {delivery.status}, not quarantined")
    source = session.get(Source, delivery.source_id)
    assert source is not None
    return delivery, source


def release(session: Session, clock: Clock, delivery_id: str, as_human_id: str | None = None) -> Delivery:
    """Put a quarantined delivery back to ``received``; the caller then processes it.

    Args:
        delivery_id: the delivery.
        as_human_id: the releasing human, who answers for a sender that is still unattributed
            (a bot, or an account nobody will link). ``None`` requires the sender to be
            attributable now.

    Raises:
        NotFound: no such delivery. Conflict: not quarantined (e.g. released already), or the
            sender is still not attributable and no ``as_human_id`` was given.
    """
    delivery, source = _quarantined(session, delivery_id)
    if as_human_id is None:
        who = attribute(session, _sender(delivery, source), source)
        if who.human_id is None:
            hint = {"unknown_sender": "link the sender's identity to a human first",
                    "untrusted_sender": "the linked human must own the project, own an agent granted on it, "
                                        "or be on the source's trusted list (source trust)",
                    "bot_sender": "bots are never trusted"}.get(who.reason or "", "")
            raise Conflict(f"the sender is still {who.reason}: {hint}; or release it as a human who answers "
                           'for it (CLI: --as HUMAN; REST: {"as_self": true}; '
                           'web UI: tick "answer for the sender myself")')
    # Conditional on the state, so concurrent releases make exactly one re-run.
    changed = session.execute(
        update(Delivery).where(Delivery.id == delivery.id, Delivery.status == "quarantined")
        .values(status="received", quarantine_reason=None, released_at=clock.now(), released_by=as_human_id)
        .execution_options(synchronize_session="fetch")
    ).rowcount
    if changed != 1:
        raise Conflict(f"delivery {delivery.id} was released already")
    feed.append(session, clock, delivery.project_id, "delivery.released", f"Released {delivery.event or 'a'} delivery",
                subject_id=delivery.id, data={"by": as_human_id}, origin_key=f"{delivery.id}:released")
    session.flush()
    return delivery


def discard(session: Session, clock: Clock, delivery_id: str) -> Delivery:
    """Discard a quarantined delivery and drop its raw body.

    Raises:
        NotFound: no such delivery. Conflict: not quarantined.
    """
    delivery, _ = _quarantined(session, delivery_id)
    delivery.status, delivery.raw_body = "discarded", None
    feed.append(session, clock, delivery.project_id, "delivery.rejected",
                f"Discarded quarantined {delivery.event or ''} delivery", subject_id=delivery.id,
                data={"rule": "discarded_from_quarantine"}, origin_key=f"{delivery.id}:discarded")
    session.flush()
    return delivery


def expire(session: Session, clock: Clock, retention: timedelta) -> int:
    """Expire deliveries quarantined longer than ``retention`` (their raw bodies are dropped).

    Returns:
        How many expired.
    """
    result = session.execute(
        update(Delivery).where(*_past_retention(clock, retention))
        .values(status="expired", raw_body=None).execution_options(synchronize_session=False)
    )
    return int(result.rowcount or 0)


def _past_retention(clock: Clock, retention: timedelta) -> tuple[Any, ...]:
    # received_at <= processed_at, so the received_at bound changes nothing but the plan: the
    # status index's range ends at the cutoff (issue 11: with only the status, the sweep's check
    # read every quarantined delivery each time it found nothing to expire).
    cutoff = clock.now() - retention
    return (Delivery.status == "quarantined", Delivery.received_at < cutoff,  # type: ignore[operator]
            Delivery.processed_at < cutoff)  # type: ignore[operator]


def expiry_due(session: Session, clock: Clock, retention: timedelta) -> bool:
    """Whether :func:`expire` has a delivery to expire (one read of the status index over the
    quarantined deliveries received before the cutoff, in any session; the sweep asks first, in a
    read, and takes the write lock only then: issue 11)."""
    query = select(Delivery.id).where(*_past_retention(clock, retention)).limit(fixed_limit(1))
    return session.execute(query).first() is not None
