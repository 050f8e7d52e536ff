"""The todo ledger: create, list, claim with a lease, complete (DESIGN.md §6.2).

Claims are single atomic conditional updates (``UPDATE ... WHERE state = 'pending'``): on
SQLite under the one-writer lock, on PostgreSQL with the next candidate picked by
``FOR UPDATE SKIP LOCKED``. Claiming a todo the caller already holds returns the current
claim, so a duplicate wake never causes double work.
"""

from __future__ import annotations

import secrets
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import select, update
from sqlmodel import Session

from switchboard.clock import Clock
from switchboard.errors import Conflict, Forbidden, InvalidArgument, NotFound
from switchboard.feed import events as feed
from switchboard.models import Attempt, Project, Todo

DEFAULT_LEASE_SECONDS = 300
MAX_LEASE_SECONDS = 86_400
MAX_LIST_LIMIT = 200
STATES = ("pending", "claimed", "done", "failed", "cancelled")


def create(
    session: Session,
    clock: Clock,
    *,
    project_id: str,
    queue: str,
    kind: str,
    title: str,
    payload: dict[str, Any] | None,
    origin_key: str | None = None,
    source_id: str | None = None,
    delivery_id: str | None = None,
    human_id: str | None = None,
) -> tuple[Todo, bool]:
    """Create a pending todo and its ``todo.created`` feed event, in the caller's transaction.

    Returns:
        ``(todo, created)``; ``created`` is False when ``origin_key`` already made a todo.
    """
    if origin_key is not None:
        existing = session.execute(select(Todo).where(Todo.origin_key == origin_key)).scalars().first()
        if existing is not None:
            return existing, False
    now = clock.now()
    todo = Todo(project_id=project_id, queue=queue, kind=kind, title=title, payload=payload,
                origin_key=origin_key, source_id=source_id, delivery_id=delivery_id, human_id=human_id,
                created_at=now, updated_at=now)
    session.add(todo)
    session.flush()
    feed.append(session, clock, project_id, "todo.created", title, subject_id=todo.id,
                data={"queue": queue, "kind": kind}, origin_key=f"{todo.id}:created")
    return todo, True


def row(todo: Todo, project_name: str | None = None, with_payload: bool = False) -> dict[str, Any]:
    """The public shape of a todo (DESIGN.md §6.3): no payload unless asked."""
    out: dict[str, Any] = {
        "id": todo.id,
        "project_id": todo.project_id,
        "queue": todo.queue,
        "state": todo.state,
        "kind": todo.kind,
        "title": todo.title,
        "priority": todo.priority,
        "assigned_agent_id": todo.assigned_agent_id,
        "attempt_count": todo.attempt_count,
        "max_attempts": todo.max_attempts,
        "claimed_by": todo.claimed_by,
        "lease_expires_at": _iso(todo.lease_expires_at),
        "created_at": _iso(todo.created_at),
        "updated_at": _iso(todo.updated_at),
    }
    if project_name is not None:
        out["project"] = project_name
    if with_payload:
        out["payload"] = todo.payload
        out["result"] = todo.result
    return out


def _iso(value: datetime | None) -> str | None:
    return value.isoformat().replace("+00:00", "Z") if value is not None else None


def _readable(grants: dict[str, str], todo: Todo | None) -> Todo:
    if todo is None or todo.project_id not in grants:
        raise NotFound("no such todo")
    return todo


def _require_work(grants: dict[str, str], todo: Todo) -> None:
    if grants.get(todo.project_id) != "work":
        raise Forbidden("this agent has read access only on the todo's project")


def resolve_projects(session: Session, grants: dict[str, str], project: str | None, need_work: bool) -> list[str]:
    """Project ids the agent may use, narrowed to ``project`` (id or name) when given.

    Raises:
        NotFound: ``project`` names nothing the agent can read (same answer as unknown).
    """
    if project is None:
        wanted = [pid for pid, role in grants.items() if role == "work" or not need_work]
        return wanted
    found = session.execute(
        select(Project.id).where((Project.id == project) | (Project.name == project))
    ).scalars().first()
    if found is None or found not in grants:
        raise NotFound("no such project")
    if need_work and grants[found] != "work":
        raise Forbidden("this agent has read access only on that project")
    return [found]


def list_todos(
    session: Session, grants: dict[str, str], *, project: str | None = None, queue: str | None = None,
    state: str | None = None, limit: int = 50,
) -> dict[str, Any]:
    """Todos the agent can read, oldest first, without payloads.

    Raises:
        InvalidArgument: ``limit`` outside 1..200 or unknown ``state`` (never silently cut).
    """
    if not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= MAX_LIST_LIMIT:
        raise InvalidArgument(f"limit must be a whole number from 1 to {MAX_LIST_LIMIT}")
    if state is not None and state not in STATES:
        raise InvalidArgument(f"state must be one of {', '.join(STATES)}")
    project_ids = resolve_projects(session, grants, project, need_work=False)
    query = select(Todo).where(Todo.project_id.in_(project_ids))  # type: ignore[attr-defined]
    if queue is not None:
        query = query.where(Todo.queue == queue)
    if state is not None:
        query = query.where(Todo.state == state)
    rows = session.execute(query.order_by(Todo.created_at, Todo.id).limit(limit + 1)).scalars().all()
    return {"todos": [row(t) for t in rows[:limit]], "has_more": len(rows) > limit}


