"""A maintenance pass with nothing to do takes no write lock (issue 11), on SQLite and PostgreSQL.

The pass (:meth:`switchboard.hub.Hub.reap`) and the sweep's quarantine expiry ask first, in a
read session, whether anything is due; only then do they open the write transaction. Under
ingest load an idle pass had held SQLite's one write lock 2-11 ms every 2 s (its statements
share ``serve``'s interpreter lock with the event loop), stalling every acknowledgement. Each
kind of due work below still gets its write: the read asks the same conditions as the work.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import insert, select

from switchboard import admin
from switchboard.hub import Hub
from switchboard.inbox import items
from switchboard.models import AgentEvent, AgentSession, InboxItem, Todo
from switchboard.notify import sessions
from switchboard.notify.sessions import EVENT_KEEP_SECONDS, STALE_SESSION_SECONDS
from switchboard.notify.wakes import ring_after_seconds
from switchboard.queue import leases, todos


@pytest.fixture
def writes(hub: Hub, monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Every write transaction opened on the hub's database, by caller (appended as opened)."""
    opened: list[str] = []
    real = hub.db.write

    def counted(*args: Any, **kwargs: Any) -> AbstractContextManager[Any]:
        opened.append("write")
        return real(*args, **kwargs)

    monkeypatch.setattr(hub.db, "write", counted)
    yield opened


def _pass(hub: Hub, writes: list[str]) -> tuple[dict[str, int], int]:
    """One maintenance pass: its counts and how many write transactions it opened."""
    before = len(writes)
    counts = hub.reap()
    return counts, len(writes) - before


def _todo(hub: Hub) -> tuple[str, str, dict[str, str]]:
    with hub.db.write() as s:
        agent = admin.agent_by_name(s, "claude1")
        pid = admin.project_by_name(s, "acme").id
        todo, _ = todos.create(s, hub.clock, project_id=pid, queue="reviews", kind="test", title="t", payload=None)
        return agent.id, todo.id, admin.grants_of(s, agent.id)


def test_an_idle_pass_and_an_idle_sweep_open_no_write_transaction(hub: Hub, writes: list[str]) -> None:
    from switchboard.queue import jobs

    counts, opened = _pass(hub, writes)
    assert opened == 0
    assert (counts["expired"], counts["retried"], counts["rung"], counts["wakes"]) == (0, 0, 0, 0)
    before = len(writes)
    assert jobs.sweep(hub, hub.clock.now()) == 0
    assert len(writes) == before  # no quarantined delivery past its retention: no write either


def test_a_todo_rung_recently_is_not_due_and_takes_no_write(hub: Hub, writes: list[str]) -> None:
    _todo(hub)
    counts, opened = _pass(hub, writes)
    assert (counts["rung"], opened) == (1, 1)  # never rung (made outside the job): rung now
    counts, opened = _pass(hub, writes)
    assert (counts["rung"], opened) == (0, 0)
    hub.clock.advance(ring_after_seconds(1))  # type: ignore[attr-defined]
    counts, opened = _pass(hub, writes)
    assert (counts["rung"], opened) == (1, 1)


def test_an_expired_lease_is_reaped(hub: Hub, writes: list[str]) -> None:
    agent, tid, grants = _todo(hub)
    hub.reap()
    with hub.db.write() as s:
        leases.claim(s, hub.clock, agent, grants, todo_id=tid, lease_seconds=10)
    assert _pass(hub, writes)[1] == 0  # held, not expired
    hub.clock.advance(11)  # type: ignore[attr-defined]
    counts, opened = _pass(hub, writes)
    assert (counts["expired"], opened) == (1, 1)
    with hub.db.read() as s:
        assert s.get(Todo, tid).state == "pending"  # type: ignore[union-attr]


def test_a_due_retry_goes_back_to_the_queue(hub: Hub, writes: list[str]) -> None:
    agent, tid, grants = _todo(hub)
    hub.reap()
    with hub.db.write() as s:
        claimed = leases.claim(s, hub.clock, agent, grants, todo_id=tid)
        leases.fail(s, hub.clock, agent, grants, todo_id=tid, lease_token=claimed["lease_token"])
    assert _pass(hub, writes)[1] == 0  # backing off
    hub.clock.advance(leases.backoff_seconds(1) + 1)  # type: ignore[attr-defined]
    counts, opened = _pass(hub, writes)
    assert (counts["retried"], opened) == (1, 1)


def test_an_inbox_item_past_its_expiry_is_decided(hub: Hub, writes: list[str]) -> None:
    with hub.db.write() as s:
        agent = admin.agent_by_name(s, "claude1")
        item = items.post(s, hub.clock, agent_id=agent.id, grants=admin.grants_of(s, agent.id), kind="question",
                          project="acme", title="Deploy?", expires_in_seconds=60, on_expiry="expire")
    assert _pass(hub, writes)[1] == 0
    hub.clock.advance(61)  # type: ignore[attr-defined]
    counts, opened = _pass(hub, writes)
    assert (counts["inbox_expired"], counts["expired"], opened) == (1, 0, 1)
    with hub.db.read() as s:
        assert s.execute(select(InboxItem.status).where(InboxItem.id == item["id"])).scalar_one() == "expired"


def test_a_stale_session_is_pruned(hub: Hub, writes: list[str]) -> None:
    with hub.db.write() as s:
        sessions.attach(s, hub.clock, admin.agent_by_name(s, "claude1").id, "ses_old", "stm_old")
    assert _pass(hub, writes)[1] == 0
    hub.clock.advance(STALE_SESSION_SECONDS + 1)  # type: ignore[attr-defined]
    assert _pass(hub, writes)[1] == 1
    with hub.db.read() as s:
        assert s.get(AgentSession, "ses_old") is None


def test_an_event_past_its_keep_is_pruned(hub: Hub, writes: list[str]) -> None:
    with hub.db.write() as s:
        agent_id = admin.agent_by_name(s, "claude1").id
        s.execute(insert(AgentEvent).values(agent_id=agent_id, session_id=None, kind="wake", data={},
                                            created_at=hub.clock.now() - timedelta(seconds=EVENT_KEEP_SECONDS + 1)))
    assert _pass(hub, writes)[1] == 1
    with hub.db.read() as s:
        assert s.execute(select(AgentEvent.id)).first() is None
    assert _pass(hub, writes)[1] == 0
