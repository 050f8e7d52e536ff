"""Leases: claim, heartbeat, complete, fail, release, and the reaper (DESIGN.md §6.2).

Every transition is one conditional ``UPDATE ... WHERE state = <expected> AND ...``: if the
row moved under us (another claimer, the reaper, a human), the update touches nothing and the
caller gets ``conflict``. On SQLite this runs under the one-writer lock; on PostgreSQL the next
candidate is picked with ``FOR UPDATE SKIP LOCKED``. The same tests run on both.

Lease tokens fence stale holders: ``heartbeat``, ``complete``, ``fail`` and ``release`` with a
token from an earlier claim are refused with ``conflict``. Without a token the lease is fenced
by the session that claimed (``todos.lease_session``): another session's token-less call is
refused with ``conflict`` ("lease lost"), so a late result from an expired lease never lands on
a newer attempt (issue 18 item 5). With the system clock on PostgreSQL, lease times come from
the database's clock (:func:`lease_now`). A lease never shrinks silently:
a heartbeat extends it to ``max(current expiry, now + lease_seconds)``.

Backoff after ``fail``: 30 s doubling, capped at 15 min; the todo is dead-lettered (``failed``
with ``next_retry_at`` null) once ``failure_count`` reaches ``max_attempts``.
"""

from __future__ import annotations

import secrets
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import Any

from sqlalchemy import func, select, update
from sqlmodel import Session

from switchboard.clock import Clock, SystemClock, iso
from switchboard.db import AUTOCOMMIT
from switchboard.direct import DirectWrite, SessionNeeded
from switchboard.errors import Conflict, Forbidden, InvalidArgument
from switchboard.feed import events as feed
from switchboard.models import Attempt, Todo, fixed_limit, in_state, still_in_state
from switchboard.models.base import new_id
from switchboard.queue.lease_sql import (
    END_ATTEMPT,
    INSERT_ATTEMPT,
    claim_statement,
    complete_statement,
    pg_claim_recorded,
    pg_complete_recorded,
)
from switchboard.queue.todos import claim_view, readable, require_work, row
from switchboard.scope import resolve_projects

DEFAULT_LEASE_SECONDS = 300
MAX_LEASE_SECONDS = 86_400
BACKOFF_BASE_SECONDS = 30
BACKOFF_CAP_SECONDS = 900
MAX_SUMMARY_CHARS = 2000


def backoff_seconds(failures: int) -> int:
    """Seconds before retry after the ``failures``-th failure: 30, 60, 120, ... capped at 900."""
    return min(BACKOFF_BASE_SECONDS * 2 ** max(failures - 1, 0), BACKOFF_CAP_SECONDS)


def check_lease_seconds(value: Any) -> int:
    """Validate ``lease_seconds`` (1..86400). Raises ``InvalidArgument``."""
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= MAX_LEASE_SECONDS:
        raise InvalidArgument(f"lease_seconds must be a whole number from 1 to {MAX_LEASE_SECONDS}")
    return value


def lease_now(session: Session, clock: Clock) -> datetime:
    """The time leases are measured by.

    With the system clock on PostgreSQL this is the database's ``now()`` (the transaction's
    start): several servers share the database and their wall clocks may drift, so one clock
    decides when a lease expires (issue 18 item 5). Otherwise (SQLite, one host; or an injected
    test clock) it is ``clock.now()``.
    """
    if _db_clock(session, clock):
        value = session.execute(_DB_NOW).scalar_one()
        return value if value.tzinfo is not None else value.replace(tzinfo=UTC)
    return clock.now()


_DB_NOW = select(func.now())


def _db_clock(session: Session, clock: Clock) -> bool:
    """Whether :func:`lease_now` is the database's ``now()`` (PostgreSQL with the system clock)."""
    return isinstance(clock, SystemClock) and session.get_bind().dialect.name == "postgresql"


def one_statement(is_postgres: bool, clock: Clock, by_id: bool = False) -> bool:
    """Whether a next-in-queue :func:`claim` (``by_id`` false) or a :func:`complete` writes with
    one statement: on PostgreSQL with the system clock. Its caller may then run it in
    ``Database.write(autocommit=True)`` (no BEGIN and COMMIT round trips, issue 11)."""
    return is_postgres and isinstance(clock, SystemClock) and not by_id


