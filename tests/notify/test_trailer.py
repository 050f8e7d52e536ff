"""The trailer's ledger rules on SQLite and PostgreSQL: the probe, drain, at-most-once cursors
(compare-and-set), and inbox resolution rung over Redis pub/sub."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from switchboard import admin
from switchboard.config import Settings
from switchboard.db import upgrade
from switchboard.hub import Hub
from switchboard.inbox import items as inbox
from switchboard.notify import cursors, subscriptions, trailer
from switchboard.queue import todos
from tests.conftest import migrate
from tests.services import fresh_postgres_database


@pytest.fixture(params=["sqlite", "postgresql"])
def hub(request: pytest.FixtureRequest, tmp_path: Path) -> Hub:
    if request.param == "sqlite":
        settings = Settings(home=tmp_path)
    else:
        url = request.getfixturevalue("postgres_url")
        settings = Settings(home=tmp_path, database_url=fresh_postgres_database(url))
    migrate(settings)
    h = Hub(settings, role="cli")
    yield h
    h.close()


def _world(hub: Hub) -> tuple[str, str, dict[str, str]]:
    with hub.db.write() as s:
        admin.add_human(s, "alice")
        project = admin.add_project(s, "acme")
        agent = admin.add_agent(s, "a1", "alice")
        admin.grant(s, "a1", "acme", "work")
        return agent.id, project.id, admin.grants_of(s, agent.id)


def test_probe_drain_and_at_most_once(hub: Hub) -> None:
    agent_id, project_id, grants = _world(hub)
    assert trailer.probe_fast(hub.db, agent_id) is False and trailer.collect(hub.db, agent_id) is None
    with hub.db.write() as s:
        sub = subscriptions.subscribe(s, hub.clock, agent_id, grants, ["todo.created"])
        item = inbox.post(s, hub.clock, agent_id=agent_id, grants=grants, kind="approval", project="acme",
                          title="Go?")
    assert trailer.probe_fast(hub.db, agent_id) is False
    with hub.db.write() as s:
        inbox.resolve(s, hub.clock, item["id"], via="cli", human_id=item_human(hub, item["id"]), decision="approve")
        todos.create(s, hub.clock, project_id=project_id, queue="q", kind="manual", title="T", payload=None)
    assert trailer.probe_fast(hub.db, agent_id) is True
    member = trailer.collect(hub.db, agent_id)
    assert member is not None
    assert [(i["source"], i["kind"]) for i in member["pending"]] == [("attention", "approval.decided"),
                                                                     ("subscription", "todo.created")]
    assert trailer.probe_fast(hub.db, agent_id) is False and trailer.collect(hub.db, agent_id) is None
    assert sub["cursor"] == 0


def test_a_lost_cursor_race_delivers_nothing(hub: Hub) -> None:
    agent_id, _, _ = _world(hub)
    with hub.db.write() as s:
        assert cursors.advance(s, agent_id, "attention", "", None, 5)
    with hub.db.write() as s:
        assert not cursors.advance(s, agent_id, "attention", "", None, 6), "the row exists: insert loses"
        assert not cursors.advance(s, agent_id, "attention", "", 4, 6), "stale old position loses"
        assert cursors.advance(s, agent_id, "attention", "", 5, 6)
    with hub.db.read() as s:
        assert cursors.position(s, agent_id, "attention") == 6


def test_more_than_the_budget_waits_for_the_next_call(hub: Hub) -> None:
    agent_id, project_id, grants = _world(hub)
    with hub.db.write() as s:
        subscriptions.subscribe(s, hub.clock, agent_id, grants, ["todo.created"], "acme")
        for n in range(trailer.MAX_ITEMS + 3):
            todos.create(s, hub.clock, project_id=project_id, queue="q", kind="manual", title=f"T{n}", payload=None)
    first = trailer.collect(hub.db, agent_id)
    assert first is not None and len(first["pending"]) == trailer.MAX_ITEMS and first["more"] is True
    second = trailer.collect(hub.db, agent_id)
    assert second is not None and [i["title"] for i in second["pending"]] == ["T20", "T21", "T22"]
    assert "more" not in second


def item_human(hub: Hub, item_id: str) -> str:
    from switchboard.models import InboxItem

    with hub.db.read() as s:
        return s.get(InboxItem, item_id).human_id


def test_inbox_resolution_rings_waiters_over_redis(redis_url: str, tmp_path: Path) -> None:
    settings = Settings(home=tmp_path, redis_url=redis_url)
    upgrade(settings)
    listener = Hub(settings, role="serve")  # holds the waiters, subscribed to switchboard:inbox
    publisher = Hub(settings, role="worker")
    try:
        async def scenario() -> None:
            waiter = listener.inbox_waiters.register("agt_x")
            try:
                for _ in range(100):  # the subscription is asynchronous: ring until heard
                    publisher.broker.publish_inbox("agt_x")
                    try:
                        await asyncio.wait_for(waiter[1].wait(), 0.1)
                        return
                    except TimeoutError:
                        continue
                raise AssertionError("no inbox ring over Redis")
            finally:
                listener.inbox_waiters.unregister("agt_x", waiter)

        asyncio.run(scenario())
    finally:
        listener.close()
        publisher.close()
