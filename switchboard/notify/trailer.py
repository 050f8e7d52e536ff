"""The notifications trailer on every successful tool result (DESIGN.md §6.4, seed 000).

Two sources: ``attention`` (answers and decisions on the caller's own inbox items, always on)
and ``subscription`` (feed events of the kinds an agent subscribed to). Items are
``{source, kind, id, project_id, title, at}``; each is delivered at most once:

1. :func:`probe` is one SQL statement over indexed columns: is anything past the agent's
   cursors? Nothing pending (the common case) ends here.
2. :func:`drain` reads what is pending in a write transaction and advances each cursor it
   delivered from, with a compare-and-set (:mod:`switchboard.notify.cursors`); an empty read
   moves nothing. Subscriptions are joined with the grants **at drain time**: an event in a
   project the agent may not read is neither shown nor consumed, and arrives if a grant comes.

At most :data:`MAX_ITEMS` items ride on one result; the rest wait for the next call (``more``
says so). The member is added to the wire result by server middleware, and mirrored as the
last text block ``[switchboard] N pending: ...`` because Claude Code shows the model only
``content``.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import select, text
from sqlmodel import Session

from switchboard.clock import iso
from switchboard.db import Database
from switchboard.feed.events import tail
from switchboard.feed.pages import event_view
from switchboard.inbox.items import DECIDED, resolved_after
from switchboard.models import Grant, Subscription
from switchboard.notify import cursors

MAX_ITEMS = 20

PROBE = text("""
SELECT CASE WHEN EXISTS (
    SELECT 1 FROM inbox_items i
    WHERE i.agent_id = :agent AND i.resolved_event_id > COALESCE((
        SELECT c.position FROM agent_cursors c
        WHERE c.agent_id = :agent AND c.stream = 'attention' AND c.project_id = ''), 0)
) OR EXISTS (
    SELECT 1 FROM subscriptions s
    JOIN grants g ON g.agent_id = s.agent_id AND (s.project_id IS NULL OR s.project_id = g.project_id)
    WHERE s.agent_id = :agent AND EXISTS (
        SELECT 1 FROM feed_events e
        WHERE e.project_id = g.project_id AND e.kind = s.kind AND e.id > COALESCE((
            SELECT c.position FROM agent_cursors c
            WHERE c.agent_id = :agent AND c.stream = s.id AND c.project_id = g.project_id), s.seed_event_id))
) THEN 1 ELSE 0 END
""")


_NOUNS = {"question": "Question", "approval": "Approval", "permission": "Permission prompt",
          "friend": "Friend request"}
_KINDS = {"question": "question.answered", "approval": "approval.decided", "permission": "permission.decided",
          "friend": "friend.decided"}


def probe(session: Session, agent_id: str) -> bool:
    """True when something may be pending for ``agent_id`` (one statement, indexed lookups)."""
    return bool(session.execute(PROBE, {"agent": agent_id}).scalar())


_COMPILED: dict[str, tuple[str, int | None]] = {}


def probe_fast(db: Database, agent_id: str) -> bool:
    """:func:`probe` on a pooled DBAPI connection with the statement compiled once per dialect.

    The query itself takes ~10 us on SQLite; an ORM session, SQLAlchemy's compile and the
    explicit BEGIN around it cost ~170 us more, which alone would exceed the budget of
    DESIGN.md §8 (the trailer adds at most 10 % to ``whoami``). The pool still resets the
    connection (rollback) on return; on PostgreSQL the connection is in autocommit (the read
    pool, :meth:`Database.read`), so there is no BEGIN and nothing to roll back: 0.56 ms per
    probe against 2.3 ms in a transaction, whose ROLLBACK also made psycopg forget its
    prepared statements.
    """
    engine = db.read_engine
    key = engine.dialect.name
    if key not in _COMPILED:
        compiled = PROBE.compile(dialect=engine.dialect)
        _COMPILED[key] = (str(compiled), len(compiled.positiontup or []) if compiled.positional else None)
    sql, positions = _COMPILED[key]
    params: Any = (agent_id,) * positions if positions is not None else {"agent": agent_id}
    conn = engine.raw_connection()
    try:
        cur = conn.cursor()
        try:
            cur.execute(sql, params)
            row = cur.fetchone()
        finally:
            cur.close()
    finally:
        conn.close()
    return bool(row and row[0])


def collect(db: Database, agent_id: str) -> dict[str, Any] | None:
    """The trailer member for one result: ``{"pending": [...], "more"?: true}`` or ``None``."""
    if not probe_fast(db, agent_id):  # the common case ends here: one indexed statement
        return None
    with db.write() as s:
        items, more = drain(s, agent_id)
    if not items:
        return None
    member: dict[str, Any] = {"pending": items}
    if more:
        member["more"] = True
    return member


def drain(session: Session, agent_id: str, budget: int = MAX_ITEMS) -> tuple[list[dict[str, Any]], bool]:
    """Read and consume what is pending, in the caller's write transaction.

    Returns:
        ``(items, more)``: at most ``budget`` items, attention first; ``more`` when some were
        left for the next call.
    """
    items: list[dict[str, Any]] = []
    more = False
    old = cursors.position(session, agent_id, cursors.ATTENTION)
    rows = resolved_after(session, agent_id, old or 0, budget + 1)
    if len(rows) > budget:
        rows, more = rows[:budget], True
    if rows and cursors.advance(session, agent_id, cursors.ATTENTION, "", old, int(rows[-1].resolved_event_id or 0)):
        for item in rows:
            noun = _NOUNS.get(item.kind, "Approval")
            what = DECIDED[str(item.decision)] if item.status == "decided" else item.status  # answered, expired
            items.append({"source": "attention", "kind": _KINDS.get(item.kind, "approval.decided"),
                          "id": item.id, "project_id": item.project_id, "title": f"{noun} {what}: {item.title}",
                          "at": iso(item.resolved_at)})

    readable = set(session.execute(select(Grant.project_id).where(Grant.agent_id == agent_id)).scalars())
    subs: dict[tuple[str, str | None, int], list[str]] = {}
    for sub in session.execute(select(Subscription).where(Subscription.agent_id == agent_id)
                               .order_by(Subscription.created_at, Subscription.id)).scalars():
        subs.setdefault((sub.id, sub.project_id, sub.seed_event_id), []).append(sub.kind)
    for (sub_id, scope, seed), kinds in subs.items():
        projects = sorted(readable if scope is None else readable & {scope})
        for pid in projects:
            left = budget - len(items)
            if left <= 0:
                more = True
                break
            old = cursors.position(session, agent_id, sub_id, pid)
            after = old if old is not None else seed
            events = tail(session, [(pid, kind, after) for kind in sorted(set(kinds))], left + 1)
            if len(events) > left:
                events, more = events[:left], True
            if events and cursors.advance(session, agent_id, sub_id, pid, old, int(events[-1].id or 0)):
                for e in events:
                    v = event_view(e)
                    items.append({"source": "subscription", "kind": v["kind"], "id": v["id"],
                                  "project_id": v["project_id"], "title": v["title"], "at": v["at"]})
    return items, more


def text_block(member: dict[str, Any]) -> str:
    """``[switchboard] N pending: ...``: the same items as a text block for the model."""
    pending = member["pending"]
    parts = [f"{i['kind']} {i['id']} ({i['source']}): {i['title']}" for i in pending]
    tail = " (more on the next call)" if member.get("more") else ""
    return (f"[switchboard] {len(pending)} pending: " + "; ".join(parts) + tail
            + ". Details: inbox_read for answers and decisions, feed_read for events.")