def _require_transaction(session: Session) -> None:
    """Refuse to write several statements outside a transaction (a crash between them would
    leave a claim without its attempt row)."""
    if session.info.get(AUTOCOMMIT):
        raise RuntimeError("this lease operation writes several statements: run it in Database.write() "
                           "without autocommit (see leases.one_statement)")


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
    session_key: str | None = None,
    project_ids: list[str] | None = None,
) -> dict[str, Any]:
    """Claim a todo by id, or the next pending one (priority first, then oldest).

    The next-in-queue claim is one statement, ``UPDATE todos ... WHERE id = (SELECT ... LIMIT 1
    [FOR UPDATE SKIP LOCKED]) AND state = 'pending' RETURNING *`` (issue 11), then the attempt
    and the feed event: three statements in all. On PostgreSQL with the system clock the lease
    times come from the database's ``now()`` (:func:`lease_now`), read inside that UPDATE (and
    inside :func:`complete`'s) rather than by a ``SELECT now()`` first.

    ``session`` may be a :func:`switchboard.direct.write` for a next-in-queue claim with the
    project ids resolved (a claim by id raises :class:`~switchboard.direct.SessionNeeded`).

    Args:
        session_key: the claiming session (MCP session, adapter session, REST caller); the
            lease is bound to it for operations without ``lease_token``.
        project_ids: project ids already resolved against ``grants`` (work role) by the caller,
            e.g. a claimer loop resolving once; ``project`` is then ignored.

    Returns:
        ``{todo, lease_token, lease_expires_at, attempt}``, or ``{"empty": True}``.

    Raises:
        InvalidArgument: bad ``lease_seconds``. NotFound: unknown or unreadable todo.
        Forbidden: read-only grant (next in queue: every grant of the agent is read-only), or
            the todo is assigned to another agent.
        Conflict: the todo is not pending, or another session of this agent holds it.
    """
    check_lease_seconds(lease_seconds)
    if todo_id is not None and isinstance(session, DirectWrite):
        raise SessionNeeded  # a claim by id reads the todo first (why not, or already held)
    # Next in queue on PostgreSQL with the system clock: the UPDATE reads now() itself.
    sql_now = todo_id is None and _db_clock(session, clock)
    if not sql_now:
        _require_transaction(session)
    now = None if sql_now else lease_now(session, clock)
    if todo_id is not None:
        assert now is not None
        todo = readable(grants, session.get(Todo, todo_id))
        require_work(grants, todo)
        if todo.state == "claimed" and todo.claimed_by == agent_id and _lease_live(todo, now):
            if todo.lease_session not in (None, session_key):
                raise Conflict("another session of this agent holds the todo's lease")
            return claim_view(session, todo)  # idempotent: a duplicate wake never causes double work
        if todo.assigned_agent_id not in (None, agent_id):
            raise Conflict("the todo is assigned to another agent")
    else:
        if project_ids is None:
            project_ids = resolve_projects(session, grants, project, need_work=True)
        if not project_ids:
            if grants and "work" not in grants.values():  # all read-only: "empty" hid why (a new-user run)
                raise Forbidden("this agent has read access only on its projects: a project owner can "
                                "give it the work role (switchboard grant AGENT PROJECT --role work)")
            return {"empty": True}
    token = secrets.token_urlsafe(24)
    params: dict[str, Any] = {"b_agent": agent_id, "b_token": token, "b_session": session_key}
    if sql_now:
        params["b_secs"] = lease_seconds
    else:
        assert now is not None
        params["b_now"], params["b_expires"] = now, now + timedelta(seconds=lease_seconds)
    if todo_id is not None:
        params["b_id"] = todo_id
    else:
        params["b_projects"] = list(project_ids or [])
        if queue is not None:
            params["b_queue"] = queue
    # One conditional UPDATE ... RETURNING: the claim either happens whole or not at all.
    if sql_now:  # PostgreSQL, next in queue: the attempt and the event in the same statement
        params["b_attempt"], params["b_created"] = new_id("att"), clock.now()
        found = pg_claim_recorded(queue is not None).run(session, params)
    else:
        found = claim_statement(todo_id is not None, queue is not None, is_postgres, sql_now).run(session, params)
    claimed = found[0] if found else None
    if claimed is None:
        if todo_id is None:
            return {"empty": True}
        raise Conflict("the todo is not pending")
    todo = SimpleNamespace(**claimed)
    now, expires = todo.updated_at, todo.lease_expires_at
    number = todo.attempt_count
    if not sql_now:
        INSERT_ATTEMPT.run(session, {"id": new_id("att"), "todo_id": todo.id, "number": number,
                                     "agent_id": agent_id, "claimed_at": now, "lease_expires_at": expires,
                                     "ended_at": None, "outcome": None, "summary": None})
        feed.record(session, clock, todo.project_id, "todo.claimed", todo.title, subject_id=todo.id,
                    data={"agent_id": agent_id, "attempt": number})
    return {"todo": row(todo, with_payload=True), "lease_token": token, "lease_expires_at": iso(expires),  # type: ignore[arg-type]
            "attempt": number}


