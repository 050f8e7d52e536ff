"""Subscriptions (DESIGN.md §6.4): seeds from readable projects only (issue 13 item 10), listing,
removal with the cursors, and the refusals of ``notify_subscribe`` / ``notify_unsubscribe``."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import select

from switchboard import admin
from switchboard.clock import FixedClock, iso
from switchboard.errors import InvalidArgument, NotFound
from switchboard.feed.events import append
from switchboard.hub import Hub
from switchboard.mcp_server.callers import resolve_caller
from switchboard.mcp_server.calls import call_tool
from switchboard.models import Subscription
from switchboard.notify import cursors, subscriptions, trailer
from tests.conftest import World

T0 = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)


@pytest.fixture
def hub(world: World) -> Iterator[Hub]:
    h = Hub(world.settings, clock=FixedClock(T0), role="cli")
    yield h
    h.close()


def _subscribe(hub: Hub, agent_id: str, kinds: list[str], project: str | None = None) -> dict[str, Any]:
    with hub.db.write() as s:
        return subscriptions.subscribe(s, hub.clock, agent_id, admin.grants_of(s, agent_id), kinds, project)


def _event(hub: Hub, project_id: str, kind: str = "todo.created", title: str = "e") -> int:
    with hub.db.write() as s:
        return int(append(s, hub.clock, project_id, kind, title, subject_id="td_1").id or 0)


def test_an_unscoped_subscription_seeds_from_readable_projects_only(world: World) -> None:
    hub = Hub(world.settings, role="cli")
    try:
        with hub.db.write() as s:
            other = admin.add_project(s, "secretproj")
            mine = append(s, hub.clock, world.project_id, "todo.created", "mine", subject_id="td_1").id
        caller = resolve_caller(hub, world.token)
        first = call_tool(hub, caller, "notify_subscribe", {"kinds": ["todo.created"]})["structuredContent"]
        assert first["cursor"] == mine
        with hub.db.write() as s:  # activity in a project the agent cannot read
            for i in range(5):
                append(s, hub.clock, other.id, "todo.created", f"theirs {i}", subject_id=f"td_x{i}")
        second = call_tool(hub, caller, "notify_subscribe", {"kinds": ["todo.created"]})["structuredContent"]
        assert second["cursor"] == mine  # unmoved by the other project's events
    finally:
        hub.close()


def test_a_subscription_is_seeded_at_the_newest_event_of_its_kinds_and_project(
    hub: Hub, world: World
) -> None:
    with hub.db.write() as s:
        other = admin.add_project(s, "beta")
        admin.grant(s, "claude1", "beta", "read")
    wanted = _event(hub, world.project_id, "todo.created")
    _event(hub, world.project_id, "todo.completed")  # another kind
    _event(hub, other.id, "todo.created")  # another project
    sub = _subscribe(hub, world.agent_id, ["todo.created", "todo.created"], "acme")
    assert (
        sub["cursor"] == wanted and sub["kinds"] == ["todo.created"] and sub["project_id"] == world.project_id
    )
    assert sub["subscription_id"].startswith("sub_")
    with hub.db.read() as s:
        assert [r.created_at for r in s.execute(select(Subscription)).scalars()] == [T0]
    assert _subscribe(hub, world.agent_id, ["todo.failed"])["cursor"] == 0  # nothing of that kind yet


def test_list_of_shows_each_subscription_once_with_its_kinds_scope_and_seed(hub: Hub, world: World) -> None:
    with hub.db.read() as s:
        assert subscriptions.list_of(s, world.agent_id) == []
    seed = _event(hub, world.project_id)
    first = _subscribe(hub, world.agent_id, ["todo.failed", "todo.created"], "acme")
    hub.clock.at += timedelta(seconds=1)  # type: ignore[attr-defined]
    second = _subscribe(hub, world.agent_id, ["question.answered"])
    with hub.db.write() as s:
        admin.add_agent(s, "claude2", "alice")
        admin.grant(s, "claude2", "acme", "work")
        other_agent = admin.agent_by_name(s, "claude2").id
    _subscribe(hub, other_agent, ["todo.created"])
    with hub.db.read() as s:
        listed = subscriptions.list_of(s, world.agent_id)
    assert listed == [
        {
            "subscription_id": first["subscription_id"],
            "kinds": ["todo.created", "todo.failed"],
            "project_id": world.project_id,
            "cursor": seed,
        },
        {
            "subscription_id": second["subscription_id"],
            "kinds": ["question.answered"],
            "project_id": None,
            "cursor": 0,
        },
    ]
    assert first["created_at"] == iso(T0) and second["created_at"] == iso(T0 + timedelta(seconds=1))


def test_unsubscribe_removes_the_subscription_and_its_cursors_only(hub: Hub, world: World) -> None:
    gone = _subscribe(hub, world.agent_id, ["todo.created"])
    kept = _subscribe(hub, world.agent_id, ["todo.created"])
    _event(hub, world.project_id)
    member = trailer.collect(hub.db, world.agent_id)  # both deliver: each has its cursor now
    assert member is not None and len(member["pending"]) == 2
    with hub.db.write() as s:
        cursors.advance(s, world.agent_id, cursors.ATTENTION, "", None, 1)
        done = subscriptions.unsubscribe(s, world.agent_id, gone["subscription_id"])
    assert done == {"subscription_id": gone["subscription_id"], "removed": True}
    with hub.db.read() as s:
        assert [x["subscription_id"] for x in subscriptions.list_of(s, world.agent_id)] == [
            kept["subscription_id"]
        ]
        assert cursors.position(s, world.agent_id, gone["subscription_id"], world.project_id) is None
        assert cursors.position(s, world.agent_id, kept["subscription_id"], world.project_id) is not None
        assert cursors.position(s, world.agent_id, cursors.ATTENTION) == 1


def test_unsubscribing_an_unknown_or_another_agents_subscription_is_not_found(hub: Hub, world: World) -> None:
    with hub.db.write() as s:
        admin.add_agent(s, "claude2", "alice")
        admin.grant(s, "claude2", "acme", "work")
        other_agent = admin.agent_by_name(s, "claude2").id
    theirs = _subscribe(hub, other_agent, ["todo.created"])
    for agent_id, sub_id in ((world.agent_id, theirs["subscription_id"]), (world.agent_id, "sub_nope")):
        with pytest.raises(NotFound) as err, hub.db.write() as s:
            subscriptions.unsubscribe(s, agent_id, sub_id)
        assert str(err.value) == "no such subscription"
    with hub.db.read() as s:
        assert len(subscriptions.list_of(s, other_agent)) == 1


@pytest.mark.parametrize(
    ("kinds", "message"),
    [
        ([], "kinds must name at least one feed event kind"),
        (None, "kinds must name at least one feed event kind"),
        (["todo.created", "todo.exploded", "a.b"], "unknown kind(s): a.b, todo.exploded"),
    ],
)
def test_subscribing_to_no_or_unknown_kinds_is_an_invalid_argument(
    hub: Hub, world: World, kinds: Any, message: str
) -> None:
    with pytest.raises(InvalidArgument) as err:
        _subscribe(hub, world.agent_id, kinds)
    assert str(err.value) == message


def test_subscribing_to_an_unreadable_project_is_not_found(hub: Hub, world: World) -> None:
    with hub.db.write() as s:
        admin.add_project(s, "secretproj")
    with pytest.raises(NotFound):
        _subscribe(hub, world.agent_id, ["todo.created"], "secretproj")


def test_an_agent_holds_at_most_50_subscriptions(hub: Hub, world: World) -> None:
    for _ in range(subscriptions.MAX_SUBSCRIPTIONS - 1):
        _subscribe(hub, world.agent_id, ["todo.created", "todo.failed"])  # two rows each: counted once
    last = _subscribe(hub, world.agent_id, ["todo.created"])
    with pytest.raises(InvalidArgument) as err:
        _subscribe(hub, world.agent_id, ["todo.created"])
    assert str(err.value) == "at most 50 subscriptions per agent; remove one first"
    with hub.db.write() as s:
        subscriptions.unsubscribe(s, world.agent_id, last["subscription_id"])
    _subscribe(hub, world.agent_id, ["todo.created"])  # room again


def test_list_of_orders_by_creation_then_id(hub: Hub, world: World) -> None:
    made = [_subscribe(hub, world.agent_id, ["todo.created"])["subscription_id"] for _ in range(3)]
    newest, tied_first, tied_second = sorted(made)  # the smallest id is made the newest
    with hub.db.write() as s:
        rows = {r.id: r for r in s.execute(select(Subscription)).scalars()}
        rows[newest].created_at = T0 + timedelta(seconds=1)
        rows[newest].kind = "question.answered"
        # Tied in time: the smaller id first, though its kind sorts last.
        rows[tied_first].kind, rows[tied_second].kind = "todo.failed", "todo.created"
    with hub.db.read() as s:
        assert [x["subscription_id"] for x in subscriptions.list_of(s, world.agent_id)] == [
            tied_first,
            tied_second,
            newest,
        ]


def test_a_project_the_agent_only_reads_may_be_subscribed_to(hub: Hub, world: World) -> None:
    with hub.db.write() as s:
        beta = admin.add_project(s, "beta")
        admin.grant(s, "claude1", "beta", "read")
    seed = _event(hub, beta.id)
    sub = _subscribe(hub, world.agent_id, ["todo.created"], "beta")
    assert (sub["project_id"], sub["cursor"]) == (beta.id, seed)


def test_an_agent_without_grants_subscribes_from_zero(hub: Hub, world: World) -> None:
    _event(hub, world.project_id)
    with hub.db.write() as s:
        sub = subscriptions.subscribe(s, hub.clock, world.agent_id, {}, ["todo.created"])
    assert sub["cursor"] == 0
    with hub.db.read() as s:
        assert subscriptions.list_of(s, world.agent_id)[0]["cursor"] == 0
