"""Per-source tallies of refused deliveries, for ``switchboard source show`` (issue 14).

The receiver notes each refusal in memory (:class:`RefusalTally`, no database write on the
request path, so a flood of forged requests costs no writes per request); the maintenance pass
of ``serve`` flushes the tally into ``source_refusals`` every couple of seconds. A crash loses
at most one interval of counts, never a delivery (refused deliveries are not stored).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlmodel import Session

from switchboard.models import SourceRefusal

KEEP_LAST = 5


@dataclass
class _Entry:
    count: int = 0
    last: list[datetime] = field(default_factory=list)


class RefusalTally:
    """Refusals noted since the last flush, by ``(source id, reason)``; thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entries: dict[tuple[str, str], _Entry] = {}

    def note(self, source_id: str, reason: str, at: datetime) -> None:
        """Count one refusal of ``source_id`` for ``reason`` (an error code) at ``at`` (UTC)."""
        with self._lock:
            if len(self._entries) > 10_000:  # a flood across many ids: keep the memory bounded
                return
            entry = self._entries.setdefault((source_id[:40], reason[:60]), _Entry())
            entry.count += 1
            entry.last = [at, *entry.last][:KEEP_LAST]

    def __bool__(self) -> bool:
        """Whether anything was noted since the last flush."""
        return bool(self._entries)

    def take(self) -> dict[tuple[str, str], _Entry]:
        """Return and clear what was noted."""
        with self._lock:
            taken, self._entries = self._entries, {}
        return taken


def flush(session: Session, tally: RefusalTally, now: datetime) -> int:
    """Add the noted refusals to ``source_refusals``.

    Returns:
        How many ``(source, reason)`` rows were updated.
    """
    taken = tally.take()
    for (source_id, reason), entry in taken.items():
        row = session.get(SourceRefusal, (source_id, reason))
        if row is None:
            row = SourceRefusal(source_id=source_id, reason=reason, count=0, last_at=[], updated_at=now)
            session.add(row)
        row.count += entry.count
        row.last_at = ([t.isoformat() for t in entry.last] + list(row.last_at or []))[:KEEP_LAST]
        row.updated_at = now
    return len(taken)


def for_source(session: Session, source_id: str) -> list[dict[str, Any]]:
    """The refusal counts of one source: ``[{reason, count, last_at: [iso, ...]}]``, most first."""
    rows = session.execute(select(SourceRefusal).where(SourceRefusal.source_id == source_id)).scalars().all()
    return sorted(({"reason": r.reason, "count": r.count, "last_at": list(r.last_at or [])} for r in rows),
                  key=lambda d: (-d["count"], d["reason"]))
