"""The doorbell self-test (DESIGN.md §6.5; issue 10 item 6).

Silent loss of wakes was the main field complaint about channels: Claude Code drops channel
notifications without a word when the session was not started with channels enabled for the
server (``--channels server:NAME`` or ``--dangerously-load-development-channels server:NAME``).
The hub cannot see that, so it asks: :func:`ring` sends a synthetic wake (meta ``ring_id``) to
every live session of the agent, asking the model to call ``doorbell_ack``; :func:`verdict`
says ``heard`` (acked), ``unheard`` (a session is attached but nothing acked) or
``no_session``.

Rows (all :class:`~switchboard.models.AgentEvent`): ``doorbell_ring`` (the ring itself, how many
sessions it reached; never streamed), one ``doorbell`` per session (streamed), and
``doorbell_ack`` (never streamed).
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import select
from sqlmodel import Session

from switchboard.clock import Clock
from switchboard.errors import NotFound
from switchboard.models import AgentEvent
from switchboard.models.base import new_id
from switchboard.notify import sessions

VERDICTS = {
    "heard": "wakes reach the model: the agent acknowledged the doorbell.",
    "unheard": "a session is attached but the model never acknowledged: Claude Code was probably started "
               "without channels enabled for this server. Start it with --channels server:NAME (an approved "
               "plugin) or --dangerously-load-development-channels server:NAME, where NAME is the server's name "
               "in .mcp.json; on Team/Enterprise plans an admin must enable channels (channelsEnabled).",
    "no_session": "no session of this agent is attached: Claude Code is not running with the switchboard "
                  "server, or the adapter cannot reach the hub (check `switchboard channel --url`, "
                  "SWITCHBOARD_TOKEN, and the adapter's stderr).",
}


def ring(session: Session, clock: Clock, agent_id: str) -> dict[str, Any]:
    """Ring every live session of ``agent_id`` once; returns ``{ring_id, sessions, targets}``
    (``targets``: the session ids, for the broker's nudge after commit)."""
    ring_id = new_id("rng", 8)
    live = sessions.live_sessions(session, clock, agent_id)
    content = (f"switchboard: doorbell test {ring_id}. Call the doorbell_ack tool with ring_id={ring_id} "
               "to confirm you receive wakes.")
    for target in live:
        sessions.emit(session, clock, agent_id, target.id, "doorbell", {"content": content, "meta": {"ring_id": ring_id}})
    sessions.emit(session, clock, agent_id, None, "doorbell_ring", {"ring_id": ring_id, "sessions": len(live)})
    return {"ring_id": ring_id, "sessions": len(live), "targets": [t.id for t in live]}


def _rows(session: Session, agent_id: str, ring_id: str, kind: str) -> list[AgentEvent]:
    rows = session.execute(select(AgentEvent).where(AgentEvent.agent_id == agent_id, AgentEvent.kind == kind)
                           .order_by(AgentEvent.id.desc()).limit(200)).scalars().all()  # type: ignore[union-attr]
    return [r for r in rows if (r.data or {}).get("ring_id") == ring_id]


def ack(session: Session, clock: Clock, agent_id: str, ring_id: str) -> dict[str, Any]:
    """Record that the agent heard ring ``ring_id``.

    Raises:
        NotFound: no such ring for this agent (another agent's ring gives the same answer).
    """
    if not _rows(session, agent_id, ring_id, "doorbell_ring"):
        raise NotFound("no such doorbell ring")
    if not _rows(session, agent_id, ring_id, "doorbell_ack"):
        sessions.emit(session, clock, agent_id, None, "doorbell_ack", {"ring_id": ring_id})
    return {"ring_id": ring_id, "heard": True}


def verdict(session: Session, agent_id: str, ring_id: str) -> str:
    """``heard``, ``unheard`` or ``no_session`` for a ring of ``agent_id``."""
    if _rows(session, agent_id, ring_id, "doorbell_ack"):
        return "heard"
    ring_rows = _rows(session, agent_id, ring_id, "doorbell_ring")
    if not ring_rows or not (ring_rows[0].data or {}).get("sessions"):
        return "no_session"
    return "unheard"
