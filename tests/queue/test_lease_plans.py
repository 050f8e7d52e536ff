"""Every conditional update of one todo finds it by its primary key, also when the planner's
statistics are stale (issue 11, :func:`switchboard.models.still_in_state`).

On PostgreSQL, after an ANALYZE that saw no claimed todos and a burst of claims since (a quiet
period, then load; autovacuum's next ANALYZE comes later), ``UPDATE todos ... WHERE id = $1 AND
state = 'claimed'`` was planned as a scan of the partial index ``ix_todos_lease`` filtered by id:
every claimed row read to complete one (904 buffers with 1,000 claimed), and a claim's
``WHERE id = (next) AND state = 'pending'`` as a scan of ``ix_todos_ring`` (1,999 rows removed by
the filter). The statements are explained with the values they run with, as the database plans
them (custom plans), on SQLite and PostgreSQL.

And a constant ``LIMIT`` is written into the SQL (:func:`switchboard.models.fixed_limit`): as a
bound parameter PostgreSQL could not keep a plan for the claim and planned every claim again.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event, update

from switchboard import direct
from switchboard.clock import utcnow
from switchboard.hub import Hub
from switchboard.inbox import alerts, items
from switchboard.models import Todo, fixed_limit
from switchboard.models.base import new_id
from switchboard.notify import wakes
from switchboard.notify.wakes import _RING_CLAIM, ring_claim_params
from switchboard.queue import leases
from switchboard.queue.lease_sql import (
    claim_statement,
    complete_statement,
    pg_claim_recorded,
    pg_complete_recorded,
)
from tests.queue.conftest import agent_of, configured_hub, fill, settings_for
from tests.queue.conftest import explain as _plan
from tests.queue.conftest import explain_prepared as _prepared_plan

PARTIAL_OR_RANGE = ("ix_todos_lease", "ix_todos_ring", "ix_todos_retry", "ix_todos_cancelled",
                    "ix_todos_project_created")
PENDING, CLAIMED = 1500, 1200


@pytest.fixture(params=["sqlite", "postgresql"])
def hub(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Hub]:
    with configured_hub(settings_for(request, tmp_path, request.param)) as h:  # the system clock
        yield h


def _analysed_queue(hub: Hub, pending: int) -> tuple[str, dict[str, str], str]:
    """``pending`` todos on queue ``load``, planner statistics gathered now; the agent's id and
    grants, and the project's id (:func:`agent_of`)."""
    agent_id, grants, project_id = agent_of(hub)
    fill(hub, project_id, pending)
    with hub.db.engine.connect() as conn:
        conn.exec_driver_sql("ANALYZE")
        conn.commit()
    return agent_id, grants, project_id


def _stale_queue(hub: Hub) -> tuple[str, dict[str, str], list[str], list[dict[str, Any]]]:
    """1,500 pending todos, statistics gathered now, then 1,200 of them claimed."""
    agent_id, grants, project_id = _analysed_queue(hub, PENDING)
    one = leases.one_statement(not hub.db.is_sqlite, hub.clock)
    held = []
    for _ in range(CLAIMED):
        with hub.db.write(autocommit=one) as s:
            held.append(leases.claim(s, hub.clock, agent_id, grants, project_ids=[project_id], queue="load",
                                     is_postgres=not hub.db.is_sqlite))
    return agent_id, grants, [project_id], held


def _by_primary_key(hub: Hub, plan: str) -> None:
    key = "sqlite_autoindex_todos_1 (id=?)" if hub.db.is_sqlite else "todos_pkey"
    assert key in plan, plan
    assert not [name for name in PARTIAL_OR_RANGE if name in plan], plan


def test_the_prepared_lease_and_ring_updates_find_the_todo_by_its_primary_key(hub: Hub) -> None:
    agent_id, _, projects, held = _stale_queue(hub)
    todo_id, token = held[600]["todo"]["id"], held[600]["lease_token"]
    now = utcnow()
    lease = {"b_agent": agent_id, "b_token": "t", "b_session": None, "b_now": now,
             "b_expires": now + timedelta(seconds=300)}
    plans = {
        "claim next": _prepared_plan(hub, claim_statement(False, True, not hub.db.is_sqlite),
                                     {**lease, "b_projects": projects, "b_queue": "load"}),
        "claim by id": _prepared_plan(hub, claim_statement(True, False, not hub.db.is_sqlite),
                                      {**lease, "b_id": todo_id}),
        "complete": _prepared_plan(hub, complete_statement("token"),
                                   {"b_id": todo_id, "b_agent": agent_id, "b_projects": projects, "b_result": None,
                                    "b_now": now, "b_token": token}),
        "ring claim, one id": _prepared_plan(hub, _RING_CLAIM, ring_claim_params([todo_id], now)),
        "ring claim, 50 ids": _prepared_plan(hub, _RING_CLAIM, ring_claim_params([todo_id] * 50, now)),
    }
    if not hub.db.is_sqlite:
        plans["claim next, one statement"] = _prepared_plan(
            hub, pg_claim_recorded(True), {"b_agent": agent_id, "b_token": "t", "b_session": None, "b_secs": 300,
                                           "b_projects": projects, "b_queue": "load", "b_attempt": new_id("att"),
                                           "b_created": now})
        plans["complete, one statement"] = _prepared_plan(
            hub, pg_complete_recorded("token"), {"b_id": todo_id, "b_agent": agent_id, "b_projects": projects,
                                                 "b_result": None, "b_token": token, "b_created": now})
    for name, plan in plans.items():
        print(name, plan, sep="\n")
        _by_primary_key(hub, plan)


