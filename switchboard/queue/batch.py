"""What processing keeps per transaction and across them (issue 11): the directory cache of
attribution outcomes and wake recipients, and the batch's rows loaded once.

Split from :mod:`switchboard.queue.jobs`, which applies them.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sqlalchemy import select
from sqlalchemy.orm import defer
from sqlmodel import Session

from switchboard.intake.attribution import Attribution, attribute
from switchboard.models import Delivery, Source
from switchboard.models.stamps import DIRECTORY_STAMP, read_stamp
from switchboard.notify.wakes import recipients

if TYPE_CHECKING:
    from switchboard.hub import Hub


class DirectoryCache:
    """Attribution outcomes and wake recipients, valid while the ``directory`` stamp holds.

    Issue 11: attribution and the wake look-ups were 43 % of processing. Both are functions of
    identities, trust lists, project owners, grants, agents and projects, whose every change
    bumps the ``directory`` change stamp (triggers, migration 0007). The stamp is read once per
    processing transaction; a different value empties the cache.
    """

    def __init__(self) -> None:
        self.stamp = -1
        self.attributions: dict[tuple[Any, ...], Attribution] = {}
        self.recipients: dict[str, tuple[str, list[str]]] = {}

    def reset_to(self, stamp: int) -> None:
        """Forget everything computed under another stamp."""
        if stamp != self.stamp:
            self.stamp = stamp
            self.attributions = {}
            self.recipients = {}

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


@dataclass
class Batch:
    """The batch's deliveries and their sources, loaded once in the write transaction and held
    here: the session's identity map keeps rows only while something refers to them, so a
    ``session.get`` per delivery read the same source again every time (issue 11)."""

    deliveries: dict[str, Delivery]
    sources: dict[str, Source]


def load_batch(hub: Hub, session: Session, delivery_ids: list[str]) -> Batch:
    """Lock and load the batch's deliveries (``FOR UPDATE SKIP LOCKED`` on PostgreSQL: one a
    concurrent worker holds is skipped, as before) and their sources: two statements."""
    if not delivery_ids:
        return Batch({}, {})
    # The body was read and parsed by _prepare: not loaded (nor unsealed) again here.
    query = select(Delivery).where(Delivery.id.in_(delivery_ids)).options(defer(Delivery.raw_body))  # type: ignore[attr-defined,arg-type]
    if not hub.db.is_sqlite:
        query = query.with_for_update(skip_locked=True)
    deliveries = {d.id: d for d in session.execute(query).scalars()}
    wanted = {d.source_id for d in deliveries.values()}
    sources = {src.id: src for src in session.execute(select(Source).where(Source.id.in_(wanted))).scalars()}  # type: ignore[attr-defined]
    return Batch(deliveries, sources)
