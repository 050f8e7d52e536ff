"""The trailer's ledger rules on SQLite and PostgreSQL: the probe, drain, at-most-once cursors
(compare-and-set), and inbox resolution rung over Redis pub/sub."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import delete, select

from switchboard import admin
from switchboard.clock import iso
from switchboard.config import Settings
from switchboard.db import upgrade
from switchboard.feed.events import append as feed_append
from switchboard.friends import requests as friends
from switchboard.hub import Hub
from switchboard.inbox import items as inbox
from switchboard.inbox import permissions
from switchboard.models import InboxItem, Subscription
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
    with hub.db.read() as s:
        assert trailer.probe(s, agent_id) is True and trailer.probe(s, "agt_nobody") is False
    member = trailer.collect(hub.db, agent_id)
    assert member is not None
    with hub.db.read() as s:
        assert trailer.probe(s, agent_id) is False
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


def _resolve(hub: Hub, item_id: str, **how: Any) -> None:
    with hub.db.write() as s:
        inbox.resolve(s, hub.clock, item_id, via="cli", human_id=item_human(hub, item_id), **how)


def test_attention_items_say_what_was_resolved_and_how(hub: Hub) -> None:
    agent_id, project_id, grants = _world(hub)
    with hub.db.write() as s:
        admin.add_human(s, "bob")
        admin.add_agent(s, "b1", "bob")
        admin.grant(s, "b1", "acme", "work")
        b1 = admin.agent_by_name(s, "b1").id
        asked = inbox.post(s, hub.clock, agent_id=agent_id, grants=grants, kind="question", project="acme",
                           title="Which branch?", options=["main", "dev"])
        expiring = inbox.post(s, hub.clock, agent_id=agent_id, grants=grants, kind="question", project="acme",
                              title="Still there?")
        approval = inbox.post(s, hub.clock, agent_id=agent_id, grants=grants, kind="approval", project="acme",
                              title="Deploy?")
        prompt, _ = permissions.relay(s, hub.clock, agent_id=agent_id, session_id="ses_one", request_id="abcde",
                                      tool_name="Bash", description="run the tests", input_preview="{}",
                                      expires_in_seconds=600)
        friend = friends.request(s, hub.clock, agent_id=b1, to_agent="a1", queues=["acme/q"], reason="help")
    _resolve(hub, asked["id"], answer="dev")
    with hub.db.write() as s:
        inbox.resolve(s, hub.clock, expiring["id"], via="expiry", expired=True)
    _resolve(hub, approval["id"], decision="deny")
    _resolve(hub, prompt["id"], decision="approve")
    _resolve(hub, friend["inbox_item_id"], decision="deny")
    with hub.db.write() as s:
        items, more = trailer.drain(s, agent_id)
    assert not more
    assert [(i["source"], i["kind"], i["id"], i["project_id"]) for i in items] == [
        ("attention", "question.answered", asked["id"], project_id),
        ("attention", "question.answered", expiring["id"], project_id),
        ("attention", "approval.decided", approval["id"], project_id),
        ("attention", "permission.decided", prompt["id"], None),
        ("attention", "friend.decided", friend["inbox_item_id"], None),
    ]
    assert [i["title"] for i in items] == [
        "Question answered: Which branch?", "Question expired: Still there?", "Approval denied: Deploy?",
        "Permission prompt approved: a1 asks to run Bash", f"Friend request denied: {friend_title(hub, friend)}",
    ]
    with hub.db.read() as s:
        resolved_at = {i.id: iso(i.resolved_at) for i in s.execute(select(InboxItem)).scalars()}
    assert all(i["at"] == resolved_at[i["id"]] and i["at"] for i in items)


def friend_title(hub: Hub, friend: dict[str, Any]) -> str:
    with hub.db.read() as s:
        return s.get(InboxItem, friend["inbox_item_id"]).title


def test_subscription_items_carry_the_events_view(hub: Hub) -> None:
    agent_id, project_id, grants = _world(hub)
    with hub.db.write() as s:
        sub = subscriptions.subscribe(s, hub.clock, agent_id, grants, ["todo.created", "todo.failed"])
        created = feed_append(s, hub.clock, project_id, "todo.created", "Created A", subject_id="td_a")
        feed_append(s, hub.clock, project_id, "todo.completed", "Not subscribed", subject_id="td_a")
        failed = feed_append(s, hub.clock, project_id, "todo.failed", "Failed A", subject_id="td_a")
    member = trailer.collect(hub.db, agent_id)
    assert member == {"pending": [
        {"source": "subscription", "kind": "todo.created", "id": created.id, "project_id": project_id,
         "title": "Created A", "at": iso(created.created_at)},
        {"source": "subscription", "kind": "todo.failed", "id": failed.id, "project_id": project_id,
         "title": "Failed A", "at": iso(failed.created_at)},
    ]}
    with hub.db.read() as s:
        assert cursors.position(s, agent_id, sub["subscription_id"], project_id) == failed.id
        assert cursors.position(s, agent_id, cursors.ATTENTION) is None  # nothing read there: unmoved


def test_an_event_in_an_unreadable_project_waits_for_a_grant(hub: Hub) -> None:
    agent_id, _, grants = _world(hub)
    with hub.db.write() as s:
        other = admin.add_project(s, "beta")
        subscriptions.subscribe(s, hub.clock, agent_id, grants, ["todo.created"])
        scoped = subscriptions.subscribe(s, hub.clock, agent_id, grants, ["todo.failed"], "acme")
        hidden = feed_append(s, hub.clock, other.id, "todo.created", "In beta", subject_id="td_b").id
        feed_append(s, hub.clock, other.id, "todo.failed", "Failed in beta", subject_id="td_b")
    assert trailer.probe_fast(hub.db, agent_id) is False and trailer.collect(hub.db, agent_id) is None
    with hub.db.write() as s:
        admin.grant(s, "a1", "beta", "read")
    assert trailer.probe_fast(hub.db, agent_id) is True
    member = trailer.collect(hub.db, agent_id)
    assert member is not None and [(i["id"], i["project_id"]) for i in member["pending"]] == [(hidden, other.id)]
    with hub.db.read() as s:
        assert cursors.position(s, agent_id, scoped["subscription_id"], other.id) is None  # scoped to acme
    assert trailer.probe_fast(hub.db, agent_id) is False


def test_attention_over_the_budget_is_delivered_in_order_over_several_calls(hub: Hub) -> None:
    agent_id, project_id, grants = _world(hub)
    with hub.db.write() as s:
        subscriptions.subscribe(s, hub.clock, agent_id, grants, ["todo.created"])
    ids = []
    for n in range(3):
        with hub.db.write() as s:
            ids.append(inbox.post(s, hub.clock, agent_id=agent_id, grants=grants, kind="approval", project="acme",
                                  title=f"Go {n}?")["id"])
        _resolve(hub, ids[-1], decision="approve")
    with hub.db.write() as s:
        todo = feed_append(s, hub.clock, project_id, "todo.created", "T", subject_id="td_1")
    with hub.db.write() as s:
        first = trailer.drain(s, agent_id, budget=2)
    assert [i["id"] for i in first[0]] == ids[:2] and first[1] is True
    with hub.db.write() as s:
        second = trailer.drain(s, agent_id, budget=2)
    assert [i["id"] for i in second[0]] == [ids[2], todo.id] and second[1] is False
    with hub.db.write() as s:
        assert trailer.drain(s, agent_id, budget=2) == ([], False)


def test_a_full_budget_leaves_subscriptions_for_the_next_call(hub: Hub) -> None:
    agent_id, project_id, grants = _world(hub)
    with hub.db.write() as s:
        subscriptions.subscribe(s, hub.clock, agent_id, grants, ["todo.created"])
        item = inbox.post(s, hub.clock, agent_id=agent_id, grants=grants, kind="approval", project="acme",
                          title="Go?")
    _resolve(hub, item["id"], decision="approve")
    with hub.db.write() as s:
        todo = feed_append(s, hub.clock, project_id, "todo.created", "T", subject_id="td_1")
    with hub.db.write() as s:
        assert [i["id"] for i in trailer.drain(s, agent_id, budget=1)[0]] == [item["id"]]
    with hub.db.write() as s:
        assert trailer.drain(s, agent_id, budget=1) == (
            [{"source": "subscription", "kind": "todo.created", "id": todo.id, "project_id": project_id,
              "title": "T", "at": iso(todo.created_at)}], False)


def test_the_text_block_lists_the_items_for_the_model() -> None:
    member = {"pending": [
        {"source": "attention", "kind": "approval.decided", "id": "inb_1", "title": "Approval approved: Go?"},
        {"source": "subscription", "kind": "todo.created", "id": 7, "title": "T"},
    ]}
    details = ". Details: inbox_read for answers and decisions, feed_read for events."
    assert trailer.text_block(member) == (
        "[switchboard] 2 pending: approval.decided inb_1 (attention): Approval approved: Go?; "
        "todo.created 7 (subscription): T" + details)
    assert trailer.text_block({**member, "more": True}).endswith("T (more on the next call)" + details)


def test_subscriptions_deliver_in_the_order_they_were_made(hub: Hub) -> None:
    agent_id, project_id, grants = _world(hub)
    with hub.db.write() as s:
        made = [subscriptions.subscribe(s, hub.clock, agent_id, grants, [kind])["subscription_id"]
                for kind in ("todo.failed", "todo.created")]
        # The first made gets the larger id, so an order by id alone would put it second.
        rows = {r.id: r for r in s.execute(select(Subscription)).scalars()}
        first, second = sorted(made, reverse=True)
        rows[second].created_at = rows[first].created_at + timedelta(seconds=1)
        kinds = [rows[first].kind, rows[second].kind]
        for kind in ("todo.created", "todo.failed"):
            feed_append(s, hub.clock, project_id, kind, kind, subject_id="td_1")
    member = trailer.collect(hub.db, agent_id)
    assert member is not None and [i["kind"] for i in member["pending"]] == kinds


def test_more_is_said_only_when_attention_items_were_left(hub: Hub) -> None:
    agent_id, _, grants = _world(hub)  # no subscriptions: attention alone decides
    ids = []
    for n in range(5):
        with hub.db.write() as s:
            ids.append(inbox.post(s, hub.clock, agent_id=agent_id, grants=grants, kind="approval", project="acme",
                                  title=f"Go {n}?")["id"])
        _resolve(hub, ids[-1], decision="approve")
    with hub.db.write() as s:
        items, more = trailer.drain(s, agent_id, budget=3)
    assert [i["id"] for i in items] == ids[:3] and more is True
    with hub.db.write() as s:
        items, more = trailer.drain(s, agent_id, budget=2)  # exactly the budget: nothing left
    assert [i["id"] for i in items] == ids[3:] and more is False


def test_subscriptions_made_at_one_instant_deliver_in_id_order(hub: Hub) -> None:
    agent_id, project_id, grants = _world(hub)
    with hub.db.write() as s:
        for kind in ("todo.failed", "todo.created"):
            subscriptions.subscribe(s, hub.clock, agent_id, grants, [kind])
        rows = sorted(s.execute(select(Subscription)).scalars(), key=lambda r: r.id, reverse=True)
        fields = [(r.id, r.kind, r.seed_event_id, rows[0].created_at) for r in rows]
        s.execute(delete(Subscription))
    with hub.db.write() as s:  # stored larger id first, at one instant
        for sub_id, kind, seed, at in fields:
            s.add(Subscription(id=sub_id, kind=kind, agent_id=agent_id, project_id=None, seed_event_id=seed,
                               created_at=at))
            s.flush()
        for kind in ("todo.created", "todo.failed"):
            feed_append(s, hub.clock, project_id, kind, kind, subject_id="td_1")
    member = trailer.collect(hub.db, agent_id)
    assert member is not None and [i["kind"] for i in member["pending"]] == [fields[1][1], fields[0][1]]


def test_a_cursor_is_read_and_moved_only_for_its_agent_stream_and_project(hub: Hub) -> None:
    agent_id, _, _ = _world(hub)
    with hub.db.write() as s:
        other = admin.add_agent(s, "a2", "alice").id
        for who, stream, project in ((agent_id, "s1", "p1"), (agent_id, "s1", "p2"), (agent_id, "s2", "p1"),
                                     (other, "s1", "p1")):
            assert cursors.advance(s, who, stream, project, None, 5)
        assert cursors.advance(s, agent_id, "s1", "p2", 5, 7)
    with hub.db.write() as s:
        assert cursors.position(s, agent_id, "s1", "p2") == 7 and cursors.position(s, agent_id, "s1", "p1") == 5
        assert cursors.position(s, agent_id, "s3", "p1") is None and cursors.position(s, "agt_none", "s1", "p1") is None
        assert cursors.advance(s, agent_id, "s1", "p1", 5, 6)
    with hub.db.read() as s:
        assert [cursors.position(s, *key) for key in ((agent_id, "s1", "p1"), (agent_id, "s1", "p2"),
                                                      (agent_id, "s2", "p1"), (other, "s1", "p1"))] == [6, 7, 5, 5]
