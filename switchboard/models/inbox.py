"""Inbox items, agent cursors and notification subscriptions (DESIGN.md §1, §6.3, §6.4).

- :class:`InboxItem`: a question or an approval an agent posted for a human. Its answer or
  decision is recorded with who (a human, or the hub on expiry), when, and through which path
  (``cli``, ``rest``, ``web``, ``relay``, ``chat``, ``expiry``). ``resolved_event_id`` is the id of
  the feed event that resolved it: the attention cursor of the notifications trailer walks it.
- :class:`AgentCursor`: a read position keyed on the agent, never the token (DESIGN.md §5): the
  attention cursor, one per subscription and project, and ``feed_read``'s stored cursors.
- :class:`Subscription`: one row per (subscription, kind), so the trailer's "nothing pending"
  probe is a join on indexed columns.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlmodel import Field, SQLModel

from switchboard.clock import utcnow
from switchboard.models.base import json_column, new_id, time_column

INBOX_KINDS = ("question", "approval", "permission", "friend")
INBOX_STATUSES = ("open", "answered", "decided", "expired")


class InboxItem(SQLModel, table=True):
    """Something that waits on a human: here a question or an approval (DESIGN.md §1).

    ``status``: ``open`` → ``answered`` (question) | ``decided`` (approval, ``decision`` is
    ``approve`` or ``deny``) | ``expired`` (nobody answered by ``expires_at`` and ``on_expiry`` is
    ``expire``). ``on_expiry`` may instead name the hub's answer (one of ``options``) or decision.
    """

    __tablename__ = "inbox_items"
    __table_args__ = (
        sa.Index("ix_inbox_agent_resolved", "agent_id", "resolved_event_id"),
        sa.Index("ix_inbox_agent_seq", "agent_id", "seq"),
        sa.Index("ix_inbox_resolved", "resolved_event_id"),
        sa.Index("ix_inbox_open_expiry", "status", "expires_at"),
        sa.Index("ix_inbox_session_verdict", "session_id", "verdict_state"),
        sa.Index("ix_inbox_human_request", "human_id", "request_id"),
    )

    id: str = Field(default_factory=lambda: new_id("inb"), primary_key=True, max_length=40)
    kind: str = Field(max_length=20)
    # None for permission prompts and friend requests: they belong to a human, not a project.
    project_id: str | None = Field(default=None, foreign_key="projects.id", max_length=40)
    agent_id: str = Field(foreign_key="agents.id", max_length=40)
    # No index of its own: ix_inbox_human_request (human_id, request_id) leads with it (migration 0017).
    human_id: str = Field(foreign_key="humans.id", max_length=40)
    title: str = Field(sa_column=sa.Column(sa.String(300), nullable=False))
    body: str | None = Field(default=None, sa_column=sa.Column(sa.Text, nullable=True))
    options: list[Any] | None = Field(default=None, sa_column=json_column())
    status: str = Field(default="open", max_length=20)
    answer: str | None = Field(default=None, sa_column=sa.Column(sa.Text, nullable=True))
    decision: str | None = Field(default=None, max_length=20)
    note: str | None = Field(default=None, sa_column=sa.Column(sa.Text, nullable=True))
    expires_at: datetime | None = Field(default=None, sa_column=time_column(nullable=True))
    on_expiry: str = Field(default="expire", max_length=200)
    resolved_by_human_id: str | None = Field(default=None, max_length=40)
    resolved_via: str | None = Field(default=None, max_length=20)
    resolved_at: datetime | None = Field(default=None, sa_column=time_column(nullable=True))
    resolved_event_id: int | None = Field(default=None, sa_column=sa.Column(sa.BigInteger, nullable=True))
    seq: int = Field(default=0, sa_column=sa.Column(sa.BigInteger, nullable=False, server_default="0"))
    created_at: datetime = Field(default_factory=utcnow, sa_column=time_column())
    # Permission prompts (DESIGN.md §6.5, §6.5a): bound to the adapter session that relayed them.
    session_id: str | None = Field(default=None, max_length=80)
    request_id: str | None = Field(default=None, max_length=10)
    tool_name: str | None = Field(default=None, max_length=200)
    input_preview: str | None = Field(default=None, sa_column=sa.Column(sa.Text, nullable=True))
    # ``waiting`` (decided, not yet sent), ``sent`` or ``session_gone``; None while undecided.
    verdict_state: str | None = Field(default=None, max_length=20)
    verdict_sent_at: datetime | None = Field(default=None, sa_column=time_column(nullable=True))
    # An allowed prompt (or a decided friend item) consumed by ``friend_respond``: used once.
    used_at: datetime | None = Field(default=None, sa_column=time_column(nullable=True))
    # The friend request a ``friend`` item is about.
    subject_id: str | None = Field(default=None, max_length=40)


class AgentCursor(SQLModel, table=True):
    """A read position of one agent: ``stream`` is ``attention``, ``inbox``, ``feed[:<kinds hash>]``
    or a subscription id; ``project_id`` is ``""`` for streams that span projects."""

    __tablename__ = "agent_cursors"

    agent_id: str = Field(foreign_key="agents.id", primary_key=True, max_length=40)
    stream: str = Field(primary_key=True, max_length=60)
    project_id: str = Field(default="", primary_key=True, max_length=40)
    position: int = Field(default=0, sa_column=sa.Column(sa.BigInteger, nullable=False))


class Subscription(SQLModel, table=True):
    """A standing interest in feed events of one kind (one row per kind of a subscription).

    ``seed_event_id`` is the newest matching event when the subscription was made: a project
    without its own cursor row reads from there (no history replay, DESIGN.md §6.4).
    """

    __tablename__ = "subscriptions"
    __table_args__ = (sa.Index("ix_subscriptions_agent", "agent_id"),)

    id: str = Field(primary_key=True, max_length=40)
    kind: str = Field(primary_key=True, max_length=60)
    agent_id: str = Field(foreign_key="agents.id", max_length=40)
    project_id: str | None = Field(default=None, foreign_key="projects.id", max_length=40)
    seed_event_id: int = Field(default=0, sa_column=sa.Column(sa.BigInteger, nullable=False))
    created_at: datetime = Field(default_factory=utcnow, sa_column=time_column())