def claim(
    session: Session,
    clock: Clock,
    agent_id: str,
    grants: dict[str, str],
    *,
    todo_id: str | None = None,
    project: str | None = None,
    queue: str | None = None,
    lease_seconds: int = DEFAULT_LEASE_SECONDS,
    is_postgres: bool = False,
) -> dict[str, Any]:
    """Claim a todo by id, or the next pending one (priority first, then oldest).

    Returns:
        ``{todo, lease_token, lease_expires_at, attempt}``, or ``{"empty": True}`` when
        nothing is pending.

    Raises:
        InvalidArgument: bad ``lease_seconds``. NotFound: unknown or unreadable todo.
        Forbidden: read-only grant. Conflict: the todo is not pending (or held by another).
    """
    if not isinstance(lease_seconds, int) or isinstance(lease_seconds, bool) or not (
        1 <= lease_seconds <= MAX_LEASE_SECONDS
    ):
        raise InvalidArgument(f"lease_seconds must be a whole number from 1 to {MAX_LEASE_SECONDS}")
    now = clock.now()
    if todo_id is not None:
        todo = _readable(grants, session.get(Todo, todo_id))
        _require_work(grants, todo)
        if todo.state == "claimed" and todo.claimed_by == agent_id:
            return _claim_view(session, todo)
        candidate = todo.id
    else:
        project_ids = resolve_projects(session, grants, project, need_work=True)
        if not project_ids:
            return {"empty": True}
        query = (
            select(Todo.id)
            .where(Todo.project_id.in_(project_ids), Todo.state == "pending")  # type: ignore[attr-defined]
            .where((Todo.assigned_agent_id.is_(None)) | (Todo.assigned_agent_id == agent_id))  # type: ignore[union-attr]
            .order_by(Todo.priority.desc(), Todo.created_at, Todo.id)  # type: ignore[attr-defined]
            .limit(1)
        )
        if queue is not None:
            query = query.where(Todo.queue == queue)
        if is_postgres:
            query = query.with_for_update(skip_locked=True)
        candidate = session.execute(query).scalars().first()
        if candidate is None:
            return {"empty": True}
    token = secrets.token_urlsafe(24)
    expires = now + timedelta(seconds=lease_seconds)
    result = session.execute(
        update(Todo)
        .where(Todo.id == candidate, Todo.state == "pending")
        .where((Todo.assigned_agent_id.is_(None)) | (Todo.assigned_agent_id == agent_id))  # type: ignore[union-attr]
        .values(state="claimed", claimed_by=agent_id, lease_token=token, lease_expires_at=expires,
                attempt_count=Todo.attempt_count + 1, updated_at=now)
        .execution_options(synchronize_session=False)
    )
    if result.rowcount != 1:  # type: ignore[attr-defined]
        if todo_id is None:
            return {"empty": True}
        raise Conflict("the todo is not pending")
    todo = session.get(Todo, candidate)
    assert todo is not None
    session.refresh(todo)
    attempt = Attempt(todo_id=todo.id, number=todo.attempt_count, agent_id=agent_id, claimed_at=now,
                      lease_expires_at=expires)
    session.add(attempt)
    feed.append(session, clock, todo.project_id, "todo.claimed", todo.title, subject_id=todo.id,
                data={"agent_id": agent_id, "attempt": attempt.number})
    session.flush()
    return _claim_view(session, todo)


def _claim_view(session: Session, todo: Todo) -> dict[str, Any]:
    attempt = session.execute(
        select(Attempt).where(Attempt.todo_id == todo.id, Attempt.number == todo.attempt_count)
    ).scalars().first()
    return {
        "todo": row(todo, with_payload=True),
        "lease_token": todo.lease_token,
        "lease_expires_at": _iso(todo.lease_expires_at),
        "attempt": attempt.number if attempt else todo.attempt_count,
    }


def complete(
    session: Session, clock: Clock, agent_id: str, grants: dict[str, str], *, todo_id: str,
    result: Any = None, lease_token: str | None = None,
) -> dict[str, Any]:
    """Mark a claimed todo done and close its attempt (outcome ``completed``).

    Raises:
        NotFound: unknown or unreadable todo. Conflict: not claimed by the caller, or a stale
        ``lease_token``.
    """
    todo = _readable(grants, session.get(Todo, todo_id))
    _require_work(grants, todo)
    if todo.state != "claimed" or todo.claimed_by != agent_id:
        raise Conflict("the todo is not claimed by this agent")
    if lease_token is not None and not secrets.compare_digest(str(lease_token), todo.lease_token or ""):
        raise Conflict("the lease token is stale")
    now = clock.now()
    todo.state = "done"
    todo.result = result if isinstance(result, dict) else ({"value": result} if result is not None else None)
    todo.lease_token = None
    todo.lease_expires_at = None
    todo.updated_at = now
    attempt = session.execute(
        select(Attempt).where(Attempt.todo_id == todo.id, Attempt.number == todo.attempt_count)
    ).scalars().first()
    if attempt is not None:
        attempt.ended_at = now
        attempt.outcome = "completed"
    feed.append(session, clock, todo.project_id, "todo.completed", todo.title, subject_id=todo.id,
                data={"agent_id": agent_id})
    session.flush()
    return row(todo)