def test_a_claim_over_several_projects_reads_the_pending_index(hub: Hub) -> None:
    """An agent claiming with no queue over two or more projects: SQLite (no statistics) read
    the pick through ``ix_todos_project_created``, every todo of those projects in any state (25
    ms a claim with 50,000 todos); with the assignee in ``ix_todos_claim_any`` it reads that
    index alone (migration 0020). PostgreSQL plans it from its statistics, by cost (it chose the
    pending index with stale and fresh ones alike)."""
    if not hub.db.is_sqlite:
        pytest.skip("PostgreSQL plans this pick from its statistics, by cost")
    agent_id, _, project_id = agent_of(hub)
    fill(hub, project_id, 200)
    projects = [project_id]
    now = utcnow()
    params = {"b_agent": agent_id, "b_token": "t", "b_session": None, "b_now": now,
              "b_expires": now + timedelta(seconds=300)}
    for many in ([*projects, "prj_other"], [*projects, "prj_other", "prj_third", "prj_fourth"]):
        plan = _prepared_plan(hub, claim_statement(False, False, not hub.db.is_sqlite), {**params, "b_projects": many})
        print(plan)
        assert "ix_todos_claim_any" in plan, plan
        assert "ix_todos_project_created" not in plan, plan


def test_what_waits_for_an_attaching_agent_is_read_through_its_indexes(hub: Hub) -> None:
    """``waiting_for`` (each stream attach): as one ``OR`` of assigned and unassigned work, SQLite
    read every pending todo of every project (17 ms with 20,000 pending elsewhere); now the
    assigned half reads ``ix_todos_assigned`` (migration 0021), the unassigned half
    ``ix_todos_claim_any`` by project. SQLite, with no statistics, as in production."""
    if not hub.db.is_sqlite:
        pytest.skip("PostgreSQL plans these reads from its statistics, by cost")
    agent_id, _, project_id = agent_of(hub)
    fill(hub, project_id, 200)
    seen: list[tuple[str, Any]] = []

    def capture(_conn: Any, _cursor: Any, statement: str, parameters: Any, *_: Any) -> None:
        if "FROM todos" in statement:
            seen.append((statement, parameters))

    event.listen(hub.db.engine, "before_cursor_execute", capture)
    try:
        with hub.db.write() as s:
            oldest, count = wakes.waiting_for(s, agent_id)
    finally:
        event.remove(hub.db.engine, "before_cursor_execute", capture)
    assert oldest is not None and count == 200
    plans = [_plan(hub, sql, parameters) for sql, parameters in seen]
    print(*plans, sep="\n")
    assert len(plans) == 5, plans  # the two firsts, the todo, the two counts
    assert all("ix_todos_assigned (assigned_agent_id=?)" in plans[i] for i in (0, 3)), plans
    assert all("ix_todos_claim_any (project_id=?)" in plans[i] for i in (1, 4)), plans
    assert not [plan for plan in plans if re.search(r"\bSCAN todos\b", plan)], plans


def test_the_orm_lease_updates_find_the_todo_by_its_primary_key(hub: Hub) -> None:
    """Heartbeat, fail and release (``_transition``), the reaper's expiry and its retry."""
    agent_id, grants, _, held = _stale_queue(hub)
    seen: list[tuple[str, Any]] = []

    def capture(_conn: Any, _cursor: Any, statement: str, parameters: Any, *_: Any) -> None:
        if statement.lstrip().upper().startswith("UPDATE TODOS"):
            seen.append((statement, parameters))

    event.listen(hub.db.engine, "before_cursor_execute", capture)
    try:
        for op, entry in ((leases.heartbeat, held[0]), (leases.fail, held[1]), (leases.release, held[2])):
            with hub.db.write() as s:
                op(s, hub.clock, agent_id, grants, todo_id=entry["todo"]["id"], lease_token=entry["lease_token"])
        past = utcnow() - timedelta(hours=1)
        with hub.db.write() as s:  # one lease expired, the failed todo due for its retry
            s.execute(update(Todo).where(Todo.id == held[3]["todo"]["id"]).values(lease_expires_at=past))
            s.execute(update(Todo).where(Todo.id == held[1]["todo"]["id"]).values(next_retry_at=past))
        del seen[-2:]
        with hub.db.write() as s:
            counts, _ = leases.reap(s, hub.clock)
        assert counts["expired"] == 1 and counts["retried"] == 1, counts
    finally:
        event.remove(hub.db.engine, "before_cursor_execute", capture)
    assert len(seen) == 5, [sql for sql, _ in seen]
    for sql, parameters in seen:
        plan = _plan(hub, sql, parameters)
        print(sql, plan, sep="\n")
        _by_primary_key(hub, plan)


