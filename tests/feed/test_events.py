"""Reading the feed past cursors in several projects and kinds (:func:`switchboard.feed.events.tail`,
issue 11): one index range per project and kind, merged by id, gives the pages, ``has_more`` and
cursor moves one filtered statement gave, on SQLite and PostgreSQL, and so does the single
statement used past :data:`~switchboard.feed.events.MAX_BRANCHES` ranges.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import insert, select

from switchboard import admin
from switchboard.clock import utcnow
from switchboard.feed import events, pages
from switchboard.hub import Hub
from switchboard.models import FeedEvent
from switchboard.notify import subscriptions, trailer
from tests.conftest import World
from tests.queue.conftest import configured_world, settings_for

KINDS = ("todo.created", "todo.claimed", "question.posted", "approval.requested")
WANTED = ["question.posted", "todo.created", "approval.requested"]


@pytest.fixture(params=[("sqlite", "union"), ("sqlite", "single"), ("postgresql", "union"), ("postgresql", "single")],
                ids=lambda p: "-".join(p))
def world_hub(request: pytest.FixtureRequest, tmp_path: Path,
              monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[World, Hub]]:
    backend, statement = request.param
    if statement == "single":
        monkeypatch.setattr(events, "MAX_BRANCHES", 1)
    with configured_world(settings_for(request, tmp_path, backend)) as pair:
        yield pair


def _mixed_feed(world: World, hub: Hub) -> tuple[dict[str, str], list[tuple[int, str, str]]]:
    """300 events of four kinds spread over acme, beta (read) and gamma (no grant); the agent's
    grants and every ``(id, project_id, kind)`` of a wanted kind in a readable project, by id."""
    with hub.db.write() as s:
        beta = admin.add_project(s, "beta").id
        gamma = admin.add_project(s, "gamma").id
        admin.grant(s, "claude1", "beta", "read")
        grants = admin.grants_of(s, world.agent_id)
    chance = random.Random(11)
    now = utcnow()
    rows = [{"project_id": chance.choice([world.project_id, beta, gamma]), "kind": chance.choice(KINDS),
             "title": f"e{i}", "created_at": now} for i in range(300)]
    with hub.db.write() as s:
        s.execute(insert(FeedEvent), rows)
    with hub.db.read() as s:
        stored = s.execute(select(FeedEvent).order_by(FeedEvent.id)).scalars().all()  # type: ignore[arg-type]
    wanted = [(int(e.id or 0), e.project_id, e.kind) for e in stored if e.kind in WANTED and e.project_id in grants]
    return grants, wanted


def test_pages_of_a_kinds_filter_hold_every_event_once_in_id_order(world_hub: tuple[World, Hub]) -> None:
    world, hub = world_hub
    grants, wanted = _mixed_feed(world, hub)
    seen: list[tuple[int, str, str]] = []
    last: dict[str, Any] = {"has_more": True}
    while last["has_more"]:
        with hub.db.write() as s:  # stored cursors, one per project
            last = pages.read(s, world.agent_id, grants, kinds=WANTED, limit=7)
        seen += [(e["id"], e["project_id"], e["kind"]) for e in last["events"]]
        assert len(last["events"]) == 7 or not last["has_more"]
    assert seen == wanted
    with hub.db.write() as s:
        assert pages.read(s, world.agent_id, grants, kinds=WANTED)["events"] == []
    explicit, since = [], 0
    while True:
        with hub.db.read() as s:
            page = pages.read(s, world.agent_id, grants, kinds=WANTED, since=since, limit=5)
        explicit += [(e["id"], e["project_id"], e["kind"]) for e in page["events"]]
        since = page["next_since"]
        if not page["has_more"]:
            break
    assert explicit == wanted


def test_a_drain_delivers_every_subscribed_event_once(world_hub: tuple[World, Hub]) -> None:
    world, hub = world_hub
    with hub.db.write() as s:  # seeded at zero, before the events
        subscriptions.subscribe(s, hub.clock, world.agent_id, admin.grants_of(s, world.agent_id), WANTED, None)
    _, wanted = _mixed_feed(world, hub)
    delivered: list[tuple[int, str, str]] = []
    more = True
    while more:
        with hub.db.write() as s:
            items, more = trailer.drain(s, world.agent_id, budget=6)
        assert len(items) == 6 or not more
        delivered += [(i["id"], i["project_id"], i["kind"]) for i in items]
    assert sorted(delivered) == wanted
    for pid in {p for _, p, _ in wanted}:  # each project's cursor moves forward by id
        ids = [i for i, p, _ in delivered if p == pid]
        assert ids == sorted(ids)


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_positions_past_every_id_given_are_told_apart_and_reads_refuse_them(
        request: pytest.FixtureRequest, tmp_path: Path, backend: str) -> None:
    """A position past every id the database has given comes from another timeline (kept across
    a restore of an older backup): ``feed_read``, ``inbox_read`` and ``inbox_wait`` refuse it as
    ``since`` or ``cursor`` (read after it, every new event was skipped until the ids caught up);
    every id given, and 0, still reads."""
    import anyio

    from switchboard.errors import InvalidArgument
    from switchboard.inbox import items as inbox
    from switchboard.inbox import waiting
    from switchboard.notify import sessions

    with configured_world(settings_for(request, tmp_path, backend)) as (world, hub):
        with hub.db.write() as s:
            given = [int(events.append(s, hub.clock, world.project_id, "todo.created", f"e{n}").id or 0)
                     for n in range(2)]
            wake = sessions.emit(s, hub.clock, world.agent_id, None, "wake", {"content": "x"})
            grants = admin.grants_of(s, world.agent_id)
        beyond = given[-1] + 2**40
        with hub.db.read() as s:
            assert not any(events.ahead(s, position) for position in (0, *given))
            assert events.ahead(s, beyond)
            assert not events.ahead(s, wake, "agent_events") and events.ahead(s, wake + 2**40, "agent_events")
        with hub.db.write() as s:
            assert [e["title"] for e in pages.read(s, world.agent_id, grants, since=given[0])["events"]] == ["e1"]
            assert pages.read(s, world.agent_id, grants, since=0)["next_since"] == given[-1]
            for call in (lambda: pages.read(s, world.agent_id, grants, since=beyond),
                         lambda: pages.read(s, world.agent_id, grants, cursor=pages.cursor_of(beyond)),
                         lambda: inbox.read(s, world.agent_id, since=beyond)):
                with pytest.raises(InvalidArgument, match="past every feed event id"):
                    call()
        with pytest.raises(InvalidArgument, match="past every feed event id"):
            waiting.poll(hub, world.agent_id, beyond)
        with pytest.raises(InvalidArgument, match="past every feed event id"):  # inbox_wait: its first poll
            anyio.run(waiting.wait, hub, world.agent_id, 0.5, beyond)
        assert waiting.poll(hub, world.agent_id, given[-1])["resolved"] == []
