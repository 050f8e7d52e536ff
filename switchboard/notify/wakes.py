"""Channel wakes: a best-effort doorbell for a pending todo (DESIGN.md §6.5).

A wake is rendered from our own fields only: the todo id, queue and the one-line title that
passed the channel-break check at intake. ``meta`` keys are snake_case and values are kept to
a small charset, because Claude Code drops other keys silently and the content goes into the
model's context unescaped.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from typing import Any

from sqlalchemy import select
from sqlmodel import Session

from switchboard.models import Grant, Todo

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


def wake_for(session: Session, todo: Todo, project_name: str, source: str) -> Wake:
    """Build the wake for a new todo: the assigned agent, else every agent with ``work``."""
    if todo.assigned_agent_id:
        agents = [todo.assigned_agent_id]
    else:
        agents = list(session.execute(
            select(Grant.agent_id).where(Grant.project_id == todo.project_id, Grant.role == "work")
            .order_by(Grant.created_at)
        ).scalars().all())
    return Wake(todo.id, project_name, todo.queue, todo.kind, source, todo.title, agents)
