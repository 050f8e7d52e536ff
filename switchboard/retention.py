"""Retention: raw bodies and old rows dropped on schedule (DESIGN.md §2, issue 14).

- A delivery's **raw body** (sealed, may hold secrets) is kept only as long as replay needs it:
  dropped ``raw_body_days`` (``SWITCHBOARD_RAW_BODY_DAYS``, default 7) after the delivery was
  received, once it is settled (``processed``, ``rejected``, ``failed``, ``discarded``,
  ``expired``). Quarantined deliveries keep theirs until the quarantine expiry
  (``SWITCHBOARD_QUARANTINE_DAYS``) so a release still works; ``received`` ones are untouched.
- **Deliveries** and **feed events** older than ``retention_days``
  (``SWITCHBOARD_RETENTION_DAYS``, default 90) are deleted (deliveries only when settled).
  Dedup keys live on the delivery rows (DESIGN.md §6.1), so dedup holds for every retained
  row: only a redelivery older than the retention is no longer recognised.

:func:`prune` is what the maintenance pass of ``serve`` runs (hourly) and what
``switchboard prune`` runs; deletes go in batches so the single SQLite writer is never held
for long.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from sqlalchemy import delete, func, select, update

from switchboard.models import Delivery, FeedEvent

if TYPE_CHECKING:
    from switchboard.hub import Hub

SETTLED = ("processed", "rejected", "failed", "discarded", "expired")
BATCH = 1000


@dataclass(frozen=True)
class PruneReport:
    """What a prune pass dropped (or would drop, with ``dry_run``).

    Attributes:
        raw_bodies: settled deliveries whose raw body was dropped.
        deliveries: deliveries deleted.
        feed_events: feed events deleted.
        body_cutoff, row_cutoff: the UTC times before which bodies and rows go.
        dry_run: nothing was changed.
    """

    raw_bodies: int
    deliveries: int
    feed_events: int
    body_cutoff: datetime
    row_cutoff: datetime
    dry_run: bool

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (times in ISO 8601)."""
        data = asdict(self)
        data["body_cutoff"], data["row_cutoff"] = self.body_cutoff.isoformat(), self.row_cutoff.isoformat()
        return data


def prune(hub: Hub, dry_run: bool = False) -> PruneReport:
    """Drop raw bodies past ``raw_body_days`` and rows past ``retention_days``.

    Args:
        hub: the process hub (settings, clock, database).
        dry_run: only count.

    Returns:
        The counts.
    """
    now = hub.clock.now()
    body_cutoff = now - timedelta(days=hub.settings.raw_body_days)
    row_cutoff = now - timedelta(days=hub.settings.retention_days)
    bodies = (Delivery.status.in_(SETTLED), Delivery.received_at < body_cutoff,  # type: ignore[attr-defined]
              Delivery.raw_body.is_not(None))  # type: ignore[union-attr]
    old_rows = (Delivery.status.in_(SETTLED), Delivery.received_at < row_cutoff)  # type: ignore[attr-defined]
    if dry_run:
        with hub.db.read() as s:
            n_bodies = s.execute(select(func.count()).select_from(Delivery).where(*bodies)).scalar_one()
            n_rows = s.execute(select(func.count()).select_from(Delivery).where(*old_rows)).scalar_one()
            n_events = s.execute(select(func.count()).select_from(FeedEvent)
                                 .where(FeedEvent.created_at < row_cutoff)).scalar_one()
        return PruneReport(n_bodies, n_rows, n_events, body_cutoff, row_cutoff, True)
    n_bodies = _in_batches(hub, lambda ids: update(Delivery).where(Delivery.id.in_(ids))  # type: ignore[attr-defined]
                           .values(raw_body=None), select(Delivery.id).where(*bodies))
    n_rows = _in_batches(hub, lambda ids: delete(Delivery).where(Delivery.id.in_(ids)),  # type: ignore[attr-defined]
                         select(Delivery.id).where(*old_rows))
    n_events = _prune_events(hub, row_cutoff)
    return PruneReport(n_bodies, n_rows, n_events, body_cutoff, row_cutoff, False)


def _prune_events(hub: Hub, cutoff: datetime) -> int:
    """Delete the feed events created before ``cutoff``, walking the feed by id from the oldest,
    ``BATCH`` ids per transaction.

    Feed ids grow with time (``created_at`` is the clock at the insert), so the old events are
    the first ones by id: each transaction reads the next ``BATCH`` ids past the last window and
    deletes those created before the cutoff, and the walk ends at a window with none (the new
    events begin there). ``created_at`` has no index (the feed insert is on every delivery's
    path): filtered by it alone, the read went through the whole table inside the write
    transaction whenever nothing was old enough (issue 11: 21 ms per 200,000 events, hourly,
    the writer held). An event dated ahead of its neighbours (a clock set ahead, then put back)
    is stepped over, not waited for; an old event behind a whole window of newer ones waits for
    a later pass (``prune --dry-run`` counts it now).

    Returns:
        How many were deleted.
    """
    total, after = 0, None
    while True:
        with hub.db.write() as s:
            window = select(FeedEvent.id, FeedEvent.created_at).order_by(FeedEvent.id).limit(BATCH)
            if after is not None:
                window = window.where(FeedEvent.id > after)  # type: ignore[operator]
            rows = s.execute(window).all()
            old = [event_id for event_id, created_at in rows if created_at < cutoff]
            if old:
                s.execute(delete(FeedEvent).where(FeedEvent.id.in_(old)),  # type: ignore[union-attr]
                          execution_options={"synchronize_session": False})
        total += len(old)
        if not old or len(rows) < BATCH:
            return total
        after = rows[-1][0]

def _in_batches(hub: Hub, statement: Any, ids_query: Any) -> int:
    """Apply ``statement(ids)`` to the rows ``ids_query`` selects, ``BATCH`` per transaction."""
    total = 0
    while True:
        with hub.db.write() as s:
            ids = list(s.execute(ids_query.limit(BATCH)).scalars())
            if not ids:
                return total
            s.execute(statement(ids), execution_options={"synchronize_session": False})
        total += len(ids)
        if len(ids) < BATCH:
            return total


class RetentionSchedule:
    """Runs :func:`prune` from the maintenance loop at most once per ``interval_seconds``."""

    def __init__(self, interval_seconds: float = 3600.0) -> None:
        self.interval_seconds = interval_seconds
        self._next = 0.0

    def every(self, interval_seconds: float) -> None:
        """Prune every ``interval_seconds`` from now on, starting with the next pass."""
        self.interval_seconds, self._next = interval_seconds, 0.0

    def maybe_run(self, hub: Hub, monotonic_now: float) -> PruneReport | None:
        """Prune when due (the first call is due at once)."""
        if monotonic_now < self._next:
            return None
        self._next = monotonic_now + self.interval_seconds
        return prune(hub)


def maintain(hub: Hub, monotonic_now: float) -> None:
    """The operations part of the maintenance pass: flush refusal tallies, prune when due.

    Args:
        hub: the ``serve`` process's hub.
        monotonic_now: ``time.monotonic()`` of this pass.
    """
    from switchboard import refusals

    if hub.refusals:  # no write transaction (SQLite's one writer) when there is nothing to add
        with hub.db.write() as s:
            refusals.flush(s, hub.refusals, hub.clock.now())
    hub.retention.maybe_run(hub, monotonic_now)