LIMIT_PARAMETER = re.compile(r"\bLIMIT\s+(\?|%\(|\$\d|__\[)", re.IGNORECASE)


def test_postgresql_keeps_one_plan_for_the_claim(hub: Hub) -> None:
    """psycopg prepares a statement on the server from its fifth run; PostgreSQL then uses a plan
    made for any values (generic) unless its estimate is above the plans made for the values
    given (custom). With the pick's ``LIMIT 1`` a parameter, the generic plan cannot know the
    limit and assumes a tenth of the pending todos are read: from about 2,000 pending todos on
    it was costed above the custom plans (411 against 9.6 at 10,000), so every claim was planned
    again, a fifth of the server's time per claim (issue 11). Here: 0 generic and 25 custom plans
    before the fix."""
    if hub.db.is_sqlite:
        pytest.skip("PostgreSQL's plan cache; SQLite compiles a statement once per connection")
    agent_id, grants, project_id = _analysed_queue(hub, 10_000)
    one = leases.one_statement(True, hub.clock)
    runs = 30
    for _ in range(runs):  # as the claim tool does: a direct write on the one-statement pool
        claimed = direct.run(hub.db, leases.claim, hub.clock, agent_id, grants, project_ids=[project_id],
                             queue="load", is_postgres=True, autocommit=one)
        assert claimed.get("todo"), claimed
    pool = hub.db.autocommit_engine.pool
    assert pool.checkedin() == 1, pool.status()  # the connection checked out below made every claim
    with hub.db.autocommit_engine.connect() as conn:
        rows = conn.exec_driver_sql(
            "SELECT statement, generic_plans, custom_plans FROM pg_prepared_statements").all()
        unprepared = conn.connection.driver_connection.prepare_threshold  # type: ignore[union-attr]
    claims = [(generic, custom) for sql, generic, custom in rows if sql.lstrip().startswith("WITH claimed AS")]
    assert len(claims) == 1, rows
    generic, custom = claims[0]
    # psycopg prepares on the server from the ``prepare_threshold``-th run; PostgreSQL makes 5
    # custom plans before it compares them with the generic one.
    assert custom <= 5 and generic >= runs - unprepared - 5, (generic, custom)


def test_a_constant_limit_is_written_into_the_sql(hub: Hub) -> None:
    """The claim's pick, the reads of the maintenance pass (the reaper's two, the re-ring, the
    inbox expiry, the pending-summary check, the agent-event poll) and the waiting count of an
    attach write their constant limit into the SQL text, so PostgreSQL can keep one plan for
    each once psycopg has prepared it (see above)."""
    agent_id, _, _, _ = _stale_queue(hub)
    pick = claim_statement(False, True, not hub.db.is_sqlite)._for(hub.db.engine.dialect, 1)  # noqa: SLF001
    assert re.search(r"\bLIMIT 1\b", pick.sql), pick.sql
    seen: list[str] = []

    def capture(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        seen.append(statement)

    engines = hub.db.engines()
    for engine in engines:
        event.listen(engine, "before_cursor_execute", capture)
    try:
        with hub.db.write() as s:
            leases.reap(s, hub.clock)
            wakes.due_rings(s, hub.clock)
            wakes.waiting_for(s, agent_id)
            items.expire_due(s, hub.clock)
        alerts.send_due(hub)
        hub._events_elsewhere()  # noqa: SLF001 - the first pass reads the newest id
        hub._events_elsewhere()  # noqa: SLF001
    finally:
        for engine in engines:
            event.remove(engine, "before_cursor_execute", capture)
    limited = [sql for sql in seen if re.search(r"\bLIMIT\b", sql, re.IGNORECASE)]
    assert len(limited) >= 8, seen
    assert not [sql for sql in limited if LIMIT_PARAMETER.search(sql)], limited


@pytest.mark.parametrize("rows", [0, -1, True, 1.0, "1"])
def test_a_fixed_limit_is_a_positive_int(rows: Any) -> None:
    with pytest.raises(ValueError, match="positive int"):
        fixed_limit(rows)