def _lease_live(todo: Todo, now: datetime) -> bool:
    return todo.lease_expires_at is not None and todo.lease_expires_at > now


LEASE_LOST = ("lease lost: this session does not hold the todo's lease (another session claimed it, or this "
              "call comes from a different session than the claim); your result was not recorded")


def _held(session: Session, clock: Clock, agent_id: str, grants: dict[str, str], todo_id: str,
          lease_token: str | None, session_key: str | None = None,
          now: datetime | None = None) -> tuple[Todo, Attempt]:
    """The todo, if the caller holds a live lease on it.

    A ``lease_token``, if given, must be the current one; without a token the lease must have
    been claimed by the calling session (issue 18 item 5: a late call from a session whose
    lease expired never lands on a newer attempt).
    """
    todo = readable(grants, session.get(Todo, todo_id))
    require_work(grants, todo)
    if todo.state != "claimed" or todo.claimed_by != agent_id:
        raise Conflict(f"the todo is {todo.state}, not claimed by this agent")
    if lease_token is not None and not secrets.compare_digest(str(lease_token), todo.lease_token or ""):
        raise Conflict("the lease token is stale: another claim holds this todo now")
    if lease_token is None and todo.lease_session != session_key:
        raise Conflict(LEASE_LOST)
    if not _lease_live(todo, now or lease_now(session, clock)):
        raise Conflict("the lease has expired; claim the todo again")
    attempt = session.execute(
        select(Attempt).where(Attempt.todo_id == todo.id, Attempt.number == todo.attempt_count)
    ).scalars().one()
    return todo, attempt


def _transition(session: Session, todo: Todo, **values: Any) -> None:
    """Apply ``values`` only if the row is still the claim we read (fence against races)."""
    result = session.execute(
        update(Todo)
        .where(Todo.id == todo.id, still_in_state(Todo.state, "claimed"), Todo.lease_token == todo.lease_token)
        .values(**values)
        .execution_options(synchronize_session=False)
    )
    if result.rowcount != 1:  # type: ignore[attr-defined]
        raise Conflict("the todo changed meanwhile; read it again")
    session.refresh(todo)


def heartbeat(session: Session, clock: Clock, agent_id: str, grants: dict[str, str], *, todo_id: str,
              lease_seconds: int = DEFAULT_LEASE_SECONDS, lease_token: str | None = None,
              session_key: str | None = None) -> dict[str, Any]:
    """Extend the caller's lease to ``max(current expiry, now + lease_seconds)``.

    Raises:
        Conflict: not held by the caller, stale token, or expired lease.
    """
    check_lease_seconds(lease_seconds)
    _require_transaction(session)
    now = lease_now(session, clock)
    todo, attempt = _held(session, clock, agent_id, grants, todo_id, lease_token, session_key, now)
    expires = max(todo.lease_expires_at or now, now + timedelta(seconds=lease_seconds))
    _transition(session, todo, lease_expires_at=expires, updated_at=now)
    attempt.lease_expires_at = expires
    session.flush()
    return row(todo)


