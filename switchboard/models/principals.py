"""Humans, their identities, agents, tokens, projects and grants (DESIGN.md §1, §5)."""

from __future__ import annotations

from datetime import datetime

import sqlalchemy as sa
from sqlmodel import Field, SQLModel

from switchboard.clock import utcnow
from switchboard.models.base import new_id, time_column


class Human(SQLModel, table=True):
    """A person; the only principal who can consent."""

    __tablename__ = "humans"

    id: str = Field(default_factory=lambda: new_id("hum"), primary_key=True, max_length=40)
    name: str = Field(sa_column=sa.Column(sa.String(200), nullable=False, unique=True))
    created_at: datetime = Field(default_factory=utcnow, sa_column=time_column())


class Identity(SQLModel, table=True):
    """A human's account on a provider, keyed by stable ids, never logins (DESIGN.md §1)."""

    __tablename__ = "identities"
    __table_args__ = (sa.UniqueConstraint("provider", "workspace", "external_id", name="uq_identity"),)

    id: str = Field(default_factory=lambda: new_id("idn"), primary_key=True, max_length=40)
    human_id: str = Field(foreign_key="humans.id", index=True, max_length=40)
    provider: str = Field(max_length=40)
    workspace: str = Field(default="", max_length=200)
    external_id: str = Field(max_length=200)
    login: str | None = Field(default=None, max_length=200)
    created_at: datetime = Field(default_factory=utcnow, sa_column=time_column())


class Agent(SQLModel, table=True):
    """An AI worker owned by one human."""

    __tablename__ = "agents"

    id: str = Field(default_factory=lambda: new_id("agt"), primary_key=True, max_length=40)
    name: str = Field(sa_column=sa.Column(sa.String(200), nullable=False, unique=True))
    human_id: str = Field(foreign_key="humans.id", index=True, max_length=40)
    created_at: datetime = Field(default_factory=utcnow, sa_column=time_column())
    # Set by `agent remove`: tokens revoked, grants gone, no new token can be vended.
    removed_at: datetime | None = Field(default=None, sa_column=time_column(nullable=True))


class Token(SQLModel, table=True):
    """A vended agent token, stored as its SHA-256 hex digest only (DESIGN.md §1)."""

    __tablename__ = "tokens"

    id: str = Field(default_factory=lambda: new_id("tok"), primary_key=True, max_length=40)
    agent_id: str = Field(foreign_key="agents.id", index=True, max_length=40)
    token_sha256: str = Field(sa_column=sa.Column(sa.String(64), nullable=False, unique=True))
    created_at: datetime = Field(default_factory=utcnow, sa_column=time_column())
    revoked_at: datetime | None = Field(default=None, sa_column=time_column(nullable=True))


class Project(SQLModel, table=True):
    """The unit of scope for sources, todos and feed events."""

    __tablename__ = "projects"

    id: str = Field(default_factory=lambda: new_id("prj"), primary_key=True, max_length=40)
    name: str = Field(sa_column=sa.Column(sa.String(200), nullable=False, unique=True))
    created_at: datetime = Field(default_factory=utcnow, sa_column=time_column())


class Grant(SQLModel, table=True):
    """An agent's role on a project: ``read`` or ``work`` (``work`` implies ``read``)."""

    __tablename__ = "grants"
    __table_args__ = (sa.UniqueConstraint("agent_id", "project_id", name="uq_grant"),)

    id: str = Field(default_factory=lambda: new_id("grt"), primary_key=True, max_length=40)
    # No index of its own: uq_grant (agent_id, project_id) leads with it (migration 0017).
    agent_id: str = Field(foreign_key="agents.id", max_length=40)
    project_id: str = Field(foreign_key="projects.id", index=True, max_length=40)
    role: str = Field(max_length=10)
    created_at: datetime = Field(default_factory=utcnow, sa_column=time_column())


class HumanToken(SQLModel, table=True):
    """A human's API token (``sbh_`` + 32 random bytes), stored as its SHA-256 hex digest only."""

    __tablename__ = "human_tokens"

    id: str = Field(default_factory=lambda: new_id("htk"), primary_key=True, max_length=40)
    human_id: str = Field(foreign_key="humans.id", index=True, max_length=40)
    token_sha256: str = Field(sa_column=sa.Column(sa.String(64), nullable=False, unique=True))
    created_at: datetime = Field(default_factory=utcnow, sa_column=time_column())
    revoked_at: datetime | None = Field(default=None, sa_column=time_column(nullable=True))


class ProjectOwner(SQLModel, table=True):
    """A human who owns a project: sees its quarantine and decides for it (DESIGN.md §1)."""

    __tablename__ = "project_owners"
    __table_args__ = (sa.UniqueConstraint("project_id", "human_id", name="uq_project_owner"),)

    id: str = Field(default_factory=lambda: new_id("own"), primary_key=True, max_length=40)
    # No index of its own: uq_project_owner (project_id, human_id) leads with it (migration 0017).
    project_id: str = Field(foreign_key="projects.id", max_length=40)
    human_id: str = Field(foreign_key="humans.id", index=True, max_length=40)
    created_at: datetime = Field(default_factory=utcnow, sa_column=time_column())
