"""The todo ledger: create, read, list, and the human operations (DESIGN.md §6.2).

States: ``pending → claimed → done | failed``; ``failed`` with ``next_retry_at`` set waits to
retry, with it null is dead-lettered; ``cancelled`` for withdrawn work. Lease transitions live
in :mod:`switchboard.queue.leases`.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import bindparam, select
from sqlalchemy.orm.attributes import flag_modified
from sqlmodel import Session

from switchboard import paging
from switchboard.clock import Clock, iso
from switchboard.errors import Conflict, Forbidden, InvalidArgument, NotFound
from switchboard.feed import events as feed
from switchboard.models import Attempt, Grant, Todo, in_state
from switchboard.models.base import new_id
from switchboard.prepared import Prepared
from switchboard.scope import resolve_projects

MAX_LIST_LIMIT = 200
STATES = ("pending", "claimed", "done", "failed", "cancelled")
MAX_TITLE_CHARS = 300
"""A title typed by a human or an agent (CLI, web UI, REST, ``todo_create``), after folding."""


def check_title(title: object) -> str:
    """A typed todo title as stored: one line (whitespace folded), nothing a reader cannot see
    (:func:`switchboard.text.readable`), 1-:data:`MAX_TITLE_CHARS` characters, no ``<channel>``
    tag (DESIGN.md §5). The same rule on every surface, and never cut: the CLI, the web UI and
    the human REST route cut at 200 characters with "…" while ``todo_create`` refused over 300
    (a new-user run; DESIGN.md §6: limits are ``invalid_argument``, never silently cut).

    Raises:
        InvalidArgument: not a string, empty, too long, or holding a ``<channel>`` tag.
    """
    from switchboard.intake.channel_break import breaks_channel
    from switchboard.text import readable

    line = readable(title) if isinstance(title, str) else ""
    if not line or len(line) > MAX_TITLE_CHARS:
        raise InvalidArgument(f"title must be 1-{MAX_TITLE_CHARS} characters on one line")
    if breaks_channel(line):
        raise InvalidArgument("title must not contain a <channel> tag")
    return line


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
    todo_id, created = _insert(session, clock, project_id=project_id, queue=queue, kind=kind, title=title,
                               payload=payload, origin_key=origin_key, source_id=source_id,
                               delivery_id=delivery_id, human_id=human_id, rung=False)
    todo = session.get(Todo, todo_id)
    assert todo is not None
    return todo, created


def create_rung(session: Session, clock: Clock, **fields: Any) -> tuple[str, bool]:
    """:func:`create` for processing (issue 11): the first ring already recorded (``rung_at`` now,
    ``ring_count`` 1: the caller sends the wake in the same transaction), and no ORM object built.
    Takes :func:`create`'s keyword arguments (``origin_key`` required).

    Returns:
        ``(todo id, created)``; ``created`` is False when ``origin_key`` already made a todo
        (its id is returned, and nothing is written).
    """
    return _insert(session, clock, rung=True, **fields)


def _insert(session: Session, clock: Clock, *, project_id: str, queue: str, kind: str, title: str,
            payload: dict[str, Any] | None, origin_key: str | None, source_id: str | None = None,
            delivery_id: str | None = None, human_id: str | None = None, rung: bool) -> tuple[str, bool]:
    """One ``INSERT ... ON CONFLICT (origin_key) DO NOTHING RETURNING id``, then the
    ``todo.created`` event (one INSERT: its origin key is built from the new id)."""
    now = clock.now()
    todo_id = new_id("td")
    dialect = session.get_bind().dialect.name
    stmt = _INSERTS.get(dialect)
    if stmt is None:
        stmt = _INSERTS[dialect] = _insert_statement(dialect)
    inserted = stmt.run(session, {
        "id": todo_id, "project_id": project_id, "queue": queue, "state": "pending", "kind": kind, "title": title,
        "payload": payload, "origin_key": origin_key, "source_id": source_id, "delivery_id": delivery_id,
        "human_id": human_id, "assigned_agent_id": None, "priority": 0, "attempt_count": 0, "failure_count": 0,
        "max_attempts": MAX_ATTEMPTS, "claimed_by": None, "lease_token": None, "lease_session": None,
        "lease_expires_at": None, "next_retry_at": None, "rung_at": now if rung else None,
        "ring_count": 1 if rung else 0, "result": None, "created_at": now, "updated_at": now})
    if not inserted:
        existing = session.connection().execute(select(TODOS.c.id).where(TODOS.c.origin_key == origin_key)).scalar_one()
        return str(existing), False
    feed.record(session, clock, project_id, "todo.created", title, subject_id=todo_id,
                data={"queue": queue, "kind": kind}, origin_key=f"{todo_id}:created")
    return todo_id, True


TODOS = Todo.__table__  # type: ignore[attr-defined]
MAX_ATTEMPTS: int = Todo.model_fields["max_attempts"].default
_INSERTS: dict[str, Any] = {}


def _insert_statement(dialect: str) -> Any:
    if dialect == "postgresql":
        from sqlalchemy.dialects.postgresql import insert as dialect_insert
    else:
        from sqlalchemy.dialects.sqlite import insert as dialect_insert
    # Prepared (compiled once, run on the DBAPI cursor with the columns' own conversions): the
    # todo INSERT was the largest single step of processing's write transaction (issue 11).
    return Prepared(
        dialect_insert(TODOS).values({c.name: bindparam(c.name, type_=c.type) for c in TODOS.c})
        .on_conflict_do_nothing(index_elements=["origin_key"]).returning(TODOS.c.id), [TODOS.c.id])


def row(todo: Todo, project_name: str | None = None, with_payload: bool = False) -> dict[str, Any]:
    """The public shape of a todo (DESIGN.md §6.3): no payload unless asked.

    ``ring_count`` and ``last_rung_at`` (ISO 8601 UTC or None) say whether a wake was pushed
    for it while pending: a todo rung several times and still pending points at a session
    that does not hear wakes (issue 18.10; ``switchboard doctor``).
    """
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
        "failure_count": todo.failure_count,
        "max_attempts": todo.max_attempts,
        "claimed_by": todo.claimed_by,
        "lease_expires_at": iso(todo.lease_expires_at),
        "next_retry_at": iso(todo.next_retry_at),
        "dead_lettered": todo.state == "failed" and todo.next_retry_at is None,
        # Pushed is not claimed (DESIGN.md §6.5a): how often it was rung while pending, and when last.
        "ring_count": todo.ring_count,
        "last_rung_at": iso(todo.rung_at),
        "created_at": iso(todo.created_at),
        "updated_at": iso(todo.updated_at),
    }
    if project_name is not None:
        out["project"] = project_name
    if with_payload:
        out["payload"] = todo.payload
        out["result"] = todo.result
    return out


def readable(grants: dict[str, str], todo: Todo | None) -> Todo:
    if todo is None or todo.project_id not in grants:
        raise NotFound("no such todo")
    return todo


def require_work(grants: dict[str, str], todo: Todo) -> None:
    if grants.get(todo.project_id) != "work":
        raise Forbidden("this agent has read access only on the todo's project")


def list_todos(
    session: Session,
    grants: dict[str, str],
    *,
    project: str | None = None,
    queue: str | None = None,
    state: str | None = None,
    limit: int = 50,
    cursor: str | None = None,
) -> dict[str, Any]:
    """One page of the todos the agent can read, oldest first, without payloads.

    Args:
        cursor: ``next_cursor`` of an earlier page (:mod:`switchboard.paging`); None starts at the oldest.

    Returns:
        ``{todos, has_more, next_cursor}`` (:func:`page_of`).

    Raises:
        InvalidArgument: ``limit`` outside 1..200, unknown ``state`` (never silently cut) or a
            malformed cursor. NotFound: ``project`` is unknown or not readable.
    """
    project_ids = resolve_projects(session, grants, project, need_work=False)
    return page_of(session, project_ids, queue=queue, state=state, limit=limit, cursor=cursor)


LIST_NAME = "todos"
_KEY = ("time", "str")


def page_of(
    session: Session,
    project_ids: list[str] | None,
    *,
    queue: str | None = None,
    state: str | None = None,
    dead_letters: bool = False,
    limit: int = 50,
    cursor: str | None = None,
    max_limit: int = MAX_LIST_LIMIT,
) -> dict[str, Any]:
    """One page of todos in ``project_ids`` in creation order (``created_at``, then id), the
    one todo list behind ``todo_list``, the human REST list and ``switchboard todo list``.

    Keyset paging on ``(created_at, id)``, both immutable: every todo that exists for the whole
    walk is listed exactly once, however many are created, claimed or finished between pages
    (issue 18 item 4). A todo created during the walk is listed when its creation time sorts
    after the cursor (normally: it is newer than everything listed so far).

    Args:
        project_ids: the caller's scope, already resolved (a cursor never widens it); None
            means every project (the operator's CLI only).
        dead_letters: only ``failed`` todos with no retry due (overrides ``state``).
        limit: page size, 1..``max_limit`` (200 for agents and REST; the CLI allows 1,000).
        cursor: ``next_cursor`` of an earlier page, or None.

    Returns:
        ``{todos: [row], has_more: bool, next_cursor: str | None}``; ``next_cursor`` is set
        exactly when ``has_more`` is.

    Raises:
        InvalidArgument: bad ``limit``, ``state`` or ``cursor``.
    """
    if not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= max_limit:
        raise InvalidArgument(f"limit must be a whole number from 1 to {max_limit}")
    if state is not None and state not in STATES:
        raise InvalidArgument(f"state must be one of {', '.join(STATES)}")
    query = select(Todo)
    if project_ids is not None:
        query = query.where(Todo.project_id.in_(project_ids))  # type: ignore[attr-defined]
    if cursor is not None:
        query = query.where(paging.after((Todo.created_at, Todo.id), paging.decode(cursor, LIST_NAME, _KEY)))
    if queue is not None:
        query = query.where(Todo.queue == queue)
    if dead_letters:
        query = query.where(in_state(Todo.state, "failed"), Todo.next_retry_at.is_(None))  # type: ignore[union-attr]
    elif state is not None:
        query = query.where(in_state(Todo.state, state))
    rows = session.execute(query.order_by(Todo.created_at, Todo.id).limit(limit + 1)).scalars().all()
    kept, next_cursor = paging.page(rows, limit, LIST_NAME, _KEY, lambda t: (t.created_at, t.id))
    return {"todos": [row(t) for t in kept], "has_more": next_cursor is not None, "next_cursor": next_cursor}


def claim_view(session: Session, todo: Todo) -> dict[str, Any]:
    attempt = (
        session.execute(
            select(Attempt).where(Attempt.todo_id == todo.id, Attempt.number == todo.attempt_count)
        )
        .scalars()
        .first()
    )
    return {
        "todo": row(todo, with_payload=True),
        "lease_token": todo.lease_token,
        "lease_expires_at": iso(todo.lease_expires_at),
        "next_retry_at": iso(todo.next_retry_at),
        "dead_lettered": todo.state == "failed" and todo.next_retry_at is None,
        # Pushed is not claimed (DESIGN.md §6.5a): how often it was rung while pending, and when last.
        "ring_count": todo.ring_count,
        "last_rung_at": iso(todo.rung_at),
        "attempt": attempt.number if attempt else todo.attempt_count,
    }


def attempts_of(session: Session, todo_id: str) -> list[dict[str, Any]]:
    """The todo's attempts, oldest first: claimant, times (UTC ISO 8601), outcome, summary."""
    rows = session.execute(
        select(Attempt).where(Attempt.todo_id == todo_id).order_by(Attempt.number)
    ).scalars()
    return [
        {
            "number": a.number,
            "agent_id": a.agent_id,
            "claimed_at": iso(a.claimed_at),
            "lease_expires_at": iso(a.lease_expires_at),
            "ended_at": iso(a.ended_at),
            "outcome": a.outcome,
            "summary": a.summary,
        }
        for a in rows
    ]


def get(session: Session, grants: dict[str, str], todo_id: str) -> dict[str, Any]:
    """A readable todo with payload, result and attempts. Raises ``NotFound``."""
    todo = readable(grants, session.get(Todo, todo_id))
    out = row(todo, with_payload=True)
    out["attempts"] = attempts_of(session, todo.id)
    return out


def list_dead_letters(
    session: Session, project_id: str | None = None, limit: int = 50
) -> list[dict[str, Any]]:
    """Dead-lettered todos (``failed`` with no retry due), oldest first."""
    query = select(Todo).where(in_state(Todo.state, "failed"), Todo.next_retry_at.is_(None))  # type: ignore[union-attr]
    if project_id is not None:
        query = query.where(Todo.project_id == project_id)
    return [row(t) for t in session.execute(query.order_by(Todo.updated_at).limit(limit)).scalars()]


def retry_dead_letter(session: Session, clock: Clock, todo_id: str) -> dict[str, Any]:
    """A human sends a dead letter back to ``pending`` with a fresh attempt budget; it rings
    afresh (``rung_at`` cleared, ``ring_count`` 0), as re-queued work does (see
    :func:`switchboard.queue.leases.release`).

    Raises:
        NotFound: no such todo. Conflict: the todo is not dead-lettered.
    """
    todo = session.get(Todo, todo_id)
    if todo is None:
        raise NotFound("no such todo")
    if not (todo.state == "failed" and todo.next_retry_at is None):
        raise Conflict(f"the todo is {todo.state}, not dead-lettered")
    todo.state, todo.failure_count, todo.updated_at = "pending", 0, clock.now()
    todo.rung_at, todo.ring_count = None, 0
    session.flush()
    return row(todo)


def cancel(session: Session, clock: Clock, todo_id: str) -> dict[str, Any]:
    """A human withdraws a todo (from ``pending``, ``claimed`` or ``failed``).

    A current holder's later ``complete``/``fail`` is refused with ``conflict``.

    Raises:
        NotFound: no such todo. Conflict: already ``done`` or ``cancelled``.
    """
    todo = session.get(Todo, todo_id)
    if todo is None:
        raise NotFound("no such todo")
    if todo.state in ("done", "cancelled"):
        raise Conflict(f"the todo is already {todo.state}")
    now = clock.now()
    if todo.state == "claimed":
        attempt = (
            session.execute(
                select(Attempt).where(Attempt.todo_id == todo.id, Attempt.number == todo.attempt_count)
            )
            .scalars()
            .first()
        )
        if attempt is not None and attempt.outcome is None:
            attempt.ended_at, attempt.outcome = now, "cancelled"
    todo.state, todo.next_retry_at, todo.updated_at = "cancelled", None, now
    todo.lease_token = todo.lease_expires_at = todo.claimed_by = None
    session.flush()
    return row(todo)


def assign(session: Session, clock: Clock, todo_id: str, agent_id: str | None) -> Todo:
    """Assign a pending todo to one agent (only it may claim it), or clear with ``None``; either
    way its wake goes out afresh on the hub's next pass (``rung_at`` and ``ring_count`` reset).

    Raises:
        NotFound: no such todo. Conflict: the todo is not pending.
    """
    todo = session.get(Todo, todo_id)
    if todo is None:
        raise NotFound("no such todo")
    if todo.state != "pending":
        raise Conflict(f"only a pending todo can be assigned; this one is {todo.state}")
    if agent_id is not None:
        role = session.execute(
            select(Grant.role).where(Grant.agent_id == agent_id, Grant.project_id == todo.project_id)
        ).scalar()
        if role != "work":  # the same answer as an unknown agent (issue 13 item 1)
            raise NotFound("no agent by that name can work on this project")
    todo.assigned_agent_id, todo.updated_at = agent_id, clock.now()
    # Rung afresh on the hub's next pass, to its new recipients. Written even when the values
    # loaded are these already (a todo never rung): a pass may have rung it since it was read, and
    # the ORM left equal values out of its UPDATE, so on PostgreSQL the new assignee's first ring
    # was lost (a review).
    todo.rung_at, todo.ring_count = None, 0
    flag_modified(todo, "rung_at")
    flag_modified(todo, "ring_count")
    session.flush()
    return todo
