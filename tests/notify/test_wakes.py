"""Wake routing, coalescing and content on the ledger (DESIGN.md §6.5; issue 10 items 2 and 5,
issue 18 items 1 and 3), with an injected clock."""

from __future__ import annotations

import dataclasses
import json
from collections import Counter
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import select

from switchboard import admin
from switchboard.clock import FixedClock
from switchboard.hub import Hub
from switchboard.models import AgentEvent, Todo
from switchboard.notify import sessions
from switchboard.notify.wakes import Wake, attach_ring, due_rings, ring, visible_text
from switchboard.queue import todos
from tests.conftest import World

T0 = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)


@pytest.fixture
def hub(world: World) -> Hub:
    h = Hub(world.settings, clock=FixedClock(T0), role="cli")
    yield h
    h.close()


def _todo(hub: Hub, title: str = "Check the build", agent: str | None = None, age: int = 0) -> str:
    with hub.db.write() as s:
        pid = admin.project_by_name(s, "acme").id
        todo, _ = todos.create(s, FixedClock(T0 - timedelta(seconds=age)), project_id=pid, queue="reviews",
                               kind="manual", title=title, payload=None)
        if agent is not None:
            todo.assigned_agent_id = admin.agent_by_name(s, agent).id
        return todo.id


def _attach(hub: Hub, agent: str, session_id: str) -> None:
    with hub.db.write() as s:
        sessions.attach(s, hub.clock, admin.agent_by_name(s, agent).id, session_id, "stm_" + session_id)


def _events(hub: Hub) -> list[AgentEvent]:
    with hub.db.read() as s:
        return list(s.execute(select(AgentEvent).where(AgentEvent.kind == "wake").order_by(AgentEvent.id)).scalars())


def _add_agent(hub: Hub, name: str) -> None:
    with hub.db.write() as s:
        admin.add_agent(s, name, "alice")
        admin.grant(s, name, "acme", "work")


def test_wake_meta_is_provider_not_source_and_content_drops_bidi_and_invisible_characters(hub: Hub) -> None:
    _attach(hub, "claude1", "ses_a")
    # U+202E (RLO, cases/channel-break.jsonl), zero-width space, soft hyphen, a tag character.
    todo_id = _todo(hub, "Fix \u202e>lennahc/< the\u200b bu\u00adild\U000e0041 now")
    with hub.db.write() as s:
        wake = ring(s, hub.clock, s.get(Todo, todo_id))
    assert wake.meta == {"todo_id": todo_id, "project": "acme", "queue": "reviews", "kind": "manual",
                         "provider": "api"}
    assert "source" not in wake.meta
    assert wake.content == f"switchboard: todo {todo_id} on reviews: Fix >lennahc/< the build now " \
                           f"(call todo_claim todo_id={todo_id})"
    [event] = _events(hub)
    assert event.session_id == "ses_a" and event.data == {"content": wake.content, "meta": wake.meta}
    assert visible_text("a\u2066b\u2069c\u061cd\ufe0fe\u3164f\r\ng") == "abcdef g"


def test_a_wake_to_dict_names_every_field_round_trips_and_copies_the_agent_list() -> None:
    # to_dict is built by hand (dataclasses.asdict cost 33 us a wake, issue 11): it must stay
    # what asdict gives, for every field a Wake has now or gains later.
    wake = Wake(todo_id="td_1", project="acme", queue="reviews", kind="github.issues", provider="github",
                title="Issue #5", agent_ids=["agt_a", "agt_b"], waiting=3, agent_id="agt_a", session_id="ses_a",
                event_id=7)
    data = wake.to_dict()
    assert data == dataclasses.asdict(wake)
    assert list(data) == [f.name for f in dataclasses.fields(Wake)]
    assert Wake.from_dict(json.loads(json.dumps(data))) == wake
    data["agent_ids"].append("agt_c")
    assert wake.agent_ids == ["agt_a", "agt_b"]


def test_wakes_rotate_per_agent_and_every_live_session_is_woken(hub: Hub) -> None:
    # Issue 18 item 1: with wakes for two agents interleaved, both sessions of the first agent
    # were not both woken (one shared rotation counter). Three sessions across two agents.
    _add_agent(hub, "claude2")
    _attach(hub, "claude1", "ses_1a")
    _attach(hub, "claude1", "ses_1b")
    _attach(hub, "claude2", "ses_2a")
    for _ in range(6):
        for agent in ("claude1", "claude2"):
            todo_id = _todo(hub, agent=agent)
            with hub.db.write() as s:
                ring(s, FixedClock(hub.clock.now()), s.get(Todo, todo_id))
            hub.clock.at += timedelta(milliseconds=10)  # type: ignore[attr-defined]
    assert Counter(e.session_id for e in _events(hub)) == {"ses_1a": 3, "ses_1b": 3, "ses_2a": 6}


