"""The todo state machine (DESIGN.md §6.2) on SQLite and PostgreSQL: every legal and illegal
transition, leases, heartbeats, fences, backoff, dead letters, human retry, release, reaper."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from switchboard import admin
from switchboard.clock import SystemClock
from switchboard.config import Settings
from switchboard.errors import Conflict, Forbidden, InvalidArgument, NotFound
from switchboard.hub import Hub
from switchboard.models import Todo
from switchboard.notify.wakes import MAX_RINGS, ring_after_seconds
from switchboard.queue import leases, todos
from switchboard.queue.leases import backoff_seconds
from tests.conftest import configure
from tests.services import fresh_postgres_database


def _setup(hub: Hub, max_attempts: int = 5) -> tuple[str, str, dict[str, str]]:
    with hub.db.write() as s:
        agent = admin.agent_by_name(s, "claude1")
        project = admin.project_by_name(s, "acme")
        todo, _ = todos.create(
            s, hub.clock, project_id=project.id, queue="reviews", kind="test", title="t", payload={"n": 1}
        )
        todo.max_attempts = max_attempts
        return agent.id, todo.id, admin.grants_of(s, agent.id)


def _do(hub: Hub, op: Any, *args: Any, **kwargs: Any) -> Any:
    with hub.db.write() as s:
        return op(s, hub.clock, *args, **kwargs)


def _todo(hub: Hub, todo_id: str) -> Todo:
    with hub.db.read() as s:
        t = s.get(Todo, todo_id)
        assert t is not None
        return t


def _attempts(hub: Hub, todo_id: str) -> list[dict[str, Any]]:
    with hub.db.read() as s:
        return todos.attempts_of(s, todo_id)


def test_backoff_schedule_doubles_from_30s_capped_at_15min() -> None:
    assert [backoff_seconds(n) for n in range(1, 8)] == [30, 60, 120, 240, 480, 900, 900]


def test_claim_complete_records_attempt(hub: Hub) -> None:
    agent, tid, grants = _setup(hub)
    claim = _do(hub, leases.claim, agent, grants, todo_id=tid, lease_seconds=60)
    done = _do(
        hub, leases.complete, agent, grants, todo_id=tid, lease_token=claim["lease_token"], result="shipped"
    )
    assert done["state"] == "done" and done["claimed_by"] is None
    (attempt,) = _attempts(hub, tid)
    assert attempt["agent_id"] == agent and attempt["outcome"] == "completed" and attempt["ended_at"]
    assert _todo(hub, tid).result == {"value": "shipped"}


def test_illegal_transitions_are_conflicts(hub: Hub) -> None:
    agent, tid, grants = _setup(hub)
    for op in (leases.heartbeat, leases.complete, leases.fail, leases.release):  # pending: nothing held
        with pytest.raises(Conflict):
            _do(hub, op, agent, grants, todo_id=tid)
    _do(hub, leases.claim, agent, grants, todo_id=tid)
    _do(hub, leases.complete, agent, grants, todo_id=tid)
    for op in (leases.heartbeat, leases.complete, leases.fail, leases.release):  # done is final
        with pytest.raises(Conflict):
            _do(hub, op, agent, grants, todo_id=tid)
    with pytest.raises(Conflict):
        _do(hub, leases.claim, agent, grants, todo_id=tid)
    with pytest.raises(Conflict):
        _do(hub, todos.cancel, tid)
    with pytest.raises(Conflict):
        _do(hub, todos.retry_dead_letter, tid)


def test_another_agent_cannot_touch_a_held_todo(hub: Hub) -> None:
    agent, tid, grants = _setup(hub)
    with hub.db.write() as s:
        other = admin.add_agent(s, "claude2", "alice").id
        admin.grant(s, "claude2", "acme", "work")
        other_grants = admin.grants_of(s, other)
    _do(hub, leases.claim, agent, grants, todo_id=tid)
    with pytest.raises(Conflict):
        _do(hub, leases.claim, other, other_grants, todo_id=tid)
    for op in (leases.heartbeat, leases.complete, leases.fail, leases.release):
        with pytest.raises(Conflict):
            _do(hub, op, other, other_grants, todo_id=tid)
    assert _do(hub, leases.claim, other, other_grants) == {"empty": True}


def test_heartbeat_extends_and_never_shrinks(hub: Hub) -> None:
    agent, tid, grants = _setup(hub)
    claim = _do(hub, leases.claim, agent, grants, todo_id=tid, lease_seconds=600)
    first = _todo(hub, tid).lease_expires_at
    _do(hub, leases.heartbeat, agent, grants, todo_id=tid, lease_seconds=10, lease_token=claim["lease_token"])
    assert _todo(hub, tid).lease_expires_at == first  # a shorter request does not shrink it
    hub.clock.advance(500)  # type: ignore[attr-defined]
    _do(hub, leases.heartbeat, agent, grants, todo_id=tid, lease_seconds=600)
    assert _todo(hub, tid).lease_expires_at > first
    with pytest.raises(InvalidArgument):
        _do(hub, leases.heartbeat, agent, grants, todo_id=tid, lease_seconds=86_401)


def test_expired_lease_is_reaped_as_lease_expired_and_holder_is_refused(hub: Hub) -> None:
    agent, tid, grants = _setup(hub)
    claim = _do(hub, leases.claim, agent, grants, todo_id=tid, lease_seconds=30)
    hub.clock.advance(31)  # type: ignore[attr-defined]
    with pytest.raises(Conflict):  # expired, even before the reaper runs
        _do(hub, leases.complete, agent, grants, todo_id=tid, lease_token=claim["lease_token"])
    counts, requeued = _do(hub, leases.reap)
    assert counts["expired"] == 1 and requeued == [tid]
    t = _todo(hub, tid)
    assert t.state == "pending" and t.failure_count == 1 and t.lease_token is None
    assert _attempts(hub, tid)[0]["outcome"] == "lease_expired"
    assert _do(hub, leases.reap)[0]["expired"] == 0  # a second reaper finds nothing


def test_fence_refuses_a_stale_holder_after_reclaim(hub: Hub) -> None:
    agent, tid, grants = _setup(hub)
    old = _do(hub, leases.claim, agent, grants, todo_id=tid, lease_seconds=30)
    hub.clock.advance(31)  # type: ignore[attr-defined]
    _do(hub, leases.reap)
    new = _do(hub, leases.claim, agent, grants, todo_id=tid, lease_seconds=300)
    assert new["attempt"] == 2 and new["lease_token"] != old["lease_token"]
    for op in (leases.heartbeat, leases.complete, leases.fail, leases.release):
        with pytest.raises(Conflict):
            _do(hub, op, agent, grants, todo_id=tid, lease_token=old["lease_token"])
    _do(hub, leases.complete, agent, grants, todo_id=tid, lease_token=new["lease_token"])


def test_fail_backs_off_then_dead_letters_and_human_retry_gives_fresh_budget(hub: Hub) -> None:
    agent, tid, grants = _setup(hub, max_attempts=3)
    for n in (1, 2):
        _do(hub, leases.claim, agent, grants, todo_id=tid)
        row = _do(hub, leases.fail, agent, grants, todo_id=tid, summary=f"boom {n}")
        assert row["state"] == "failed" and not row["dead_lettered"]
        t = _todo(hub, tid)
        assert (t.next_retry_at - t.updated_at).total_seconds() == backoff_seconds(n)
        with pytest.raises(Conflict):  # not claimable while waiting to retry
            _do(hub, leases.claim, agent, grants, todo_id=tid)
        assert _do(hub, leases.reap)[0]["retried"] == 0  # not due yet
        hub.clock.advance(backoff_seconds(n))  # type: ignore[attr-defined]
        assert _do(hub, leases.reap)[0]["retried"] == 1
        assert _todo(hub, tid).state == "pending"
    _do(hub, leases.claim, agent, grants, todo_id=tid)
    row = _do(hub, leases.fail, agent, grants, todo_id=tid, summary="boom 3")
    assert row["dead_lettered"] and row["next_retry_at"] is None and row["failure_count"] == 3
    with hub.db.read() as s:
        assert [r["id"] for r in todos.list_dead_letters(s)] == [tid]
    assert [a["outcome"] for a in _attempts(hub, tid)] == ["failed"] * 3
    assert _attempts(hub, tid)[2]["summary"] == "boom 3"
    retried = _do(hub, todos.retry_dead_letter, tid)
    assert retried["state"] == "pending" and retried["failure_count"] == 0
    assert _do(hub, leases.claim, agent, grants, todo_id=tid)["attempt"] == 4


def test_lease_expiry_past_max_attempts_dead_letters(hub: Hub) -> None:
    agent, tid, grants = _setup(hub, max_attempts=1)
    _do(hub, leases.claim, agent, grants, todo_id=tid, lease_seconds=5)
    hub.clock.advance(6)  # type: ignore[attr-defined]
    counts, requeued = _do(hub, leases.reap)
    assert counts == {"expired": 1, "dead_lettered": 1, "retried": 0} and requeued == []
    assert _todo(hub, tid).state == "failed" and _todo(hub, tid).next_retry_at is None


def test_release_costs_nothing(hub: Hub) -> None:
    agent, tid, grants = _setup(hub, max_attempts=1)
    _do(hub, leases.claim, agent, grants, todo_id=tid)
    row = _do(hub, leases.release, agent, grants, todo_id=tid)
    assert row["state"] == "pending" and row["failure_count"] == 0
    assert _attempts(hub, tid)[0]["outcome"] == "released"
    again = _do(hub, leases.claim, agent, grants)
    assert again["todo"]["id"] == tid and again["attempt"] == 2


def test_cancel_refuses_the_holder_afterwards(hub: Hub) -> None:
    agent, tid, grants = _setup(hub)
    claim = _do(hub, leases.claim, agent, grants, todo_id=tid)
    assert _do(hub, todos.cancel, tid)["state"] == "cancelled"
    with pytest.raises(Conflict):
        _do(hub, leases.complete, agent, grants, todo_id=tid, lease_token=claim["lease_token"])
    assert _attempts(hub, tid)[0]["outcome"] == "cancelled"


def test_assigned_todo_is_claimable_only_by_its_agent(hub: Hub) -> None:
    agent, tid, grants = _setup(hub)
    with hub.db.write() as s:
        other = admin.add_agent(s, "claude2", "alice").id
        admin.grant(s, "claude2", "acme", "work")
        other_grants = admin.grants_of(s, other)
    _do(hub, todos.assign, tid, agent)
    assert _do(hub, leases.claim, other, other_grants) == {"empty": True}
    with pytest.raises(Conflict):
        _do(hub, leases.claim, other, other_grants, todo_id=tid)
    assert _do(hub, leases.claim, agent, grants)["todo"]["id"] == tid
    with pytest.raises(Conflict):
        _do(hub, todos.assign, tid, other)  # only pending todos are (re)assigned


def test_priority_then_oldest(hub: Hub) -> None:
    agent, first, grants = _setup(hub)
    _, second, _ = _setup(hub)
    _, urgent, _ = _setup(hub)
    with hub.db.write() as s:
        s.get(Todo, urgent).priority = 10
    order = [_do(hub, leases.claim, agent, grants)["todo"]["id"] for _ in range(3)]
    assert order == [urgent, first, second]


def test_read_only_agent_is_forbidden_to_claim(hub: Hub) -> None:
    _, tid, _ = _setup(hub)
    with hub.db.write() as s:
        reader = admin.add_agent(s, "reader", "alice").id
        admin.grant(s, "reader", "acme", "read")
        grants = admin.grants_of(s, reader)
    with pytest.raises(Forbidden):
        _do(hub, leases.claim, reader, grants, todo_id=tid)


def test_todo_get_shows_attempts(hub: Hub) -> None:
    agent, tid, grants = _setup(hub)
    _do(hub, leases.claim, agent, grants, todo_id=tid)
    _do(hub, leases.release, agent, grants, todo_id=tid)
    with hub.db.read() as s:
        got = todos.get(s, grants, tid)
    assert got["payload"] == {"n": 1} and [a["outcome"] for a in got["attempts"]] == ["released"]


def test_unrung_todos_ring_once_then_with_backoff(hub: Hub) -> None:
    agent, tid, grants = _setup(hub)
    assert hub.reap()["rung"] == 1  # never rung (made outside the job): rung now
    assert hub.reap()["rung"] == 0
    hub.clock.advance(ring_after_seconds(1))  # type: ignore[attr-defined]
    assert hub.reap()["rung"] == 1
    assert _todo(hub, tid).ring_count == 2
    for _ in range(MAX_RINGS):
        hub.clock.advance(1000)  # type: ignore[attr-defined]
        hub.reap()
    assert _todo(hub, tid).ring_count == MAX_RINGS
    _do(hub, leases.claim, agent, grants, todo_id=tid, lease_seconds=86_400)
    hub.clock.advance(1000)  # type: ignore[attr-defined]
    assert hub.reap()["rung"] == 0  # claimed: no more rings


def test_assigning_to_an_agent_without_work_is_refused(hub: Hub) -> None:
    _, tid, _ = _setup(hub)
    with hub.db.write() as s:
        lonely = admin.add_agent(s, "lonely", "alice").id
    with pytest.raises(NotFound):  # the same answer as an unknown agent (issue 13 item 1)
        _do(hub, todos.assign, tid, lonely)


def test_rung_but_unclaimed_is_visible_in_the_todo(hub: Hub) -> None:
    """Issue 18.10: a push is not a delivery; the todo says how often it was rung and when."""
    agent, tid, grants = _setup(hub)
    with hub.db.read() as s:
        fresh = todos.get(s, grants, tid)
    assert (fresh["ring_count"], fresh["last_rung_at"]) == (0, None)
    hub.reap()
    hub.clock.advance(ring_after_seconds(1))  # type: ignore[attr-defined]
    hub.reap()
    rung_at = _todo(hub, tid).rung_at
    with hub.db.read() as s:
        got = todos.get(s, grants, tid)
        listed = todos.list_todos(s, grants)
    assert got["ring_count"] == 2 and got["state"] == "pending" and got["attempts"] == []
    assert got["last_rung_at"] == todos.iso(rung_at)
    assert [(r["id"], r["ring_count"]) for r in listed["todos"] if r["id"] == tid] == [(tid, 2)]


class _SkewedClock(SystemClock):
    """The system clock of a host whose wall clock runs two hours fast."""

    def now(self) -> datetime:
        return super().now() + timedelta(hours=2)


@pytest.mark.parametrize("by_id", [False, True], ids=["next", "by_id"])
def test_on_postgresql_leases_follow_the_database_clock_not_a_skewed_host(
    postgres_url: str, tmp_path: Path, by_id: bool
) -> None:
    # Issue 18 item 5: servers sharing the database may disagree on the time; one clock, the
    # database's now(), decides lease times (read inside the claim and complete statements
    # themselves since issue 11). A host two hours fast must not grant two extra hours.
    settings = Settings(home=tmp_path, database_url=fresh_postgres_database(postgres_url))
    configure(settings)
    hub = Hub(settings, clock=_SkewedClock(), role="cli")
    try:
        agent, tid, grants = _setup(hub)
        before = datetime.now(UTC)
        claim = _do(
            hub,
            leases.claim,
            agent,
            grants,
            lease_seconds=60,
            **({"todo_id": tid} if by_id else {"project": "acme"}),
        )
        after = datetime.now(UTC)
        assert claim["todo"]["id"] == tid
        expires = _todo(hub, tid).lease_expires_at
        assert expires is not None
        assert before + timedelta(seconds=59) <= expires <= after + timedelta(seconds=61)
        (attempt,) = _attempts(hub, tid)
        assert attempt["lease_expires_at"] == claim["lease_expires_at"]
        assert before - timedelta(seconds=1) <= datetime.fromisoformat(attempt["claimed_at"]) <= after
        _do(hub, leases.complete, agent, grants, todo_id=tid, lease_token=claim["lease_token"])
        (attempt,) = _attempts(hub, tid)
        ended = datetime.fromisoformat(attempt["ended_at"])
        assert attempt["outcome"] == "completed" and before <= ended <= datetime.now(UTC)
        assert _todo(hub, tid).updated_at <= datetime.now(UTC)
    finally:
        hub.close()
