"""Two drains of one agent racing on PostgreSQL deliver each trailer item once (issue 17).

DESIGN.md §6.4: the trailer delivers at most once. Two tool calls of one agent may drain at
the same moment from two servers; both read the same pending items, and the cursor's
compare-and-set decides which one delivers them. The loser must deliver nothing, whatever it
read. The interleaving is forced, not hoped for: drain A reads and advances, drain B reads the
same items and blocks on A's cursor row, A commits, then B's compare-and-set fails.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from sqlalchemy import text
from sqlmodel import Session

from switchboard import admin
from switchboard.config import Settings
from switchboard.db import upgrade
from switchboard.hub import Hub
from switchboard.inbox import items as inbox
from switchboard.models import InboxItem
from switchboard.notify import subscriptions, trailer
from switchboard.queue import todos
from tests.conftest import wait_for
from tests.services import fresh_postgres_database


def _pending(hub: Hub, agent_id: str, project_id: str, grants: dict[str, str], n: int,
             attention: bool = True) -> None:
    """An approval decided (when ``attention``) and ``n`` todos created (subscription items)."""
    with hub.db.write() as s:
        item = inbox.post(s, hub.clock, agent_id=agent_id, grants=grants, kind="approval", project="acme",
                          title=f"Go {n}?") if attention else None
    with hub.db.write() as s:
        if item is not None:
            human_id = s.get(InboxItem, item["id"]).human_id
            inbox.resolve(s, hub.clock, item["id"], via="cli", human_id=human_id, decision="approve")
        for k in range(n):
            todos.create(s, hub.clock, project_id=project_id, queue="q", kind="manual", title=f"T{n}.{k}",
                         payload=None)


def _blocked_on_a_lock(hub: Hub) -> bool:
    with hub.db.engine.connect() as conn:
        return bool(conn.execute(text(
            "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database()"
        )).scalar())


def _race(hub: Hub, agent_id: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Drain A holds its transaction open while drain B runs into A's cursor rows; then A commits."""
    result_b: list[list[dict[str, Any]]] = []
    errors: list[Exception] = []

    def drain_b() -> None:
        try:
            with Session(hub.db.engine) as s, s.begin():
                result_b.append(trailer.drain(s, agent_id)[0])
        except Exception as exc:  # noqa: BLE001 (reported by the main thread)
            errors.append(exc)

    with Session(hub.db.engine) as a, a.begin():
        items_a, _ = trailer.drain(a, agent_id)
        assert items_a, "drain A found nothing to deliver"
        b = threading.Thread(target=drain_b)
        b.start()
        wait_for(lambda: _blocked_on_a_lock(hub) or not b.is_alive(), timeout=30)
        assert b.is_alive(), f"drain B did not wait for drain A's cursor: {errors or result_b}"
    b.join(30)
    assert not b.is_alive() and not errors, errors
    return items_a, result_b[0]


def test_the_loser_of_a_drain_race_delivers_nothing(postgres_url: str, tmp_path: Path) -> None:
    settings = Settings(home=tmp_path, database_url=fresh_postgres_database(postgres_url))
    upgrade(settings)
    hub = Hub(settings, role="cli")
    try:
        with hub.db.write() as s:
            admin.add_human(s, "alice")
            project = admin.add_project(s, "acme")
            agent = admin.add_agent(s, "a1", "alice")
            admin.grant(s, "a1", "acme", "work")
            grants = admin.grants_of(s, agent.id)
            subscriptions.subscribe(s, hub.clock, agent.id, grants, ["todo.created"], "acme")
        delivered: list[str] = []
        # Each stream races first with no cursor row (both drains insert it), then with one
        # (both update it). B blocks on the first cursor A moved, so a round whose items are
        # all on one stream makes B read that stream's items before A commits.
        rounds = [(3, False, {"subscription"}), (0, True, {"attention"}), (3, True, {"attention", "subscription"}),
                  (3, False, {"subscription"})]
        for n, (todo_count, attention, streams) in enumerate(rounds):
            _pending(hub, agent.id, project.id, grants, todo_count, attention)
            items_a, items_b = _race(hub, agent.id)
            assert items_b == [], f"the losing drain delivered {items_b} (round {n})"
            assert {i["source"] for i in items_a} == streams
            assert len(items_a) == todo_count + attention
            delivered += [i["id"] for i in items_a]
        assert len(delivered) == len(set(delivered)) == 11
        assert trailer.collect(hub.db, agent.id) is None
    finally:
        hub.close()


def test_concurrent_collects_deliver_every_item_exactly_once(postgres_url: str, tmp_path: Path) -> None:
    """Four threads calling ``collect`` while items keep arriving: no item twice, none lost."""
    settings = Settings(home=tmp_path, database_url=fresh_postgres_database(postgres_url))
    upgrade(settings)
    hub = Hub(settings, role="cli")
    try:
        with hub.db.write() as s:
            admin.add_human(s, "alice")
            project = admin.add_project(s, "acme")
            agent = admin.add_agent(s, "a1", "alice")
            admin.grant(s, "a1", "acme", "work")
            grants = admin.grants_of(s, agent.id)
            subscriptions.subscribe(s, hub.clock, agent.id, grants, ["todo.created"], "acme")
        seen: list[str] = []
        lock = threading.Lock()
        done = threading.Event()
        start = threading.Barrier(5)

        def collector() -> None:
            start.wait(30)
            while True:
                finished = done.is_set()
                member = trailer.collect(hub.db, agent.id)
                if member:
                    with lock:
                        seen.extend(i["id"] for i in member["pending"])
                elif finished:
                    return

        threads = [threading.Thread(target=collector) for _ in range(4)]
        for t in threads:
            t.start()
        start.wait(30)
        for n in range(10):
            _pending(hub, agent.id, project.id, grants, 2)
        done.set()
        for t in threads:
            t.join(60)
        assert len(seen) == len(set(seen)), "an item was delivered twice"
        assert len(seen) == 30, f"{len(seen)} of 30 items delivered"
    finally:
        hub.close()