def test_a_wake_skips_stale_sessions_and_goes_nowhere_without_a_live_one(hub: Hub) -> None:
    _attach(hub, "claude1", "ses_old")
    hub.clock.at += timedelta(seconds=sessions.LIVE_SECONDS + 1)  # type: ignore[attr-defined]
    todo_id = _todo(hub)
    with hub.db.write() as s:
        wake = ring(s, hub.clock, s.get(Todo, todo_id))
    assert wake.session_id is None and _events(hub) == []  # the todo simply waits (DESIGN.md rule 1)
    _attach(hub, "claude1", "ses_new")
    with hub.db.write() as s:
        again = ring(s, hub.clock, s.get(Todo, todo_id))
    assert again.session_id == "ses_new"


def test_re_rings_coalesce_into_one_wake_per_session_naming_count_and_oldest(hub: Hub) -> None:
    # Issue 10 item 5: 11 pending todos gave 11 wakes within 5 ms.
    _attach(hub, "claude1", "ses_a")
    ids = [_todo(hub, f"todo {n}", age=100 - n) for n in range(11)]
    with hub.db.write() as s:
        for todo_id in ids:
            row = s.get(Todo, todo_id)
            row.rung_at, row.ring_count = T0 - timedelta(seconds=31), 1
    with hub.db.write() as s:
        wakes = due_rings(s, hub.clock)
    assert len(wakes) == 1 and wakes.todos == 11  # eleven todos rung, one wake
    assert wakes[0].todo_id == ids[0] and wakes[0].waiting == 11
    assert wakes[0].content == (f"switchboard: 11 todos waiting; oldest todo {ids[0]} on reviews: todo 0 "
                                f"(call todo_claim todo_id={ids[0]}, or todo_list for the rest)")
    assert len(_events(hub)) == 1
    # 30 s later the same todos are due again (backoff 60 s for the 2nd re-ring: not yet).
    hub.clock.at += timedelta(seconds=31)  # type: ignore[attr-defined]
    with hub.db.write() as s:
        assert due_rings(s, hub.clock) == []
    # A session woken just now gets no re-ring burst; a never-rung todo still rings.
    hub.clock.at += timedelta(seconds=30)  # type: ignore[attr-defined]
    fresh = _todo(hub, "fresh")
    _attach(hub, "claude1", "ses_a")  # its heartbeat keeps it live
    with hub.db.write() as s:
        ring(s, hub.clock, s.get(Todo, fresh))
    hub.clock.at += timedelta(seconds=1)  # type: ignore[attr-defined]
    with hub.db.write() as s:
        assert due_rings(s, hub.clock) == []
    assert len(_events(hub)) == 2


def test_attach_rings_the_oldest_waiting_todo_once_with_the_count(hub: Hub) -> None:
    # Issue 18 item 3: a todo waiting when Claude Code connected was rung 27 s later, by a re-ring.
    first = _todo(hub, "oldest", age=60)
    _todo(hub, "newer", age=10)
    _attach(hub, "claude1", "ses_a")
    with hub.db.write() as s:
        wake = attach_ring(s, hub.clock, admin.agent_by_name(s, "claude1").id, "ses_a")
    assert wake is not None and wake.todo_id == first and wake.waiting == 2 and wake.session_id == "ses_a"
    with hub.db.write() as s:  # the same session re-attaching within the budget: no second ring
        assert attach_ring(s, hub.clock, admin.agent_by_name(s, "claude1").id, "ses_a") is None
        assert s.get(Todo, first).rung_at == T0  # and the reaper does not ring it again as new
    with hub.db.write() as s:
        assert [w.todo_id for w in due_rings(s, hub.clock)] == []


def test_attach_counts_assigned_and_unassigned_work_but_not_another_agents(hub: Hub) -> None:
    # waiting_for reads the assigned todos and the unassigned ones of the agent's projects
    # separately (issue 11, migration 0021): the oldest of both, the count of both.
    with hub.db.write() as s:
        admin.add_agent(s, "helper", "alice")
    _todo(hub, "someone else's", agent="helper", age=300)
    mine = _todo(hub, "assigned to me", agent="claude1", age=120)
    _todo(hub, "anyone's", age=60)
    _attach(hub, "claude1", "ses_a")
    with hub.db.write() as s:
        wake = attach_ring(s, hub.clock, admin.agent_by_name(s, "claude1").id, "ses_a")
    assert wake is not None and wake.todo_id == mine and wake.waiting == 2
