"""Direct writes (:mod:`switchboard.direct`, issue 11): prepared statements in a write transaction
without an ORM session, on SQLite and PostgreSQL. They keep what ``Database.write`` keeps: the
one-writer rule, all-or-nothing, the feed bell after the commit only, and the precise error of
a refused lease operation (asked again in a session)."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select

from switchboard import admin, direct
from switchboard.errors import Conflict
from switchboard.feed import bell
from switchboard.hub import Hub
from switchboard.models import Agent, Attempt, FeedEvent, Todo
from switchboard.queue import leases
from tests.queue.conftest import agent_of, configured_hub, new_todo


@pytest.fixture
def hub(system_clock_hub: Hub) -> Hub:
    return system_clock_hub


def _one(hub: Hub) -> bool:
    return leases.one_statement(not hub.db.is_sqlite, hub.clock)


def _claim(write: Any, hub: Hub, agent_id: str, grants: dict[str, str], **kw: Any) -> dict[str, Any]:
    return leases.claim(write, hub.clock, agent_id, grants, project="acme", queue="q",
                        is_postgres=not hub.db.is_sqlite, **kw)


def test_claim_and_complete_write_the_todo_attempt_and_events_and_ring_the_bell_after_commit(
        hub: Hub, monkeypatch: pytest.MonkeyPatch) -> None:
    agent_id, grants, project_id = agent_of(hub)
    todo_id = new_todo(hub, project_id)
    rings: list[int] = []
    monkeypatch.setattr(bell.BELL, "forward", lambda: rings.append(1))
    with direct.write(hub.db, autocommit=_one(hub)) as w:
        claimed = _claim(w, hub, agent_id, grants)
        assert rings == []  # not before the commit
    assert rings == [1] and claimed["todo"]["id"] == todo_id
    done = direct.run(hub.db, leases.complete, hub.clock, agent_id, grants, todo_id=todo_id, result={"ok": 1},
                      lease_token=claimed["lease_token"], autocommit=_one(hub))
    assert done["state"] == "done" and rings == [1, 1]
    with hub.db.read() as s:
        attempt = s.execute(select(Attempt).where(Attempt.todo_id == todo_id)).scalars().one()
        kinds = s.execute(select(FeedEvent.kind).where(FeedEvent.subject_id == todo_id)
                          .order_by(FeedEvent.id)).scalars().all()  # type: ignore[arg-type]
        todo = s.get(Todo, todo_id)
    assert attempt.outcome == "completed" and attempt.ended_at is not None
    assert kinds == ["todo.created", "todo.claimed", "todo.completed"]
    assert todo is not None and todo.result == {"ok": 1}


def test_an_error_rolls_back_everything_and_rings_nothing(hub: Hub, monkeypatch: pytest.MonkeyPatch) -> None:
    agent_id, grants, project_id = agent_of(hub)
    todo_id = new_todo(hub, project_id)
    rings: list[int] = []
    monkeypatch.setattr(bell.BELL, "forward", lambda: rings.append(1))
    # Three statements in one transaction (SQLite; PostgreSQL with autocommit off).
    with pytest.raises(RuntimeError, match="after the claim"), direct.write(hub.db) as w:
        _claim(w, hub, agent_id, grants)
        raise RuntimeError("after the claim")
    assert rings == []
    with hub.db.read() as s:
        todo = s.get(Todo, todo_id)
        attempts = s.execute(select(func.count()).select_from(Attempt)).scalar_one()
        claimed_events = s.execute(select(func.count()).select_from(FeedEvent)
                                   .where(FeedEvent.kind == "todo.claimed")).scalar_one()
    assert todo is not None and todo.state == "pending" and todo.attempt_count == 0
    assert attempts == 0 and claimed_events == 0
    # The rolled-back claim's feed write is forgotten: a later commit that writes no event rings nothing.
    with direct.write(hub.db) as w:
        assert admin.grants_of(w, agent_id) == grants
    assert rings == []
    # The connection is fine afterwards.
    again = direct.run(hub.db, _claim, hub, agent_id, grants)
    assert again["todo"]["id"] == todo_id and rings == [1]


def test_a_refused_complete_is_asked_again_in_a_session_and_says_why(hub: Hub) -> None:
    agent_id, grants, project_id = agent_of(hub)
    todo_id = new_todo(hub, project_id)
    direct.run(hub.db, _claim, hub, agent_id, grants, autocommit=_one(hub))
    with pytest.raises(Conflict, match="lease token is stale"):
        direct.run(hub.db, leases.complete, hub.clock, agent_id, grants, todo_id=todo_id,
                   lease_token="not-the-token", autocommit=_one(hub))
    with pytest.raises(direct.SessionNeeded), direct.write(hub.db) as w:
        leases.complete(w, hub.clock, agent_id, grants, todo_id=todo_id, lease_token="not-the-token")


def test_a_claim_by_id_runs_in_a_session(hub: Hub) -> None:
    agent_id, grants, project_id = agent_of(hub)
    todo_id = new_todo(hub, project_id)
    claimed = direct.run(hub.db, leases.claim, hub.clock, agent_id, grants, todo_id=todo_id,
                         is_postgres=not hub.db.is_sqlite, session_key="sk")
    assert claimed["todo"]["id"] == todo_id and claimed["attempt"] == 1
    again = direct.run(hub.db, leases.claim, hub.clock, agent_id, grants, todo_id=todo_id,
                       is_postgres=not hub.db.is_sqlite, session_key="sk")
    assert again["lease_token"] == claimed["lease_token"]  # idempotent, as in a session


def test_direct_and_session_writes_of_one_process_take_turns(hub: Hub) -> None:
    """Threads mixing both kinds of write: every todo claimed once (SQLite: one writer at a time)."""
    agent_id, grants, project_id = agent_of(hub)
    ids = {new_todo(hub, project_id) for _ in range(60)}
    got: list[str] = []
    errors: list[BaseException] = []

    def worker(use_direct: bool) -> None:
        try:
            while True:
                if use_direct:
                    claimed = direct.run(hub.db, _claim, hub, agent_id, grants, autocommit=_one(hub))
                else:
                    with hub.db.write() as s:
                        claimed = _claim(s, hub, agent_id, grants)
                if claimed.get("empty"):
                    return
                got.append(claimed["todo"]["id"])
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(i % 2 == 0,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors, errors
    assert sorted(got) == sorted(ids)


def test_the_tools_claim_and_complete_through_direct_writes(hub: Hub, monkeypatch: pytest.MonkeyPatch) -> None:
    from switchboard.mcp_server.calls import call_tool
    from switchboard.mcp_server.specs import Caller

    agent_id, _grants, project_id = agent_of(hub)
    todo_id = new_todo(hub, project_id)
    with hub.db.read() as s:
        agent = s.get(Agent, agent_id)
        assert agent is not None
        caller = Caller(agent.id, agent.name, agent.human_id, session_key="sk1")
    writes: list[str] = []
    real = direct.write

    def counting(db: Any, autocommit: bool = False) -> Any:
        writes.append("direct")
        return real(db, autocommit)

    monkeypatch.setattr(direct, "write", counting)
    by_id = new_todo(hub, project_id)
    assert not call_tool(hub, caller, "todo_claim", {"todo_id": by_id}, with_trailer=False)["isError"]
    assert writes == []  # a claim by id reads the todo first: a session, not a direct write and then one
    claimed = call_tool(hub, caller, "todo_claim", {"project": "acme"}, with_trailer=False)
    assert not claimed["isError"], claimed
    token = claimed["structuredContent"]["lease_token"]
    stale = call_tool(hub, caller, "todo_complete", {"todo_id": todo_id, "lease_token": "nope"}, with_trailer=False)
    assert stale["isError"] and "stale" in stale["content"][0]["text"]
    done = call_tool(hub, caller, "todo_complete", {"todo_id": todo_id, "lease_token": token}, with_trailer=False)
    assert not done["isError"] and done["structuredContent"]["state"] == "done"
    assert writes == ["direct"] * 3


def test_sqlite_locked_past_the_busy_timeout_is_a_retryable_dependency_error(tmp_path: Path) -> None:
    """Another connection holds SQLite's write lock (not through the writer lock file, as a tool
    outside Switchboard would): BEGIN IMMEDIATE waits out the busy timeout, the caller gets the
    503 of ``Database.write``, and every lock is given back."""
    import sqlite3

    from switchboard.config import Settings
    from switchboard.errors import DependencyUnavailable

    with configured_hub(Settings(home=tmp_path)) as hub:
        agent_id, grants, project_id = agent_of(hub)
        todo_id = new_todo(hub, project_id)
        hub.db.direct_connection().connection.dbapi_connection.execute("PRAGMA busy_timeout=200")
        other = sqlite3.connect(str(hub.settings.sqlite_path), isolation_level=None)
        other.execute("BEGIN IMMEDIATE")
        try:
            with pytest.raises(DependencyUnavailable, match="unavailable"):
                direct.run(hub.db, _claim, hub, agent_id, grants)
        finally:
            other.execute("ROLLBACK")
            other.close()
        assert hub.db.write_lock is not None and not hub.db.write_lock.locked()
        claimed = direct.run(hub.db, _claim, hub, agent_id, grants)
        assert claimed["todo"]["id"] == todo_id


def test_dispose_waits_for_a_direct_write_in_another_thread(tmp_path: Path) -> None:
    """Review: ``dispose`` closed the kept connection under a running direct write, which rolled
    it back half-done; it now waits for the write to finish (SQLite)."""
    from switchboard.config import Settings

    with configured_hub(Settings(home=tmp_path)) as hub:
        agent_id, grants, project_id = agent_of(hub)
        todo_id = new_todo(hub, project_id)
        disposer = threading.Thread(target=hub.db.dispose)
        with direct.write(hub.db) as w:
            claimed = _claim(w, hub, agent_id, grants)
            disposer.start()
            disposer.join(timeout=0.5)
            assert disposer.is_alive()  # waiting for the write
        disposer.join(timeout=10)
        assert not disposer.is_alive()
        with hub.db.read() as s:
            todo = s.get(Todo, todo_id)
            attempts = s.execute(select(func.count()).select_from(Attempt)).scalar_one()
        assert todo is not None and todo.state == "claimed" and todo.lease_token == claimed["lease_token"]
        assert attempts == 1
