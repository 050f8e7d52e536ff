"""Todos, attempts and feed events (DESIGN.md §6.2, §6.7)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlmodel import Field, SQLModel

from switchboard.clock import utcnow
from switchboard.models.base import by_key_only, json_column, new_id, time_column

TODO_STATES = ("pending", "claimed", "done", "failed", "cancelled")

MAX_RINGS = 8
"""Wakes a pending todo gets at most (its first and the re-rings, ``notify/wakes.py``); a todo
rung this often leaves ``ix_todos_ring``, whose predicate names the number (migration 0019)."""


def _where(state: str, also: str = "") -> dict[str, Any]:
    clause = sa.text(f"state = '{state}'" + (f" AND {also}" if also else ""))
    return {"sqlite_where": clause, "postgresql_where": clause}


def in_state(column: Any, state: str) -> Any:
    """``column = '<state>'`` with the state as a SQL literal, not a bound parameter, so that
    SQLite and PostgreSQL (generic plans included) can use the partial indexes of ``todos``.

    Raises:
        ValueError: ``state`` is not one of :data:`TODO_STATES` (a programming error).
    """
    return column == _state_literal(state)


def _state_literal(state: str) -> Any:
    if state not in TODO_STATES:
        raise ValueError(f"unknown todo state {state!r}")
    return sa.literal_column(f"'{state}'")


def still_in_state(column: Any, state: str) -> Any:
    """The state check of a conditional update on a row named by its primary key
    (``WHERE id = :id AND <this>``), written so that no partial index of ``todos`` can serve it.

    Issue 11: on PostgreSQL with statistics older than the table's contents (a burst after a
    quiet period, before autovacuum's ANALYZE), ``id = $1 AND state = 'claimed'`` was planned as a
    scan of ``ix_todos_lease`` filtered by id (every claimed row read to complete one: 904
    buffers with 1,000 claimed), and a claim as a scan of ``ix_todos_ring`` (2,000 pending rows
    read per claim). A partial index serves only a WHERE that repeats its predicate
    (``state = '<state>'``); ``coalesce(state, '') = '<state>'`` does not, so the primary key
    is the one index left. Same meaning: ``state`` is never null.

    Raises:
        ValueError: ``state`` is not one of :data:`TODO_STATES` (a programming error).
    """
    return by_key_only(column) == _state_literal(state)


class Todo(SQLModel, table=True):
    """A unit of work in a project's named queue (DESIGN.md §6.2).

    ``attempt_count`` numbers the claims (attempt ``n`` is the n-th claim); ``failure_count``
    counts the attempts that spent the budget (``failed``, ``lease_expired``): the todo is
    dead-lettered when it reaches ``max_attempts``. A release costs nothing. ``rung_at`` and
    ``ring_count`` record the wakes sent for a pending todo, for re-rings with backoff. ``origin_key`` is unique: the delivery that made a todo can make it only once, however
    often processing re-runs (DESIGN.md §2).
    """

    __tablename__ = "todos"
    __table_args__ = (
        # Partial indexes (issue 11): each holds only the todos in the one state its reader looks
        # for, so a state change updates at most two of them, and ``done`` todos (most of a big
        # table) sit in none. Queries name the state as a SQL literal (:func:`in_state`): a
        # partial index serves only a WHERE that repeats its predicate.
        # Claim-next reads these in order: priority first (highest), then oldest, then id.
        sa.Index(
            "ix_todos_claim_queue",
            "project_id",
            "queue",
            sa.text("priority DESC"),
            "created_at",
            "id",
            **_where("pending"),
        ),
        # The assignee too, so that the pick over several projects reads this index alone and
        # SQLite (no statistics) prefers it to ix_todos_project_created (migration 0020).
        sa.Index(
            "ix_todos_claim_any",
            "project_id",
            sa.text("priority DESC"),
            "created_at",
            "id",
            "assigned_agent_id",
            **_where("pending"),
        ),
        # The pending todos assigned to an agent (few): what waits for it when it attaches (0021).
        sa.Index("ix_todos_assigned", "assigned_agent_id", "created_at", "id",
                 **_where("pending", "assigned_agent_id IS NOT NULL")),
        sa.Index("ix_todos_lease", "lease_expires_at", **_where("claimed")),
        sa.Index("ix_todos_retry", "next_retry_at", **_where("failed")),
        # ring_count too: the re-ring pass's backoff test reads the index alone (migration 0018);
        # only the todos still to ring: those rung MAX_RINGS times never are again (0019).
        sa.Index("ix_todos_ring", "rung_at", "ring_count",
                 **_where("pending", f"ring_count < {MAX_RINGS}")),
        # Cancelled todos are rare: this one is for counting them (metrics) without a table scan.
        sa.Index("ix_todos_cancelled", "updated_at", **_where("cancelled")),
        # Lists and their cursors (every state), in (created_at, id) order per project.
        sa.Index("ix_todos_project_created", "project_id", "created_at", "id"),
    )

    id: str = Field(default_factory=lambda: new_id("td"), primary_key=True, max_length=40)
    project_id: str = Field(foreign_key="projects.id", max_length=40)
    queue: str = Field(default="default", max_length=100)
    state: str = Field(default="pending", max_length=20)
    kind: str = Field(max_length=100)
    title: str = Field(sa_column=sa.Column(sa.String(500), nullable=False))
    payload: dict[str, Any] | None = Field(default=None, sa_column=json_column())
    origin_key: str | None = Field(default=None, sa_column=sa.Column(sa.String(300), unique=True))
    source_id: str | None = Field(default=None, max_length=40)
    delivery_id: str | None = Field(default=None, max_length=40)
    human_id: str | None = Field(default=None, max_length=40)
    assigned_agent_id: str | None = Field(default=None, max_length=40)
    priority: int = Field(default=0)
    attempt_count: int = Field(default=0)
    failure_count: int = Field(default=0)
    max_attempts: int = Field(default=5)
    claimed_by: str | None = Field(default=None, max_length=40)
    lease_token: str | None = Field(default=None, max_length=64)
    lease_session: str | None = Field(default=None, max_length=80)
    """The session that claimed (MCP session, adapter session, or the REST caller's token digest):
    lease operations without ``lease_token`` are accepted from it only (issue 18 item 5)."""
    lease_expires_at: datetime | None = Field(default=None, sa_column=time_column(nullable=True))
    next_retry_at: datetime | None = Field(default=None, sa_column=time_column(nullable=True))
    rung_at: datetime | None = Field(default=None, sa_column=time_column(nullable=True))
    ring_count: int = Field(default=0)
    result: dict[str, Any] | None = Field(default=None, sa_column=json_column())
    created_at: datetime = Field(default_factory=utcnow, sa_column=time_column())
    updated_at: datetime = Field(default_factory=utcnow, sa_column=time_column())


class Attempt(SQLModel, table=True):
    """One claim of a todo, with its lease and outcome."""

    __tablename__ = "attempts"
    __table_args__ = (sa.UniqueConstraint("todo_id", "number", name="uq_attempt_number"),)

    id: str = Field(default_factory=lambda: new_id("att"), primary_key=True, max_length=40)
    # No index of its own: uq_attempt_number (todo_id, number) leads with it (migration 0017).
    todo_id: str = Field(foreign_key="todos.id", max_length=40)
    number: int
    agent_id: str = Field(foreign_key="agents.id", max_length=40)
    claimed_at: datetime = Field(default_factory=utcnow, sa_column=time_column())
    lease_expires_at: datetime = Field(sa_column=time_column())
    ended_at: datetime | None = Field(default=None, sa_column=time_column(nullable=True))
    outcome: str | None = Field(default=None, max_length=20)
    summary: str | None = Field(default=None, sa_column=sa.Column(sa.Text, nullable=True))


class FeedEvent(SQLModel, table=True):
    """An append-only record with a monotonic id (DESIGN.md §6.7)."""

    __tablename__ = "feed_events"
    __table_args__ = (
        sa.Index("ix_feed_project_id", "project_id", "id"),
        # Subscriptions and kind-filtered reads: one index range per (project, kind).
        sa.Index("ix_feed_project_kind_id", "project_id", "kind", "id"),
        # No index on (kind, id) alone (migration 0024): every read of kinds filters projects.
        # Ids are positions (cursors, Last-Event-ID): never reused on SQLite (migration 0022).
        {"sqlite_autoincrement": True},
    )

    id: int | None = Field(
        default=None,
        sa_column=sa.Column(
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"), primary_key=True, autoincrement=True
        ),
    )
    # None for events about a human rather than a project (permission prompts, friend requests).
    project_id: str | None = Field(default=None, foreign_key="projects.id", max_length=40)
    kind: str = Field(max_length=60)
    subject_id: str | None = Field(default=None, max_length=40)
    title: str = Field(sa_column=sa.Column(sa.String(500), nullable=False))
    data: dict[str, Any] | None = Field(default=None, sa_column=json_column())
    origin_key: str | None = Field(default=None, sa_column=sa.Column(sa.String(300), unique=True))
    created_at: datetime = Field(default_factory=utcnow, sa_column=time_column())
