"""Friend requests, friendships and per-human notification targets (DESIGN.md §6.5, §6.6).

- :class:`FriendRequest`: an agent asks another human's agent to exchange work. It grants
  nothing; an inbox item of kind ``friend`` waits on the target agent's human. ``status``:
  ``pending`` → ``approved`` | ``declined`` | ``expired``.
- :class:`Friendship`: what an approved request grants: the requesting agent may create todos
  on the target's requested ``(project, queue)`` pairs, and nowhere else, until either human
  revokes it (``revoked_at``).
- :class:`NotifyTarget`: a human's optional Apprise URL (sealed at rest like delivery bodies:
  it usually embeds a token) with the coalescing state for prompt notifications.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlmodel import Field, SQLModel

from switchboard.clock import utcnow
from switchboard.models.base import json_column, new_id, time_column
from switchboard.sealing.columns import SealedBytes

FRIEND_STATUSES = ("pending", "approved", "declined", "expired")


class FriendRequest(SQLModel, table=True):
    """One agent's request to send work to another human's agent (DESIGN.md §6.6).

    ``queues`` is a list of ``{"project_id", "queue"}`` pairs in projects the target agent works
    on. ``inbox_item_id`` is the ``friend`` item waiting on the target human.
    """

    __tablename__ = "friend_requests"
    __table_args__ = (sa.Index("ix_friend_requests_to", "to_agent_id", "status"),)

    id: str = Field(default_factory=lambda: new_id("fr"), primary_key=True, max_length=40)
    from_agent_id: str = Field(foreign_key="agents.id", index=True, max_length=40)
    to_agent_id: str = Field(foreign_key="agents.id", max_length=40)
    from_human_id: str = Field(foreign_key="humans.id", max_length=40)
    to_human_id: str = Field(foreign_key="humans.id", max_length=40)
    queues: list[Any] = Field(sa_column=json_column(nullable=False))
    reason: str = Field(sa_column=sa.Column(sa.Text, nullable=False))
    status: str = Field(default="pending", max_length=20)
    inbox_item_id: str | None = Field(default=None, max_length=40)
    decided_by_human_id: str | None = Field(default=None, max_length=40)
    decided_via: str | None = Field(default=None, max_length=20)
    decided_at: datetime | None = Field(default=None, sa_column=time_column(nullable=True))
    created_at: datetime = Field(default_factory=utcnow, sa_column=time_column())


class Friendship(SQLModel, table=True):
    """An approved friend request: the grant to create todos on the requested queues."""

    __tablename__ = "friendships"
    __table_args__ = (sa.Index("ix_friendships_from", "from_agent_id", "revoked_at"),)

    id: str = Field(default_factory=lambda: new_id("fs"), primary_key=True, max_length=40)
    request_id: str = Field(foreign_key="friend_requests.id", unique=True, max_length=40)
    from_agent_id: str = Field(foreign_key="agents.id", max_length=40)
    to_agent_id: str = Field(foreign_key="agents.id", index=True, max_length=40)
    from_human_id: str = Field(foreign_key="humans.id", max_length=40)
    to_human_id: str = Field(foreign_key="humans.id", max_length=40)
    queues: list[Any] = Field(sa_column=json_column(nullable=False))
    approved_by_human_id: str = Field(max_length=40)
    approved_via: str = Field(max_length=20)
    created_at: datetime = Field(default_factory=utcnow, sa_column=time_column())
    revoked_at: datetime | None = Field(default=None, sa_column=time_column(nullable=True))
    revoked_by_human_id: str | None = Field(default=None, max_length=40)


class NotifyTarget(SQLModel, table=True):
    """A human's Apprise notification URL and the state that coalesces bursts.

    ``pending`` counts prompts that arrived inside the coalescing window after ``last_sent_at``;
    the maintenance pass sends one summary for them when the window closes.
    """

    __tablename__ = "notify_targets"

    human_id: str = Field(foreign_key="humans.id", primary_key=True, max_length=40)
    url: bytes = Field(sa_column=sa.Column(SealedBytes(), nullable=False))
    last_sent_at: datetime | None = Field(default=None, sa_column=time_column(nullable=True))
    pending: int = Field(default=0)
    pending_text: str | None = Field(default=None, sa_column=sa.Column(sa.Text, nullable=True))
    created_at: datetime = Field(default_factory=utcnow, sa_column=time_column())
