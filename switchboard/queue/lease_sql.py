"""The hot statements of :mod:`switchboard.queue.leases`, built once per shape (issue 11).

Values travel as bind parameters; each statement is a :class:`~switchboard.prepared.Prepared`
(compiled once per dialect, run on the DBAPI cursor). On PostgreSQL a claim-next and a complete
with the system clock are one statement each, with the attempt row and the feed event written
by data-modifying CTEs in the same statement: one round trip instead of three (the connection
round trips, not the database's work, bound claims there).
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy import bindparam, func, insert, select, update

from switchboard.feed.events import FEED
from switchboard.models import Attempt, Todo, fixed_limit, in_state, still_in_state
from switchboard.prepared import Prepared

TODOS = Todo.__table__  # type: ignore[attr-defined]
ATTEMPTS = Attempt.__table__  # type: ignore[attr-defined]
# The database's clock as naive UTC, the way UTCDateTime stores times (whatever the session's
# TimeZone): for statements that read the lease clock in SQL instead of a round trip first.
SQL_NOW = func.timezone("UTC", func.now())

STATEMENTS: dict[tuple[Any, ...], Any] = {}
"""Hot-path statements built once per shape (issue 11: building and cache-keying a statement on
every call was a third of a claim's CPU); values travel as bind parameters."""


def claim_statement(by_id: bool, with_queue: bool, is_postgres: bool, sql_now: bool = False) -> Any:
    """``UPDATE todos SET <claim> WHERE id = (:id | next pending) AND state = 'pending' ... RETURNING *``.

    ``sql_now``: the lease clock is the database's ``now()``, read in the statement itself
    (``b_secs`` is the lease length) instead of a ``SELECT now()`` round trip before it.
    """
    key = ("claim", by_id, with_queue, is_postgres, sql_now)
    stmt = STATEMENTS.get(key)
    if stmt is None:
        agent = bindparam("b_agent")
        if by_id:
            target: Any = bindparam("b_id")
        else:
            pick = (
                select(TODOS.c.id)
                .where(TODOS.c.project_id.in_(bindparam("b_projects", expanding=True)), in_state(TODOS.c.state, "pending"))
                .where(TODOS.c.assigned_agent_id.is_(None) | (TODOS.c.assigned_agent_id == agent))
                .order_by(TODOS.c.priority.desc(), TODOS.c.created_at, TODOS.c.id)
                .limit(fixed_limit(1))
            )
            if with_queue:
                pick = pick.where(TODOS.c.queue == bindparam("b_queue"))
            if is_postgres:
                pick = pick.with_for_update(skip_locked=True)
            target = pick.scalar_subquery()
        stmt = (
            update(TODOS)
            .where(TODOS.c.id == target, still_in_state(TODOS.c.state, "pending"))
            .where(TODOS.c.assigned_agent_id.is_(None) | (TODOS.c.assigned_agent_id == agent))
            .values(state="claimed", claimed_by=agent, lease_token=bindparam("b_token"),
                    lease_session=bindparam("b_session", type_=TODOS.c.lease_session.type),
                    attempt_count=TODOS.c.attempt_count + 1)
            .returning(*TODOS.c)
        )
        if sql_now:
            stmt = stmt.values(lease_expires_at=SQL_NOW + sa.literal_column("interval '1 second'") * bindparam("b_secs"),
                               updated_at=SQL_NOW)
        else:
            stmt = stmt.values(lease_expires_at=bindparam("b_expires", type_=TODOS.c.lease_expires_at.type),
                               updated_at=bindparam("b_now", type_=TODOS.c.updated_at.type))
        STATEMENTS[key] = stmt = Prepared(stmt, TODOS.c, None if by_id else "b_projects")
    return stmt


def complete_statement(fence: str, sql_now: bool = False) -> Any:
    """``UPDATE todos SET state = 'done' ... WHERE <held by the caller> AND <fence> RETURNING *``;
    ``fence`` is ``token``, ``session`` or ``no_session``; ``sql_now`` as for the claim."""
    key = ("complete", fence, sql_now)
    stmt = STATEMENTS.get(key)
    if stmt is None:
        now = SQL_NOW if sql_now else bindparam("b_now", type_=TODOS.c.updated_at.type)
        stmt = (
            update(TODOS)
            .where(TODOS.c.id == bindparam("b_id"), still_in_state(TODOS.c.state, "claimed"),
                   TODOS.c.claimed_by == bindparam("b_agent"), TODOS.c.lease_expires_at > now,
                   TODOS.c.project_id.in_(bindparam("b_projects", expanding=True)))
            .values(state="done", result=bindparam("b_result", type_=TODOS.c.result.type), lease_token=None,
                    lease_expires_at=None, claimed_by=None, lease_session=None, updated_at=now)
            .returning(*TODOS.c)
        )
        if fence == "token":
            stmt = stmt.where(TODOS.c.lease_token == bindparam("b_token"))
        elif fence == "session":
            stmt = stmt.where(TODOS.c.lease_session == bindparam("b_session"))
        else:
            stmt = stmt.where(TODOS.c.lease_session.is_(None))
        STATEMENTS[key] = stmt = Prepared(stmt, TODOS.c, "b_projects")
    return stmt


INSERT_ATTEMPT = Prepared(insert(ATTEMPTS).values({c.name: bindparam(c.name, type_=c.type) for c in ATTEMPTS.c}))
END_ATTEMPT = Prepared(
    update(ATTEMPTS)
    .where(ATTEMPTS.c.todo_id == bindparam("b_todo"), ATTEMPTS.c.number == bindparam("b_number"))
    .values(ended_at=bindparam("b_ended", type_=ATTEMPTS.c.ended_at.type), outcome=bindparam("b_outcome"))
)


def _feed_insert(source: Any, kind: str) -> Any:
    """``INSERT INTO feed_events ... SELECT`` from the claimed or completed row, as
    :func:`switchboard.feed.events.record` writes it (``data``: agent and attempt number)."""
    return insert(FEED).from_select(
        ["project_id", "kind", "title", "subject_id", "data", "created_at"],
        select(source.c.project_id, sa.literal(kind, FEED.c.kind.type), source.c.title, source.c.id,
               func.jsonb_build_object(sa.literal("agent_id", sa.String), bindparam("b_agent", type_=sa.String),
                                       sa.literal("attempt", sa.String), source.c.attempt_count),
               bindparam("b_created", type_=FEED.c.created_at.type)))


def pg_claim_recorded(with_queue: bool) -> Prepared:
    """PostgreSQL, next in queue, lease clock ``now()``: the claim UPDATE, the attempt INSERT
    (``b_attempt``: its id) and the ``todo.claimed`` event (``b_created``) in one statement;
    returns the claimed row, or no row."""
    key = ("pg_claim_recorded", with_queue)
    found = STATEMENTS.get(key)
    if found is None:
        claimed = claim_statement(False, with_queue, True, True).stmt.cte("claimed")
        attempt = insert(ATTEMPTS).from_select(
            ["id", "todo_id", "number", "agent_id", "claimed_at", "lease_expires_at"],
            select(bindparam("b_attempt", type_=ATTEMPTS.c.id.type), claimed.c.id, claimed.c.attempt_count,
                   bindparam("b_agent", type_=sa.String), claimed.c.updated_at, claimed.c.lease_expires_at))
        stmt = (select(*[claimed.c[c.name] for c in TODOS.c])
                .add_cte(attempt.cte("attempt")).add_cte(_feed_insert(claimed, "todo.claimed").cte("event")))
        found = STATEMENTS[key] = Prepared(stmt, TODOS.c, "b_projects", writes_feed=True)
    return found


def pg_complete_recorded(fence: str) -> Prepared:
    """PostgreSQL, lease clock ``now()``: the complete UPDATE, the attempt's end and the
    ``todo.completed`` event (``b_created``) in one statement; returns the done row, or no row."""
    key = ("pg_complete_recorded", fence)
    found = STATEMENTS.get(key)
    if found is None:
        done = complete_statement(fence, True).stmt.cte("done")
        ended = (update(ATTEMPTS).where(ATTEMPTS.c.todo_id == done.c.id, ATTEMPTS.c.number == done.c.attempt_count)
                 .values(ended_at=done.c.updated_at, outcome="completed"))
        stmt = (select(*[done.c[c.name] for c in TODOS.c])
                .add_cte(ended.cte("ended")).add_cte(_feed_insert(done, "todo.completed").cte("event")))
        found = STATEMENTS[key] = Prepared(stmt, TODOS.c, "b_projects", writes_feed=True)
    return found
