"""PostgreSQL round trips on the claim path (issue 11): ``Database.write(autocommit=True)`` runs a
one-statement claim or complete without BEGIN and COMMIT, lease operations that write several
statements refuse such a session, and the pool pings only connections idle past
``db.PING_IDLE_SECONDS`` (instead of every checkout) yet still replaces a dead one unseen."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
import sqlalchemy as sa
from sqlalchemy import select

from switchboard import db
from switchboard.errors import DependencyUnavailable
from switchboard.feed import bell
from switchboard.hub import Hub
from switchboard.models import Agent, Attempt, FeedEvent, Todo
from switchboard.queue import leases
from switchboard.queue.todos import create
from tests.conftest import wait_for
from tests.queue.conftest import agent_of, configured_hub, new_todo, settings_for


@pytest.fixture
def pg_hub(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Hub]:
    """A configured hub on PostgreSQL with the system clock (claims and completes are one statement)."""
    with configured_hub(settings_for(request, tmp_path, "postgresql")) as h:
        yield h


def _psycopg_url(hub: Hub) -> str:
    return sa.engine.make_url(hub.settings.database_url).set(drivername="postgresql").render_as_string(
        hide_password=False)


def test_one_statement_only_where_a_claim_is_one_statement(pg_hub: Hub) -> None:
    assert leases.one_statement(True, pg_hub.clock)
    assert not leases.one_statement(True, pg_hub.clock, by_id=True)  # attempt and event written apart
    assert not leases.one_statement(False, pg_hub.clock)  # SQLite: BEGIN IMMEDIATE is the writer lock


def test_claim_and_complete_in_autocommit_write_everything_and_ring_the_bell(
        pg_hub: Hub, monkeypatch: pytest.MonkeyPatch) -> None:
    hub = pg_hub
    agent_id, grants, project_id = agent_of(hub)
    todo_id = new_todo(hub, project_id)
    rings: list[int] = []
    monkeypatch.setattr(bell.BELL, "forward", lambda: rings.append(1))
    with hub.db.write(autocommit=True) as s:
        claimed = leases.claim(s, hub.clock, agent_id, grants, project="acme", queue="q", is_postgres=True)
        # No BEGIN: the claim is visible to another connection before this session ends.
        with psycopg.connect(_psycopg_url(hub)) as other:
            state = other.execute("SELECT state FROM todos WHERE id = %s", (todo_id,)).fetchone()
        assert state == ("claimed",)
    assert rings == [1]
    with hub.db.write(autocommit=True) as s:
        done = leases.complete(s, hub.clock, agent_id, grants, todo_id=todo_id, result={"ok": 1},
                               lease_token=claimed["lease_token"])
    assert done["state"] == "done" and rings == [1, 1]
    with hub.db.read() as s:
        attempt = s.execute(select(Attempt).where(Attempt.todo_id == todo_id)).scalars().one()
        kinds = s.execute(select(FeedEvent.kind).where(FeedEvent.subject_id == todo_id)
                          .order_by(FeedEvent.id)).scalars().all()  # type: ignore[arg-type]
        todo = s.get(Todo, todo_id)
    assert attempt.outcome == "completed" and attempt.ended_at is not None
    assert kinds == ["todo.created", "todo.claimed", "todo.completed"]
    assert todo is not None and todo.result == {"ok": 1}


def test_a_complete_refused_in_autocommit_still_says_why(pg_hub: Hub) -> None:
    hub = pg_hub
    agent_id, grants, project_id = agent_of(hub)
    todo_id = new_todo(hub, project_id)
    with hub.db.write(autocommit=True) as s:
        leases.claim(s, hub.clock, agent_id, grants, project="acme", queue="q", is_postgres=True)
    with pytest.raises(Exception, match="lease token is stale"), hub.db.write(autocommit=True) as s:
        leases.complete(s, hub.clock, agent_id, grants, todo_id=todo_id, lease_token="not-the-token")


@pytest.mark.parametrize("operation", ["claim_by_id", "fail", "release", "heartbeat"])
def test_multi_statement_lease_operations_refuse_autocommit(pg_hub: Hub, operation: str) -> None:
    hub = pg_hub
    agent_id, grants, project_id = agent_of(hub)
    todo_id = new_todo(hub, project_id)
    if operation != "claim_by_id":
        with hub.db.write() as s:
            token = leases.claim(s, hub.clock, agent_id, grants, todo_id=todo_id)["lease_token"]
    with pytest.raises(RuntimeError, match="several statements"), hub.db.write(autocommit=True) as s:
        if operation == "claim_by_id":
            leases.claim(s, hub.clock, agent_id, grants, todo_id=todo_id)
        else:
            getattr(leases, operation)(s, hub.clock, agent_id, grants, todo_id=todo_id, lease_token=token)
    with hub.db.read() as s:
        todo = s.get(Todo, todo_id)
        attempts = s.execute(select(sa.func.count()).select_from(Attempt)).scalar_one()
    assert todo is not None
    assert (todo.state, attempts) == (("pending", 0) if operation == "claim_by_id" else ("claimed", 1))


def _kill_other_backends(hub: Hub) -> int:
    database = sa.engine.make_url(hub.settings.database_url).database
    with psycopg.connect(_psycopg_url(hub), autocommit=True) as admin_conn:
        rows = admin_conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()",
            (database,)).fetchall()
    return len(rows)


def _pooled_connection_killed(hub: Hub, monkeypatch: pytest.MonkeyPatch, ping_idle_seconds: float) -> None:
    """Leave one connection in the pool, set the ping threshold, then kill its backend (a server
    restart or an idle timeout)."""
    with hub.db.write() as s:
        s.execute(sa.text("SELECT 1"))
    monkeypatch.setattr(db, "PING_IDLE_SECONDS", ping_idle_seconds)
    assert _kill_other_backends(hub) >= 1


def test_a_connection_idle_past_the_ping_interval_is_replaced_unseen(
        pg_hub: Hub, monkeypatch: pytest.MonkeyPatch) -> None:
    _pooled_connection_killed(pg_hub, monkeypatch, 0.0)
    with pg_hub.db.write() as s:
        assert s.execute(sa.text("SELECT 1")).scalar_one() == 1


def test_a_connection_used_within_the_ping_interval_is_not_pinged(
        pg_hub: Hub, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    _pooled_connection_killed(pg_hub, monkeypatch, 3600.0)
    monkeypatch.setattr(db, "_failure_logged", [0.0])
    # Not pinged: the dead connection fails its statement with a 503, and the pool is invalidated.
    with pytest.raises(DependencyUnavailable) as failed, pg_hub.db.write() as s:
        s.execute(sa.text("SELECT 1"))
    # What callers see names no host or port (a review found the database's address in the 503s
    # sent to webhook senders); the driver's own words are in the log.
    url = sa.engine.make_url(pg_hub.settings.database_url)
    assert failed.value.message == "the database is unavailable; retry later"
    assert "the database failed: " in caplog.text
    assert str(url.port) not in failed.value.message and str(url.host) not in failed.value.message
    with pg_hub.db.write() as s:
        assert s.execute(sa.text("SELECT 1")).scalar_one() == 1

def test_a_prepared_statement_on_a_dead_connection_fails_once_and_the_pool_recovers(
        pg_hub: Hub, monkeypatch: pytest.MonkeyPatch) -> None:
    # A review of the prepared statements: they run on the driver's cursor, outside SQLAlchemy's
    # execution and its disconnect handling. The dead connection fails its statement with the
    # same 503 as an ORM statement, the pool is invalidated, and the next write works.
    from switchboard.models.stamps import read_stamp

    _pooled_connection_killed(pg_hub, monkeypatch, 3600.0)
    with pytest.raises(DependencyUnavailable), pg_hub.db.write() as s:
        read_stamp(s.connection())
    with pg_hub.db.write() as s:
        assert read_stamp(s.connection()) >= 0


def test_a_write_after_an_autocommit_write_is_one_transaction_again(pg_hub: Hub) -> None:
    # Review of 0aa79ae: the pooled connection goes back without its AUTOCOMMIT, so a plain
    # write that fails rolls back every statement it ran.
    hub = pg_hub
    with hub.db.write(autocommit=True) as s:
        s.execute(sa.text("SELECT 1"))
    with pytest.raises(ZeroDivisionError), hub.db.write() as s:
        s.execute(sa.text("CREATE TABLE review_probe (x int)"))
        s.execute(sa.text("INSERT INTO review_probe VALUES (1)"))
        1 / 0  # noqa: B018
    with hub.db.read() as s:
        assert s.execute(sa.text("SELECT to_regclass('review_probe')")).scalar_one() is None


def _backends(hub: Hub) -> int:
    database = sa.engine.make_url(hub.settings.database_url).database
    with psycopg.connect(_psycopg_url(hub), autocommit=True) as admin_conn:
        return int(admin_conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()",
            (database,)).fetchone()[0])


def test_an_autocommit_connection_idle_past_the_ping_interval_is_replaced_unseen(
        pg_hub: Hub, monkeypatch: pytest.MonkeyPatch) -> None:
    # The autocommit writes have a pool of their own (connections opened in autocommit, not
    # switched on every checkout): it pings and replaces dead connections as the other one does.
    hub = pg_hub
    agent_id, grants, project_id = agent_of(hub)
    todo_id = new_todo(hub, project_id)
    with hub.db.write(autocommit=True) as s:
        s.execute(sa.text("SELECT 1"))
    monkeypatch.setattr(db, "PING_IDLE_SECONDS", 0.0)
    assert _kill_other_backends(hub) >= 1
    with hub.db.write(autocommit=True) as s:
        claimed = leases.claim(s, hub.clock, agent_id, grants, project="acme", queue="q", is_postgres=True)
    assert claimed["todo"]["id"] == todo_id


def test_an_autocommit_write_keeps_each_statement_however_often_its_connection_is_reused(pg_hub: Hub) -> None:
    # Its connections stay in autocommit through checkin and checkout: a write that fails after
    # its one statement keeps that statement, the third time as the first.
    hub = pg_hub
    with hub.db.write() as s:
        s.execute(sa.text("CREATE TABLE autocommit_probe (x int)"))
    for i in range(3):
        with hub.db.write() as s:  # the transactional pool, in between
            s.execute(sa.text("SELECT 1"))
        with pytest.raises(ZeroDivisionError), hub.db.write(autocommit=True) as s:
            s.execute(sa.text("INSERT INTO autocommit_probe VALUES (:x)"), {"x": i})
            1 / 0  # noqa: B018
    with hub.db.read() as s:
        assert s.execute(sa.text("SELECT x FROM autocommit_probe ORDER BY x")).scalars().all() == [0, 1, 2]


def test_closing_the_hub_closes_the_connections_of_both_pools(tmp_path: Path, request: pytest.FixtureRequest) -> None:
    with configured_hub(settings_for(request, tmp_path, "postgresql")) as hub:
        with hub.db.write() as s, hub.db.write(autocommit=True) as s2:
            s.execute(sa.text("SELECT 1"))
            s2.execute(sa.text("SELECT 1"))
        assert _backends(hub) >= 2
    assert _backends(hub) == 0


def _caller(hub: Hub) -> Any:
    from switchboard.mcp_server.specs import Caller

    with hub.db.read() as s:
        agent = s.execute(select(Agent)).scalars().one()
        return Caller(agent.id, agent.name, agent.human_id, session_key="sk1")


def test_a_claim_that_finds_the_pool_exhausted_is_a_retryable_dependency_error(
        pg_hub: Hub, monkeypatch: pytest.MonkeyPatch) -> None:
    # Review: ten completes blocked on row locks held all 4 + 6 autocommit connections, and the
    # next claim waited out the pool's timeout and came back "internal, not retryable"
    # (SQLAlchemy's TimeoutError was not translated, in either pool).
    from switchboard.mcp_server.calls import call_tool

    hub = pg_hub
    caller = _caller(hub)
    _agent_id, _grants, project_id = agent_of(hub)
    held = [new_todo(hub, project_id) for _ in range(db.AUTOCOMMIT_POOL_SIZE + db.AUTOCOMMIT_POOL_OVERFLOW)]
    with hub.db.write() as s:
        create(s, hub.clock, project_id=project_id, queue="other", kind="task", title="t", payload=None)
    tokens = {tid: call_tool(hub, caller, "todo_claim", {"todo_id": tid}, with_trailer=False)
              ["structuredContent"]["lease_token"] for tid in held}
    monkeypatch.setattr(hub.db.autocommit_engine.pool, "_timeout", 0.5)
    locker = psycopg.connect(_psycopg_url(hub))  # a long transaction holds the ten todos' rows
    locker.execute("SELECT id FROM todos WHERE id = ANY(%s) FOR UPDATE", (held,))
    completes = [threading.Thread(target=call_tool, args=(
        hub, caller, "todo_complete", {"todo_id": tid, "lease_token": tokens[tid]}), kwargs={"with_trailer": False})
        for tid in held]
    try:
        for t in completes:
            t.start()
        wait_for(lambda: hub.db.autocommit_engine.pool.checkedout() == len(held), timeout=10)
        result = call_tool(hub, caller, "todo_claim", {"project": "acme", "queue": "other"}, with_trailer=False)
    finally:
        locker.rollback()
        locker.close()
        for t in completes:
            t.join(timeout=30)
    assert result["isError"], result
    error = result["structuredContent"]
    assert error["retryable"] is True and "pool is exhausted" in error["message"]
    again = call_tool(hub, caller, "todo_claim", {"project": "acme", "queue": "other"}, with_trailer=False)
    assert not again["isError"] and again["structuredContent"]["todo"]["queue"] == "other"


def test_after_a_server_restart_one_request_fails_not_one_per_pool(pg_hub: Hub) -> None:
    # Review: both pools used less than a second before the backends die; the first write on
    # the transactional pool fails (it was not pinged), and the autocommit pool, which learnt
    # of the disconnect from it, pings its connection instead of failing a claim as well.
    hub = pg_hub
    agent_id, grants, project_id = agent_of(hub)
    new_todo(hub, project_id)
    with hub.db.write() as s:
        s.execute(sa.text("SELECT 1"))
    with hub.db.write(autocommit=True) as s:
        s.execute(sa.text("SELECT 1"))
    assert _kill_other_backends(hub) >= 2
    with pytest.raises(DependencyUnavailable), hub.db.write() as s:
        s.execute(sa.text("SELECT 1"))
    with hub.db.write(autocommit=True) as s:
        claimed = leases.claim(s, hub.clock, agent_id, grants, project="acme", queue="q", is_postgres=True)
    assert claimed["todo"]["queue"] == "q"


def test_every_engine_of_the_database_carries_the_vault_key_ring(pg_hub: Hub) -> None:
    # Review: the autocommit engine has a dialect of its own, and the ring was put only on the
    # others, so a sealed column read or written in an autocommit write would have failed.
    from switchboard.sealing.columns import dialect_ring

    engines = pg_hub.db.engines()
    assert len(engines) == 2 and pg_hub.db.autocommit_engine in engines
    assert all(dialect_ring(e.dialect) is not None for e in engines)
