"""Channel wakes: a best-effort doorbell for a pending todo (DESIGN.md §6.5).

A wake is rendered from our own fields only: the todo id, queue and the one-line title that
passed the channel-break check at intake. ``meta`` keys are snake_case and values are kept to
a small charset, because Claude Code drops other keys silently and the content goes into the
model's context unescaped.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from datetime import timedelta
from typing import Any

from sqlalchemy import select, update
from sqlmodel import Session

from switchboard.clock import Clock
from switchboard.models import Grant, Project, Source, Todo

_META_VALUE = re.compile(r"[^A-Za-z0-9_.:/#@+=-]")


@dataclass(frozen=True)
class Wake:
    """A wake for one todo, with the agents that may take it, best candidate first."""

    todo_id: str
    project: str
    queue: str
    kind: str
    source: str
    title: str
    agent_ids: list[str] = field(default_factory=list)

    @property
    def content(self) -> str:
        """One line, e.g. ``switchboard: todo td_42 on reviews: PR #482 opened in acme/api``."""
        return f"switchboard: todo {self.todo_id} on {self.queue}: {self.title}"

    @property
    def meta(self) -> dict[str, str]:
        """``{todo_id, project, queue, kind, source}`` with values in ``[A-Za-z0-9_.:/#@+=-]``."""
        raw = {"todo_id": self.todo_id, "project": self.project, "queue": self.queue, "kind": self.kind,
               "source": self.source}
        return {k: _META_VALUE.sub("_", v)[:100] for k, v in raw.items()}

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (for Redis pub/sub)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Wake:
        """Inverse of :meth:`to_dict`."""
        return cls(**{k: data[k] for k in ("todo_id", "project", "queue", "kind", "source", "title")},
                   agent_ids=list(data.get("agent_ids", [])))


def wake_for(session: Session, todo: Todo) -> Wake:
    """Build the wake for a pending todo: to its assigned agent, else every agent with ``work``.

    ``source`` is the provider of the todo's source, or ``api`` for todos made through the API/CLI.
    """
    if todo.assigned_agent_id:
        # Only while the assignee may still work on the project (its grant can be revoked).
        agents = list(session.execute(
            select(Grant.agent_id).where(Grant.project_id == todo.project_id, Grant.role == "work",
                                         Grant.agent_id == todo.assigned_agent_id)).scalars().all())
    else:
        agents = list(session.execute(
            select(Grant.agent_id).where(Grant.project_id == todo.project_id, Grant.role == "work")
            .order_by(Grant.created_at)
        ).scalars().all())
    project = session.execute(select(Project.name).where(Project.id == todo.project_id)).scalar_one()
    provider = None
    if todo.source_id:
        provider = session.execute(select(Source.provider).where(Source.id == todo.source_id)).scalar_one_or_none()
    return Wake(todo.id, project, todo.queue, todo.kind, provider or "api", todo.title, agents)


RING_BASE_SECONDS = 30
RING_CAP_SECONDS = 900
MAX_RINGS = 8


def ring_after_seconds(rings: int) -> int:
    """Seconds after the ``rings``-th wake before the next re-ring: 30, 60, 120, ... at most 900."""
    return min(RING_BASE_SECONDS * 2 ** max(rings - 1, 0), RING_CAP_SECONDS)


def ring(session: Session, clock: Clock, todo: Todo) -> Wake:
    """Record a wake for ``todo`` now (in the caller's transaction) and return it for publishing."""
    todo.rung_at, todo.ring_count = clock.now(), todo.ring_count + 1
    session.flush()
    return wake_for(session, todo)


def due_rings(session: Session, clock: Clock, limit: int = 200) -> list[Wake]:
    """Wakes for pending todos never rung (made by another process) or due a re-ring.

    Each is claimed by a conditional update on ``rung_at``, so many processes may call this at
    once and each wake goes out once. A todo is re-rung at most :data:`MAX_RINGS` times.
    """
    now = clock.now()
    cutoff = now - timedelta(seconds=RING_BASE_SECONDS)
    candidates = session.execute(
        select(Todo).where(Todo.state == "pending", Todo.ring_count < MAX_RINGS)
        .where(Todo.rung_at.is_(None) | (Todo.rung_at <= cutoff))  # type: ignore[union-attr,operator]
        .order_by(Todo.rung_at).limit(limit)
    ).scalars().all()
    wakes = []
    for todo in candidates:
        if todo.rung_at is not None and todo.rung_at + timedelta(seconds=ring_after_seconds(todo.ring_count)) > now:
            continue
        moved = session.execute(
            update(Todo).where(Todo.id == todo.id, Todo.state == "pending",
                               Todo.rung_at.is_(None) if todo.rung_at is None else Todo.rung_at == todo.rung_at)  # type: ignore[union-attr]
            .values(rung_at=now, ring_count=Todo.ring_count + 1)
            .execution_options(synchronize_session=False)
        )
        if moved.rowcount == 1:  # type: ignore[attr-defined]
            wakes.append(wake_for(session, todo))
    return wakes