def complete(session: Session, clock: Clock, agent_id: str, grants: dict[str, str], *, todo_id: str,
             result: Any = None, lease_token: str | None = None, session_key: str | None = None) -> dict[str, Any]:
    """Mark a held todo ``done`` (attempt outcome ``completed``).

    The common case is one conditional ``UPDATE ... RETURNING``; only when it matches nothing
    is the todo read to say why (in a :func:`switchboard.direct.write`, by raising
    :class:`~switchboard.direct.SessionNeeded` for :func:`switchboard.direct.run` to ask again).

    Raises:
        NotFound: unknown or unreadable todo. Forbidden: read-only grant.
        Conflict: not held by the caller, stale token, or expired lease.
    """
    sql_now = _db_clock(session, clock)  # PostgreSQL, system clock: the UPDATE reads now() itself
    if not sql_now:
        _require_transaction(session)
    stored = result if isinstance(result, dict) else ({"value": result} if result is not None else None)
    work = [pid for pid, role in grants.items() if role == "work"]
    params: dict[str, Any] = {"b_id": todo_id, "b_agent": agent_id, "b_projects": work, "b_result": stored}
    if not sql_now:
        params["b_now"] = lease_now(session, clock)
    if lease_token is not None:
        fence, params["b_token"] = "token", str(lease_token)
    elif session_key is None:
        fence = "no_session"
    else:
        fence, params["b_session"] = "session", session_key
    if sql_now:  # PostgreSQL: the attempt's end and the event in the same statement
        params["b_created"] = clock.now()
        found = pg_complete_recorded(fence).run(session, params) if work else []
    else:
        found = complete_statement(fence, sql_now).run(session, params) if work else []
    done = found[0] if found else None
    if done is None:
        if isinstance(session, DirectWrite):
            raise SessionNeeded  # nothing written: direct.run asks again in a session, which says why
        # Raises the precise error (_held reads the lease clock itself on the sql_now path).
        _held(session, clock, agent_id, grants, todo_id, lease_token, session_key, params.get("b_now"))
        raise Conflict("the todo changed meanwhile; read it again")
    todo = SimpleNamespace(**done)
    if not sql_now:
        END_ATTEMPT.run(session, {"b_todo": todo_id, "b_number": todo.attempt_count, "b_ended": todo.updated_at,
                                  "b_outcome": "completed"})
        feed.record(session, clock, todo.project_id, "todo.completed", todo.title, subject_id=todo_id,
                    data={"agent_id": agent_id, "attempt": todo.attempt_count})
    return row(todo)  # type: ignore[arg-type]


def fail(session: Session, clock: Clock, agent_id: str, grants: dict[str, str], *, todo_id: str,
         summary: str | None = None, lease_token: str | None = None, session_key: str | None = None) -> dict[str, Any]:
    """Record a failed attempt: retry after backoff, or dead-letter at ``max_attempts``.

    Returns:
        The todo row; ``next_retry_at`` is set while a retry is due, null when dead-lettered.

    Raises:
        Conflict: not held by the caller, stale token, or expired lease.
    """
    _require_transaction(session)
    now = lease_now(session, clock)
    todo, attempt = _held(session, clock, agent_id, grants, todo_id, lease_token, session_key, now)
    failures = todo.failure_count + 1
    dead = failures >= todo.max_attempts
    retry_at = None if dead else now + timedelta(seconds=backoff_seconds(failures))
    _transition(session, todo, state="failed", failure_count=failures, next_retry_at=retry_at,
                lease_token=None, lease_expires_at=None, claimed_by=None, lease_session=None, updated_at=now)
    attempt.ended_at, attempt.outcome = now, "failed"
    attempt.summary = (summary or "")[:MAX_SUMMARY_CHARS] or None
    kind = "todo.dead_lettered" if dead else "todo.failed"
    feed.append(session, clock, todo.project_id, kind, todo.title, subject_id=todo.id,
                data={"agent_id": agent_id, "attempt": attempt.number, "failures": failures,
                      "next_retry_at": iso(retry_at)})
    session.flush()
    return row(todo)


