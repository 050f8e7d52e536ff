"""A re-ring pass (:func:`switchboard.notify.wakes.due_rings`) over a backlog of pending todos,
on SQLite and PostgreSQL (issue 11): it runs in the maintenance write transaction, so its
statements are SQLite's one write lock held. With 40,000 pending todos its 200 ORM updates and
600 reads held it 150-300 ms every 2 s, and every acknowledgement waited meanwhile (after a
45,000-delivery burst the next deliveries' ack p99 was 236 ms)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event, select

from switchboard import admin
from switchboard.clock import FixedClock
from switchboard.config import Settings
from switchboard.hub import Hub
from switchboard.models import Todo
from switchboard.notify import sessions
from switchboard.notify.wakes import due_rings, rings_due
from switchboard.queue import todos
from tests.conftest import configure
from tests.services import fresh_postgres_database

T0 = datetime(2026, 12, 2, 9, 0, tzinfo=UTC)


@pytest.fixture(params=["sqlite", "postgresql"])
def hub(request: pytest.FixtureRequest, tmp_path: Path) -> Hub:
    if request.param == "sqlite":
        settings = Settings(home=tmp_path)
    else:
        settings = Settings(home=tmp_path, database_url=fresh_postgres_database(request.getfixturevalue("postgres_url")))
    configure(settings)
    h = Hub(settings, clock=FixedClock(T0), role="cli")
    yield h
    h.close()


def _backlog(hub: Hub, project: str, n: int, rung: datetime | None) -> list[str]:
    with hub.db.write() as s:
        pid = admin.project_by_name(s, project).id
        ids = []
        for i in range(n):
            todo, _ = todos.create(s, hub.clock, project_id=pid, queue="reviews", kind="manual",
                                   title=f"{project} {i}", payload=None)
            todo.rung_at, todo.ring_count = rung, 0 if rung is None else 1
            ids.append(todo.id)
        return ids


def _rings(hub: Hub, ids: list[str]) -> dict[str, tuple[datetime | None, int]]:
    with hub.db.read() as s:
        rows = s.execute(select(Todo).where(Todo.id.in_(ids))).scalars()  # type: ignore[attr-defined]
        return {t.id: (t.rung_at, t.ring_count) for t in rows}


def test_a_pass_rings_each_due_todo_once_with_the_right_recipients_per_project(hub: Hub) -> None:
    with hub.db.write() as s:
        admin.add_project(s, "beta")
        admin.add_agent(s, "beta-bot", "alice")
        admin.grant(s, "beta-bot", "beta", "work")
        claude = admin.agent_by_name(s, "claude1").id
        sessions.attach(s, hub.clock, claude, "ses_a", "stm_a")
    never = _backlog(hub, "acme", 30, None)  # never rung (made elsewhere)
    due = _backlog(hub, "acme", 30, T0 - timedelta(seconds=31))  # rung once, due again
    other = _backlog(hub, "beta", 20, T0 - timedelta(seconds=31))
    not_yet = _backlog(hub, "acme", 5, T0 - timedelta(seconds=5))
    with hub.db.write() as s:
        wakes = due_rings(s, hub.clock)
    assert wakes.todos == 80
    rings = _rings(hub, never + due + other + not_yet)
    assert all(rings[t] == (T0, 1) for t in never)
    assert all(rings[t] == (T0, 2) for t in [*due, *other])
    assert all(rings[t] == (T0 - timedelta(seconds=5), 1) for t in not_yet)
    # One wake for claude1's live session (acme), naming the 60 waiting and the oldest; beta's
    # agent has no live session: its todos are rung (counted) and wait for a pull.
    assert len(wakes) == 1 and wakes[0].session_id == "ses_a" and wakes[0].waiting == 60
    assert wakes[0].project == "acme" and wakes[0].agent_ids == [claude]
    with hub.db.write() as s:
        assert due_rings(s, hub.clock).todos == 0  # each todo once per ring


@pytest.fixture
def sqlite_hub(tmp_path: Path) -> Hub:
    settings = Settings(home=tmp_path)
    configure(settings)
    h = Hub(settings, clock=FixedClock(T0), role="cli")
    yield h
    h.close()


def test_a_pass_over_a_backlog_claims_its_todos_in_one_statement_per_50(sqlite_hub: Hub) -> None:
    """A prepared UPDATE per todo still held the write lock 37-93 ms a pass under ingest load
    (its statements share serve's interpreter lock with the event loop), and every processing
    batch and acknowledgement behind it waited (issue 11, a 60 s burst at 15 % of the bare route)."""
    hub = sqlite_hub  # statements counted with SQLite's trace callback
    _backlog(hub, "acme", 120, T0 - timedelta(seconds=31))
    statements: list[str] = []
    with hub.db.write() as s:
        raw = s.connection().connection.dbapi_connection
        raw.set_trace_callback(statements.append)
        try:
            wakes = due_rings(s, hub.clock)
        finally:
            raw.set_trace_callback(None)
    assert wakes.todos == 120
    updates = [q for q in statements if q.lstrip().upper().startswith("UPDATE TODOS")]
    assert len(updates) == 3  # 50 + 50 + 20
    # The candidates, the project's recipients and source once, not three reads per todo.
    assert len(statements) - len(updates) <= 10, statements[:20]


def test_two_passes_racing_ring_each_todo_once(hub: Hub) -> None:
    """The claim re-checks the backoff in its UPDATE: a pass whose candidates another pass rang
    meanwhile (another ``serve``, or a worker, on the same database) claims none of them, and
    one that waited for the other's row locks (PostgreSQL) or write lock (SQLite) too."""
    import threading

    from switchboard.notify.wakes import _RING_CLAIM, ring_claim_params

    ids = _backlog(hub, "acme", 10, T0 - timedelta(seconds=31)) + _backlog(hub, "acme", 5, None)
    waiting = _backlog(hub, "acme", 3, T0 - timedelta(seconds=10))  # inside their backoff: never claimed
    first = hub.db.write()
    s = first.__enter__()
    try:
        assert {r["id"] for r in _RING_CLAIM.run(s, ring_claim_params(ids + waiting, T0))} == set(ids)
        late: list[list[dict[str, Any]]] = []

        def second_pass() -> None:
            with hub.db.write() as s2:
                late.append(_RING_CLAIM.run(s2, ring_claim_params(ids + waiting, T0 + timedelta(seconds=1))))

        racer = threading.Thread(target=second_pass)
        racer.start()
        racer.join(0.5)
        assert racer.is_alive()  # waiting for the first pass
    finally:
        first.__exit__(None, None, None)
    racer.join(30)
    assert late == [[]]
    assert set(_rings(hub, ids).values()) == {(T0, 1), (T0, 2)}
    assert set(_rings(hub, waiting).values()) == {(T0 - timedelta(seconds=10), 1)}


def test_a_claim_pads_its_ids_to_one_statement_text(hub: Hub) -> None:
    """One SQL text for every chunk length: psycopg keeps 100 prepared statements a connection,
    and 50 variants of this one would push out the claims' and completes' (a review)."""
    from switchboard.notify.wakes import _CLAIM_CHUNK, _RING_CLAIM, ring_claim_params

    ids = _backlog(hub, "acme", 3, None)
    params = ring_claim_params(ids, T0)
    assert len(params["b_ids"]) == _CLAIM_CHUNK and set(params["b_ids"]) == set(ids)
    with hub.db.write() as s:
        assert sorted(r["id"] for r in _RING_CLAIM.run(s, params)) == sorted(ids)  # each row once
    assert set(_rings(hub, ids).values()) == {(T0, 1)}


def test_a_todo_reassigned_after_the_candidates_were_read_is_rung_to_its_new_assignee(hub: Hub) -> None:
    """The pass reads its candidates before its write transaction (issue 11). A breaker
    reassigned a todo in between (``switchboard todo assign``: rung afresh on the next pass): the
    wake went to the old recipients, and the new assignee's first ring was spent on it."""
    from switchboard.models import AgentSession
    from switchboard.notify.wakes import ring_candidates

    with hub.db.write() as s:
        admin.add_agent(s, "claude2", "alice")
        admin.grant(s, "claude2", "acme", "work")
        claude1, claude2 = admin.agent_by_name(s, "claude1").id, admin.agent_by_name(s, "claude2").id
        sessions.attach(s, hub.clock, claude1, "ses_1", "stm_1")
        sessions.attach(s, hub.clock, claude2, "ses_2", "stm_2")
    [todo_id] = _backlog(hub, "acme", 1, T0 - timedelta(seconds=200))  # rung once, due again
    with hub.db.read() as s:
        stale = ring_candidates(s, hub.clock)
    assert [t.id for t in stale] == [todo_id] and stale[0].assigned_agent_id is None
    with hub.db.write() as s:  # reassigned, as the CLI, the web UI and REST do
        todos.assign(s, hub.clock, todo_id, claude2)
        # Woken 5 s ago: a session holding only re-rings would get no wake; a first ring goes.
        s.get(AgentSession, "ses_2").last_woken_at = T0 - timedelta(seconds=5)
    with hub.db.write() as s:
        wakes = due_rings(s, hub.clock, candidates=stale)
    assert [(w.agent_id, w.session_id, w.agent_ids) for w in wakes] == [(claude2, "ses_2", [claude2])]
    assert _rings(hub, [todo_id]) == {todo_id: (T0, 1)}


def test_an_assignment_racing_a_pass_still_rings_the_new_assignee(hub: Hub) -> None:
    """A review: ``todos.assign`` read a never-rung todo, a pass rang it to the project's agents
    and committed, then the assignment's reset of ``rung_at`` and ``ring_count`` (equal to what
    it had read) was left out of its UPDATE, and the new assignee's first ring was lost. On
    SQLite the pass cannot commit in between (one writer); on PostgreSQL it can."""
    if hub.db.is_sqlite:
        pytest.skip("one writer: a pass cannot commit between the assignment's read and its write")
    with hub.db.write() as s:
        admin.add_agent(s, "claude2", "alice")
        admin.grant(s, "claude2", "acme", "work")
        claude2 = admin.agent_by_name(s, "claude2").id
    [todo_id] = _backlog(hub, "acme", 1, None)
    with hub.db.write() as assigning:
        assert assigning.get(Todo, todo_id).ring_count == 0  # read before the pass
        with hub.db.write() as s:
            assert due_rings(s, hub.clock).todos == 1
        todos.assign(assigning, hub.clock, todo_id, claude2)
    assert _rings(hub, [todo_id]) == {todo_id: (None, 0)}  # rung afresh on the next pass


def test_a_pass_reads_no_payloads(hub: Hub) -> None:
    # Issue 11: the pass runs in the maintenance write transaction; reading and parsing 200 todos'
    # payloads (kilobytes of JSON each) there was about a third of its time (12.5 against 20 ms
    # per 200 re-rings of 5 KB payloads, a /tmp loop alternated twice).
    _backlog(hub, "acme", 5, T0 - timedelta(seconds=31))
    statements: list[str] = []

    def seen(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        statements.append(statement)

    event.listen(hub.db.engine, "before_cursor_execute", seen)
    try:
        with hub.db.write() as s:
            assert due_rings(s, hub.clock).todos == 5
    finally:
        event.remove(hub.db.engine, "before_cursor_execute", seen)
    reads = [st for st in statements if "FROM todos" in st]
    assert reads and not any("payload" in st or "todos.result" in st for st in reads)


def _set_rings(hub: Hub, ids: list[str], rung: datetime | None, count: int) -> None:
    with hub.db.write() as s:
        for todo in s.execute(select(Todo).where(Todo.id.in_(ids))).scalars():  # type: ignore[attr-defined]
            todo.rung_at, todo.ring_count = rung, count


def test_todos_waiting_out_their_backoff_do_not_hide_the_due_ones(hub: Hub) -> None:
    # A pass read the 200 oldest-rung candidates rung at least 30 s ago and skipped those not
    # yet due: 250 todos rung 100 s ago for the third time (due again at 120 s) filled the
    # window, so a todo due its second ring waited until they were due, and on PostgreSQL
    # (NULLs sort last) a todo reassigned by a human (never rung, "rung on the next pass")
    # waited as well.
    waiting = _backlog(hub, "acme", 250, None)
    _set_rings(hub, waiting, T0 - timedelta(seconds=100), 3)
    due = _backlog(hub, "acme", 1, None)
    _set_rings(hub, due, T0 - timedelta(seconds=40), 1)
    reassigned = _backlog(hub, "acme", 1, None)
    exhausted = _backlog(hub, "acme", 1, None)
    _set_rings(hub, exhausted, T0 - timedelta(days=1), 8)  # MAX_RINGS: never again
    with hub.db.read() as s:
        assert rings_due(s, hub.clock)
    with hub.db.write() as s:
        wakes = due_rings(s, hub.clock)
    assert wakes.todos == 2
    rings = _rings(hub, waiting + due + reassigned + exhausted)
    assert rings[due[0]] == (T0, 2) and rings[reassigned[0]] == (T0, 1)
    assert all(rings[t] == (T0 - timedelta(seconds=100), 3) for t in waiting)
    assert rings[exhausted[0]] == (T0 - timedelta(days=1), 8)
    with hub.db.read() as s:  # nothing left due: the next pass takes no write lock
        assert not rings_due(s, hub.clock)


def test_a_pass_rings_never_rung_todos_before_a_backlog_of_due_ones(hub: Hub) -> None:
    # 300 todos due a re-ring and one never rung: the pass rings 200, the never-rung one among
    # them on both databases (NULLs sort last on PostgreSQL, first on SQLite).
    backlog = _backlog(hub, "acme", 300, T0 - timedelta(seconds=31))
    reassigned = _backlog(hub, "acme", 1, None)
    with hub.db.write() as s:
        wakes = due_rings(s, hub.clock)
    assert wakes.todos == 200
    rings = _rings(hub, backlog + reassigned)
    assert rings[reassigned[0]] == (T0, 1)
    assert sum(rings[t] == (T0, 2) for t in backlog) == 199


def test_the_backoff_is_read_from_the_ring_index_alone(sqlite_hub: Hub) -> None:
    # Migration 0018: with rung_at alone in ix_todos_ring, each todo rung more than 30 s ago was
    # fetched from the table for its ring_count (30,000 waiting out their backoff: 8-15 ms per
    # pass on SQLite, 10 ms on PostgreSQL, against 5 and 2 ms). SQLite's program for each of
    # the pass's two reads must take every column it reads from the index, never the table row.
    from switchboard.notify.wakes import _ring_candidates

    with sqlite_hub.db.read() as s:
        conn = s.connection()
        table_root = conn.exec_driver_sql("SELECT rootpage FROM sqlite_master WHERE name = 'todos'").scalar()
        for query in _ring_candidates(select(Todo.ring_count), T0, 1):
            compiled = query.compile(dialect=s.bind.dialect)
            params = tuple(compiled.params[k] for k in compiled.positiontup)
            plan = " ".join(row[-1] for row in conn.exec_driver_sql("EXPLAIN QUERY PLAN " + str(compiled), params))
            assert "ix_todos_ring" in plan, plan
            program = conn.exec_driver_sql("EXPLAIN " + str(compiled), params).all()
            table_cursors = {row[2] for row in program if row[1] == "OpenRead" and row[3] == table_root}
            table_reads = [row for row in program if row[1] == "Column" and row[2] in table_cursors]
            assert table_reads == [], (str(compiled), table_reads)


def _exhaust(hub: Hub, n: int) -> list[str]:
    ids = _backlog(hub, "acme", n, None)
    _set_rings(hub, ids, T0 - timedelta(days=1), 8)  # MAX_RINGS: rung out, still pending
    return ids


def test_todos_rung_out_stay_out_of_the_ring_index(hub: Hub) -> None:
    # Migration 0019: a todo rung MAX_RINGS times stays pending with the oldest rung_at, and in
    # ix_todos_ring (state = 'pending') every backoff read walked past all of them first (40,000:
    # 3.8 ms per idle check on SQLite; on PostgreSQL 275 buffers against 1). The index now holds
    # only the todos still to ring, and every statement that reads it names the same predicate
    # in literals, so PostgreSQL's generic plans (psycopg prepares after five runs) use it too:
    # the pass's two reads, and the UPDATE of a stream attach (which, without it, read the whole
    # table in its write transaction: 20,000 todos, 4.6 against 0.6 ms).
    from switchboard.notify.wakes import _mark_rung, _ring_candidates

    rung_out = _exhaust(hub, 300)
    due = _backlog(hub, "acme", 1, T0 - timedelta(seconds=31))
    with hub.db.read() as s:
        assert rings_due(s, hub.clock)
    with hub.db.write() as s:
        assert due_rings(s, hub.clock).todos == 1
    assert _rings(hub, due)[due[0]] == (T0, 2)
    assert all(r == (T0 - timedelta(days=1), 8) for r in _rings(hub, rung_out).values())
    statements = [*_ring_candidates(select(Todo.ring_count), T0, 1), _mark_rung("ag_x", T0)]
    with hub.db.write() as s:
        conn = s.connection()
        if hub.db.is_sqlite:
            conn.exec_driver_sql("ANALYZE todos")  # sqlite_stat1: an index's first figure is its entries
            stat = conn.exec_driver_sql("SELECT stat FROM sqlite_stat1 WHERE idx = 'ix_todos_ring'").scalar()
            assert stat.split()[0] == "1", stat  # the one just rung, not the 300 rung out
        else:
            conn.exec_driver_sql("SET plan_cache_mode = force_generic_plan")
        for n, statement in enumerate(statements):
            assert "ix_todos_ring" in _plan(conn, statement, f"ring_{n}"), statement
        s.rollback()


def _plan(conn: Any, statement: Any, name: str) -> str:
    """The plan of ``statement`` as text: SQLite's query plan, or PostgreSQL's plan of it
    prepared (``PREPARE``, generic when the caller sets ``plan_cache_mode``)."""
    compiled = statement.compile(dialect=conn.dialect)
    if conn.dialect.name == "sqlite":
        params = tuple(compiled.params[k] for k in compiled.positiontup)
        return " ".join(row[-1] for row in conn.exec_driver_sql("EXPLAIN QUERY PLAN " + str(compiled), params))
    names = list(compiled.params)
    sql = str(compiled)
    for i, key in enumerate(names, 1):
        sql = sql.replace(f"%({key})s", f"${i}")
    conn.exec_driver_sql(f"PREPARE {name} AS {sql}")
    args = ", ".join(_literal(compiled.params[key], conn) for key in names)
    execute = f"EXECUTE {name}" + (f"({args})" if args else "")
    return json.dumps(conn.exec_driver_sql(f"EXPLAIN (FORMAT JSON) {execute}").scalar())


def _literal(value: Any, conn: Any) -> str:
    from sqlalchemy import literal

    return str(literal(value).compile(dialect=conn.dialect, compile_kwargs={"literal_binds": True}))


def test_a_pass_filled_by_never_rung_todos_skips_the_backoff_read(sqlite_hub: Hub) -> None:
    hub = sqlite_hub
    never = _backlog(hub, "acme", 5, None)
    due = _backlog(hub, "acme", 3, T0 - timedelta(seconds=31))
    statements: list[str] = []
    with hub.db.write() as s:
        raw = s.connection().connection.dbapi_connection
        raw.set_trace_callback(statements.append)
        try:
            assert due_rings(s, hub.clock, limit=5).todos == 5
        finally:
            raw.set_trace_callback(None)
    assert not [q for q in statements if "ORDER BY todos.rung_at" in q]
    rings = _rings(hub, never + due)
    assert all(rings[t] == (T0, 1) for t in never) and all(rings[t][1] == 1 for t in due)
