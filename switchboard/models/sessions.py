"""Attached agent sessions and their durable stream events (DESIGN.md §6.5, §6.5a).

- :class:`AgentSession`: one attached agent stream (a channel adapter, or any client of
  ``/api/v1/agent/stream``), keyed by the session id the client gives at attach (the adapter
  makes one per process, so a reconnect replaces its old stream instead of adding one). A row
  is live while ``seen_at`` is recent: the stream refreshes it on every heartbeat, so a row left
  by a process that died goes stale on its own. ``last_woken_at`` drives the per-agent
  rotation and re-ring coalescing.
- :class:`AgentEvent`: one event on an agent's stream (a wake, a doorbell test, and for the
  permission relay a verdict), with a monotonic id that is the SSE event id. ``session_id``
  targets one session; ``None`` means any session of the agent. Streams read events from this
  table, so a client resuming with ``Last-Event-ID`` gets exactly what it missed, across hub
  restarts and across processes; pub/sub only says "look".
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlmodel import Field, SQLModel

from switchboard.clock import utcnow
from switchboard.models.base import json_column, time_column


class AgentSession(SQLModel, table=True):
    """An attached agent stream (see the module docstring)."""

    __tablename__ = "agent_sessions"
    __table_args__ = (sa.Index("ix_agent_sessions_agent_seen", "agent_id", "seen_at"),)

    id: str = Field(primary_key=True, max_length=80)
    agent_id: str = Field(foreign_key="agents.id", max_length=40)
    attached_at: datetime = Field(default_factory=utcnow, sa_column=time_column())
    seen_at: datetime = Field(default_factory=utcnow, sa_column=time_column())
    last_woken_at: datetime | None = Field(default=None, sa_column=time_column(nullable=True))
    # Which stream holds the session now (a random id per attach): a replaced stream must not
    # delete the row its successor owns.
    stream_id: str = Field(max_length=40)


class AgentEvent(SQLModel, table=True):
    """One durable event on an agent's stream; ``id`` is the SSE event id."""

    __tablename__ = "agent_events"
    __table_args__ = (
        sa.Index("ix_agent_events_agent_id", "agent_id", "id"),
        sa.Index("ix_agent_events_created", "created_at"),
        # Ids are positions (cursors, Last-Event-ID): never reused on SQLite (migration 0022).
        {"sqlite_autoincrement": True},
    )

    id: int | None = Field(
        default=None,
        sa_column=sa.Column(sa.BigInteger().with_variant(sa.Integer(), "sqlite"), primary_key=True,
                            autoincrement=True),
    )
    agent_id: str = Field(foreign_key="agents.id", max_length=40)
    session_id: str | None = Field(default=None, max_length=80)
    kind: str = Field(max_length=40)
    data: dict[str, Any] | None = Field(default=None, sa_column=json_column())
    created_at: datetime = Field(default_factory=utcnow, sa_column=time_column())