def release(session: Session, clock: Clock, agent_id: str, grants: dict[str, str], *, todo_id: str,
            lease_token: str | None = None, session_key: str | None = None) -> dict[str, Any]:
    """Give a held todo back: ``pending`` again, no failure counted (outcome ``released``).

    The todo rings afresh (``rung_at`` cleared, ``ring_count`` 0), as a todo the reaper
    re-queues does: one rung :data:`~switchboard.models.work.MAX_RINGS` times before its claim
    would otherwise never be rung again, and only a pull would find it (DESIGN.md §6.5, "re-rung
    with backoff while unclaimed").

    Raises:
        Conflict: not held by the caller, stale token, or expired lease.
    """
    _require_transaction(session)
    now = lease_now(session, clock)
    todo, attempt = _held(session, clock, agent_id, grants, todo_id, lease_token, session_key, now)
    _transition(session, todo, state="pending", lease_token=None, lease_expires_at=None, claimed_by=None,
                lease_session=None, rung_at=None, ring_count=0, updated_at=now)
    attempt.ended_at, attempt.outcome = now, "released"
    session.flush()
    return row(todo)


def _expired_leases(now: datetime) -> tuple[Any, ...]:
    return in_state(Todo.state, "claimed"), Todo.lease_expires_at <= now  # type: ignore[operator]


def _due_retries(now: datetime) -> tuple[Any, ...]:
    return (in_state(Todo.state, "failed"), Todo.next_retry_at.is_not(None),  # type: ignore[union-attr]
            Todo.next_retry_at <= now)  # type: ignore[operator]


def reap_due(session: Session, clock: Clock) -> bool:
    """Whether :func:`reap` has anything to do: an expired lease or a due retry (two indexed
    reads of one row at most, in any session). The maintenance pass asks first, in a read,
    so that a pass with nothing to do takes no write lock (issue 11)."""
    now = lease_now(session, clock)
    return any(session.execute(select(Todo.id).where(*where).limit(fixed_limit(1))).first() is not None
               for where in (_expired_leases(now), _due_retries(now)))


def reap(session: Session, clock: Clock, limit: int = 500) -> tuple[dict[str, int], list[str]]:
    """Return expired leases and due retries to the queue; safe in many processes at once.

    Expired leases get outcome ``lease_expired`` and count as a failure (dead-lettered at
    ``max_attempts``); ``failed`` todos whose ``next_retry_at`` has passed become ``pending``.

    Returns:
        ``({"expired": n, "dead_lettered": n, "retried": n}, ids of todos now pending)``.
    """
    now = lease_now(session, clock)
    counts = {"expired": 0, "dead_lettered": 0, "retried": 0}
    requeued: list[str] = []
    expired = session.execute(
        select(Todo).where(*_expired_leases(now)).order_by(Todo.lease_expires_at).limit(fixed_limit(limit))
    ).scalars().all()
    for todo in expired:
        failures = todo.failure_count + 1
        dead = failures >= todo.max_attempts
        moved = session.execute(
            update(Todo)
            .where(Todo.id == todo.id, still_in_state(Todo.state, "claimed"), Todo.lease_token == todo.lease_token)
            .values(state="failed" if dead else "pending", failure_count=failures, next_retry_at=None,
                    lease_token=None, lease_expires_at=None, claimed_by=None, lease_session=None, updated_at=now)
            .execution_options(synchronize_session=False)
        )
        if moved.rowcount != 1:  # type: ignore[attr-defined]
            continue  # another reaper or the holder got there first
        attempt = session.execute(
            select(Attempt).where(Attempt.todo_id == todo.id, Attempt.number == todo.attempt_count)
        ).scalars().first()
        if attempt is not None and attempt.outcome is None:
            attempt.ended_at, attempt.outcome = now, "lease_expired"
        counts["expired"] += 1
        if not dead:
            requeued.append(todo.id)
        if dead:
            counts["dead_lettered"] += 1
            feed.append(session, clock, todo.project_id, "todo.dead_lettered", todo.title, subject_id=todo.id,
                        data={"failures": failures, "reason": "lease_expired"})
    due_ids = session.execute(select(Todo.id).where(*_due_retries(now)).limit(fixed_limit(limit))).scalars().all()
    for todo_id in due_ids:
        moved = session.execute(
            update(Todo)
            .where(Todo.id == todo_id, still_in_state(Todo.state, "failed"), Todo.next_retry_at.is_not(None))  # type: ignore[union-attr]
            .values(state="pending", next_retry_at=None, updated_at=now)
            .execution_options(synchronize_session=False)
        )
        if moved.rowcount == 1:  # type: ignore[attr-defined]
            counts["retried"] += 1
            requeued.append(todo_id)
    session.flush()
    return counts, requeued
