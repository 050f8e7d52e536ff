"""Web login links and web sessions of humans (DESIGN.md §5, issue 15).

- :class:`LoginLink`: the one-time URL ``switchboard login HUMAN`` prints; single use, ten
  minutes. Only the SHA-256 of its token is stored.
- :class:`WebSession`: a signed-in browser. The session cookie carries the token; the row holds
  its SHA-256, the absolute expiry, and ``ended_at`` once the human logs out.
"""

from __future__ import annotations

from datetime import datetime

import sqlalchemy as sa
from sqlmodel import Field, SQLModel

from switchboard.clock import utcnow
from switchboard.models.base import new_id, time_column


class LoginLink(SQLModel, table=True):
    """A one-time login link; ``used_at`` is set by the one redemption that wins."""

    __tablename__ = "login_links"

    id: str = Field(default_factory=lambda: new_id("lgn"), primary_key=True, max_length=40)
    human_id: str = Field(foreign_key="humans.id", index=True, max_length=40)
    token_sha256: str = Field(sa_column=sa.Column(sa.String(64), nullable=False, unique=True))
    created_at: datetime = Field(default_factory=utcnow, sa_column=time_column())
    expires_at: datetime = Field(sa_column=time_column())
    used_at: datetime | None = Field(default=None, sa_column=time_column(nullable=True))


class WebSession(SQLModel, table=True):
    """A signed-in browser of one human, until ``expires_at`` or ``ended_at`` (logout)."""

    __tablename__ = "web_sessions"

    id: str = Field(default_factory=lambda: new_id("wss"), primary_key=True, max_length=40)
    human_id: str = Field(foreign_key="humans.id", index=True, max_length=40)
    token_sha256: str = Field(sa_column=sa.Column(sa.String(64), nullable=False, unique=True))
    created_at: datetime = Field(default_factory=utcnow, sa_column=time_column())
    expires_at: datetime = Field(sa_column=time_column())
    ended_at: datetime | None = Field(default=None, sa_column=time_column(nullable=True))
