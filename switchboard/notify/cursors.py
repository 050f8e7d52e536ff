"""Agent cursors: read positions keyed on the agent, never the token (DESIGN.md §5, §6.4).

A cursor is ``(agent_id, stream, project_id) → position`` (a feed event id). :func:`advance`
moves it with a compare-and-set, so two calls of one agent racing on PostgreSQL cannot both
deliver the same items: the loser's advance fails and it drops what it read (at most once).
On SQLite the single writer serialises them anyway.
"""

from __future__ import annotations

from sqlalchemy import insert, select, update
from sqlalchemy.exc import IntegrityError
from sqlmodel import Session

from switchboard.models import AgentCursor

ATTENTION = "attention"
INBOX = "inbox"
FEED = "feed"


def position(session: Session, agent_id: str, stream: str, project_id: str = "") -> int | None:
    """The stored position, or ``None`` when the cursor was never advanced."""
    return session.execute(
        select(AgentCursor.position).where(AgentCursor.agent_id == agent_id, AgentCursor.stream == stream,
                                           AgentCursor.project_id == project_id)
    ).scalar()


def advance(session: Session, agent_id: str, stream: str, project_id: str, old: int | None, new: int) -> bool:
    """Move a cursor from ``old`` (``None``: no row yet) to ``new``, in the caller's transaction.

    Returns:
        False when another transaction moved it first (the caller must not deliver).
    """
    table = AgentCursor.__table__  # type: ignore[attr-defined]
    if old is None:
        try:
            with session.begin_nested():
                session.execute(insert(table).values(agent_id=agent_id, stream=stream, project_id=project_id,
                                                     position=new))
        except IntegrityError:
            return False
        return True
    result = session.execute(
        update(table).where(table.c.agent_id == agent_id, table.c.stream == stream,
                            table.c.project_id == project_id, table.c.position == old).values(position=new)
    )
    return bool(result.rowcount)
