"""The todo state machine (DESIGN.md §6.2) on SQLite and PostgreSQL: every legal and illegal
transition, leases, heartbeats, fences, backoff, dead letters, human retry, release, reaper."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, select, text, update
from sqlmodel import Session

from switchboard import admin
from switchboard.clock import FixedClock, SystemClock, iso
from switchboard.config import Settings
from switchboard.errors import Conflict, Forbidden, InvalidArgument, NotFound
from switchboard.hub import Hub
from switchboard.models import Attempt, FeedEvent, Todo
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
    # The todo's updated_at is the completion's time, the attempt's end (mutation testing).
    assert iso(_todo(hub, tid).updated_at) == attempt["ended_at"] > claim["todo"]["updated_at"]


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
    is_postgres = not hub.db.is_sqlite  # as the tools call it: the pick skips rows locked by others
    order = [_do(hub, leases.claim, agent, grants, is_postgres=is_postgres)["todo"]["id"] for _ in range(3)]
    assert order == [urgent, first, second]


def test_read_only_agent_is_forbidden_to_claim(hub: Hub) -> None:
    _, tid, _ = _setup(hub)
    with hub.db.write() as s:
        reader = admin.add_agent(s, "reader", "alice").id
        admin.grant(s, "reader", "acme", "read")
        grants = admin.grants_of(s, reader)
    with pytest.raises(Forbidden):
        _do(hub, leases.claim, reader, grants, todo_id=tid)
    # Next in queue too (a new-user run: it answered {"empty": true} with todos pending).
    with pytest.raises(Forbidden, match="read access only on its projects"):
        _do(hub, leases.claim, reader, grants)


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


def _ring_out(hub: Hub, tid: str) -> None:
    """Ring ``tid`` until it is rung out (:data:`MAX_RINGS` wakes, still pending)."""
    while _todo(hub, tid).ring_count < MAX_RINGS:
        hub.clock.advance(1000)  # type: ignore[attr-defined]
        assert hub.reap()["rung"] == 1
    hub.clock.advance(1000)  # type: ignore[attr-defined]
    assert hub.reap()["rung"] == 0


@pytest.mark.parametrize("back", ["release", "retry_dead_letter"])
def test_work_given_back_to_the_queue_rings_afresh(hub: Hub, back: str) -> None:
    # A todo rung out before its claim, then released by its agent (or dead-lettered and sent
    # back by a human), kept ring_count 8 and was never rung again: only a pull found it. Work
    # put back in the queue rings afresh, as what the reaper re-queues does (DESIGN.md §6.5).
    agent, tid, grants = _setup(hub, max_attempts=1)
    _ring_out(hub, tid)
    claim = _do(hub, leases.claim, agent, grants, todo_id=tid)
    if back == "release":
        _do(hub, leases.release, agent, grants, todo_id=tid, lease_token=claim["lease_token"])
    else:
        assert _do(hub, leases.fail, agent, grants, todo_id=tid, summary="boom")["dead_lettered"]
        _do(hub, todos.retry_dead_letter, tid)
    assert (_todo(hub, tid).state, _todo(hub, tid).ring_count, _todo(hub, tid).rung_at) == ("pending", 0, None)
    assert hub.reap()["rung"] == 1  # on the next pass, with no backoff to wait out
    _ring_out(hub, tid)


def test_assigning_to_an_agent_without_work_is_refused(hub: Hub) -> None:
    _, tid, _ = _setup(hub)
    with hub.db.write() as s:
        lonely = admin.add_agent(s, "lonely", "alice").id
    with pytest.raises(NotFound):  # the same answer as an unknown agent (issue 13 item 1)
        _do(hub, todos.assign, tid, lonely)


def test_rung_but_unclaimed_is_visible_in_the_todo(hub: Hub) -> None:
    """Issue 18.10: a push is not a delivery; the todo says how often it was rung and when."""
    _, tid, grants = _setup(hub)
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
def _events(hub: Hub, todo_id: str) -> list[tuple[str, dict[str, Any] | None]]:
    """The todo's feed events after ``todo.created``, each in the todo's project."""
    with hub.db.read() as s:
        project_id = s.get(Todo, todo_id).project_id
        rows = s.execute(select(FeedEvent).where(FeedEvent.subject_id == todo_id).order_by(FeedEvent.id)).scalars()
        return [(e.kind, e.data) for e in rows if e.kind != "todo.created" and e.project_id == project_id]


@pytest.mark.parametrize("bad", [0, 86_401, -5, True, 1.5, "60", None])
def test_lease_seconds_outside_1_to_86400_whole_seconds_is_invalid(hub: Hub, bad: Any) -> None:
    agent, tid, grants = _setup(hub)
    with pytest.raises(InvalidArgument) as err:
        _do(hub, leases.claim, agent, grants, todo_id=tid, lease_seconds=bad)
    assert str(err.value) == "lease_seconds must be a whole number from 1 to 86400"
    assert _todo(hub, tid).state == "pending"


@pytest.mark.parametrize("seconds", [1, 86_400])
def test_a_claim_holds_the_lease_for_exactly_lease_seconds(hub: Hub, seconds: int) -> None:
    agent, tid, grants = _setup(hub)
    claim = _do(hub, leases.claim, agent, grants, todo_id=tid, lease_seconds=seconds)
    (attempt,) = _attempts(hub, tid)
    claimed_at = datetime.fromisoformat(attempt["claimed_at"])
    assert datetime.fromisoformat(claim["lease_expires_at"]) - claimed_at == timedelta(seconds=seconds)
    assert attempt["lease_expires_at"] == claim["lease_expires_at"] == iso(_todo(hub, tid).lease_expires_at)
    assert (claim["attempt"], attempt["number"], attempt["outcome"], attempt["ended_at"]) == (1, 1, None, None)
    assert claim["todo"]["payload"] == {"n": 1} and claim["todo"]["state"] == "claimed"
    assert claim["todo"]["claimed_by"] == agent and claim["lease_token"] == _todo(hub, tid).lease_token
    assert iso(_todo(hub, tid).updated_at) == attempt["claimed_at"]
    assert _events(hub, tid) == [("todo.claimed", {"agent_id": agent, "attempt": 1})]


def test_the_default_lease_is_five_minutes(hub: Hub) -> None:
    agent, tid, grants = _setup(hub)
    claim = _do(hub, leases.claim, agent, grants)
    claimed_at = datetime.fromisoformat(_attempts(hub, tid)[0]["claimed_at"])
    assert datetime.fromisoformat(claim["lease_expires_at"]) - claimed_at == timedelta(seconds=300)


def test_a_lease_ends_at_its_expiry_instant(hub: Hub) -> None:
    agent, tid, grants = _setup(hub)
    _, live, _ = _setup(hub)
    _do(hub, leases.claim, agent, grants, todo_id=tid, lease_seconds=10)
    expires = _todo(hub, tid).lease_expires_at
    hub.clock.at = expires - timedelta(milliseconds=1)  # type: ignore[attr-defined]  # next reading: the expiry
    with pytest.raises(Conflict, match="^the lease has expired; claim the todo again$"):
        _do(hub, leases.heartbeat, agent, grants, todo_id=tid, lease_seconds=1)
    hub.clock.at = expires - timedelta(milliseconds=1)  # type: ignore[attr-defined]
    assert _do(hub, leases.reap)[0]["expired"] == 1  # due at the instant itself
    _do(hub, leases.claim, agent, grants, todo_id=live, lease_seconds=10)
    expires = _todo(hub, live).lease_expires_at
    hub.clock.at = expires - timedelta(milliseconds=2)  # type: ignore[attr-defined]  # next reading: 1 ms before
    _do(hub, leases.heartbeat, agent, grants, todo_id=live, lease_seconds=1)
    assert _todo(hub, live).lease_expires_at == expires - timedelta(milliseconds=1) + timedelta(seconds=1)


def test_claiming_a_held_todo_again_returns_the_same_lease_to_its_session_only(hub: Hub) -> None:
    agent, tid, grants = _setup(hub)
    first = _do(hub, leases.claim, agent, grants, todo_id=tid, session_key="ses_a")
    again = _do(hub, leases.claim, agent, grants, todo_id=tid, session_key="ses_a")
    assert (again["lease_token"], again["attempt"], again["lease_expires_at"]) == (
        first["lease_token"], 1, first["lease_expires_at"])
    with pytest.raises(Conflict, match="^another session of this agent holds the todo's lease$"):
        _do(hub, leases.claim, agent, grants, todo_id=tid, session_key="ses_b")
    assert len(_attempts(hub, tid)) == 1


def test_a_lease_without_a_session_is_claimed_again_by_any_session_of_the_agent(hub: Hub) -> None:
    agent, tid, grants = _setup(hub)
    first = _do(hub, leases.claim, agent, grants, todo_id=tid)
    assert _do(hub, leases.claim, agent, grants, todo_id=tid, session_key="ses_b")["lease_token"] == first[
        "lease_token"]


@pytest.mark.parametrize("op", [leases.heartbeat, leases.complete, leases.fail, leases.release])
def test_a_tokenless_call_from_another_session_is_refused_as_lease_lost(hub: Hub, op: Any) -> None:
    agent, tid, grants = _setup(hub)
    _do(hub, leases.claim, agent, grants, todo_id=tid, session_key="ses_a")
    for other in ("ses_b", None):
        with pytest.raises(Conflict) as err:
            _do(hub, op, agent, grants, todo_id=tid, session_key=other)
        assert str(err.value) == leases.LEASE_LOST
    assert _todo(hub, tid).state == "claimed"
    _do(hub, op, agent, grants, todo_id=tid, session_key="ses_a")  # the claiming session may


@pytest.mark.parametrize("op", [leases.heartbeat, leases.complete, leases.fail, leases.release])
def test_a_lease_claimed_without_a_session_is_refused_to_a_session(hub: Hub, op: Any) -> None:
    agent, tid, grants = _setup(hub)
    claim = _do(hub, leases.claim, agent, grants, todo_id=tid)
    with pytest.raises(Conflict) as err:
        _do(hub, op, agent, grants, todo_id=tid, session_key="ses_a")
    assert str(err.value) == leases.LEASE_LOST
    _do(hub, op, agent, grants, todo_id=tid, session_key="ses_b", lease_token=claim["lease_token"])  # token wins


def test_a_stale_token_or_an_unheld_todo_is_refused_with_its_reason(hub: Hub) -> None:
    agent, tid, grants = _setup(hub)
    _do(hub, leases.claim, agent, grants, todo_id=tid)
    with pytest.raises(Conflict, match="^the lease token is stale: another claim holds this todo now$"):
        _do(hub, leases.complete, agent, grants, todo_id=tid, lease_token="not-the-token")
    _, pending, _ = _setup(hub)
    with pytest.raises(Conflict, match="^the todo is pending, not claimed by this agent$"):
        _do(hub, leases.release, agent, grants, todo_id=pending)


def test_complete_stores_the_result_and_ends_the_attempt(hub: Hub) -> None:
    agent, tid, grants = _setup(hub)
    for result, stored in (({"ok": True}, {"ok": True}), ("shipped", {"value": "shipped"}), (0, {"value": 0}),
                           (None, None)):
        _, tid, _ = _setup(hub)
        claim = _do(hub, leases.claim, agent, grants, todo_id=tid)
        done = _do(hub, leases.complete, agent, grants, todo_id=tid, lease_token=claim["lease_token"],
                   result=result)
        t = _todo(hub, tid)
        assert t.result == stored and t.state == "done" and done["state"] == "done"
        assert (t.lease_token, t.lease_expires_at, t.claimed_by, t.lease_session) == (None, None, None, None)
        assert done["lease_expires_at"] is None and done["attempt_count"] == 1
        (attempt,) = _attempts(hub, tid)
        assert attempt["outcome"] == "completed" and attempt["ended_at"] == iso(t.updated_at)
        assert _events(hub, tid)[-1] == ("todo.completed", {"agent_id": agent, "attempt": 1})


def test_complete_by_the_claiming_session_without_a_token(hub: Hub) -> None:
    agent, tid, grants = _setup(hub)
    _do(hub, leases.claim, agent, grants, todo_id=tid, session_key="ses_a")
    assert _do(hub, leases.complete, agent, grants, todo_id=tid, session_key="ses_a", result=1)["state"] == "done"
    assert _todo(hub, tid).result == {"value": 1}


def test_complete_needs_a_work_grant_on_the_project_now(hub: Hub) -> None:
    agent, tid, grants = _setup(hub)
    claim = _do(hub, leases.claim, agent, grants, todo_id=tid)
    readonly = {pid: "read" for pid in grants}
    with pytest.raises(Forbidden):
        _do(hub, leases.complete, agent, readonly, todo_id=tid, lease_token=claim["lease_token"])
    with pytest.raises(NotFound):
        _do(hub, leases.complete, agent, {}, todo_id=tid, lease_token=claim["lease_token"])
    assert _todo(hub, tid).state == "claimed"


def test_heartbeat_moves_the_attempts_expiry_too(hub: Hub) -> None:
    agent, tid, grants = _setup(hub)
    _do(hub, leases.claim, agent, grants, todo_id=tid, lease_seconds=60)
    hub.clock.advance(30)  # type: ignore[attr-defined]
    beat = _do(hub, leases.heartbeat, agent, grants, todo_id=tid, lease_seconds=120)
    t = _todo(hub, tid)
    assert beat["lease_expires_at"] == iso(t.lease_expires_at) == _attempts(hub, tid)[0]["lease_expires_at"]
    assert t.lease_expires_at - t.updated_at == timedelta(seconds=120)
    assert beat["state"] == "claimed" and beat["claimed_by"] == agent


def test_fail_records_the_summary_cut_to_2000_characters_and_the_event(hub: Hub) -> None:
    agent, tid, grants = _setup(hub, max_attempts=2)
    _do(hub, leases.claim, agent, grants, todo_id=tid)
    row = _do(hub, leases.fail, agent, grants, todo_id=tid, summary="x" * 2001)
    t = _todo(hub, tid)
    assert (t.lease_token, t.lease_expires_at, t.claimed_by, t.lease_session) == (None, None, None, None)
    assert row["failure_count"] == 1 and row["next_retry_at"] == iso(t.next_retry_at)
    (attempt,) = _attempts(hub, tid)
    assert attempt["summary"] == "x" * 2000 and attempt["outcome"] == "failed"
    assert attempt["ended_at"] == iso(t.updated_at)
    assert _events(hub, tid)[-1] == ("todo.failed", {"agent_id": agent, "attempt": 1, "failures": 1,
                                                     "next_retry_at": iso(t.next_retry_at)})
    hub.clock.advance(30)  # type: ignore[attr-defined]
    _do(hub, leases.reap)
    _do(hub, leases.claim, agent, grants, todo_id=tid)
    _do(hub, leases.fail, agent, grants, todo_id=tid, summary="")
    assert _attempts(hub, tid)[1]["summary"] is None
    assert _events(hub, tid)[-1] == ("todo.dead_lettered", {"agent_id": agent, "attempt": 2, "failures": 2,
                                                            "next_retry_at": None})


def test_release_ends_the_attempt_and_clears_the_lease(hub: Hub) -> None:
    agent, tid, grants = _setup(hub)
    _do(hub, leases.claim, agent, grants, todo_id=tid, session_key="ses_a")
    row = _do(hub, leases.release, agent, grants, todo_id=tid, session_key="ses_a")
    t = _todo(hub, tid)
    assert (t.lease_token, t.lease_expires_at, t.claimed_by, t.lease_session) == (None, None, None, None)
    assert row["state"] == "pending" and row["claimed_by"] is None
    assert _attempts(hub, tid)[0]["ended_at"] == iso(t.updated_at)


def test_claiming_the_next_todo_honours_the_queue_and_project(hub: Hub) -> None:
    agent, tid, grants = _setup(hub)
    assert _do(hub, leases.claim, agent, grants, queue="other") == {"empty": True}
    assert _do(hub, leases.claim, agent, grants, project="acme", queue="other") == {"empty": True}
    assert _do(hub, leases.claim, agent, grants, project_ids=[]) == {"empty": True}
    assert _do(hub, leases.claim, agent, {}) == {"empty": True}
    claim = _do(hub, leases.claim, agent, grants, project="acme", queue="reviews", session_key="ses_a")
    assert claim["todo"]["id"] == tid and _todo(hub, tid).lease_session == "ses_a"


def test_reap_returns_expired_leases_oldest_first_up_to_the_limit(hub: Hub) -> None:
    agent, _, grants = _setup(hub)
    ids = [_setup(hub, max_attempts=2)[1] for _ in range(3)]
    for tid, seconds in zip(ids, (30, 10, 20), strict=True):
        _do(hub, leases.claim, agent, grants, todo_id=tid, lease_seconds=seconds)
    hub.clock.advance(31)  # type: ignore[attr-defined]
    counts, requeued = _do(hub, leases.reap, limit=2)
    assert counts == {"expired": 2, "dead_lettered": 0, "retried": 0} and requeued == [ids[1], ids[2]]
    assert _attempts(hub, ids[1])[0]["ended_at"] == iso(_todo(hub, ids[1]).updated_at)
    assert _do(hub, leases.reap)[1] == [ids[0]]


def test_reap_dead_letters_with_an_event_and_retries_due_todos_up_to_the_limit(hub: Hub) -> None:
    agent, tid, grants = _setup(hub, max_attempts=1)
    _do(hub, leases.claim, agent, grants, todo_id=tid, lease_seconds=5)
    failing = [_setup(hub)[1] for _ in range(3)]
    for other in failing:
        _do(hub, leases.claim, agent, grants, todo_id=other)
        _do(hub, leases.fail, agent, grants, todo_id=other)
    hub.clock.advance(30)  # type: ignore[attr-defined]  # the first backoff: all three are due
    counts, requeued = _do(hub, leases.reap, limit=2)
    assert counts == {"expired": 1, "dead_lettered": 1, "retried": 2}
    assert requeued[0] in failing and len(requeued) == 2 and tid not in requeued
    assert _events(hub, tid)[-1] == ("todo.dead_lettered", {"failures": 1, "reason": "lease_expired"})
    assert _todo(hub, tid).failure_count == 1 and _todo(hub, tid).lease_token is None
    assert _do(hub, leases.reap)[0] == {"expired": 0, "dead_lettered": 0, "retried": 1}
    assert {_todo(hub, t).state for t in failing} == {"pending"}
    assert {_todo(hub, t).next_retry_at for t in failing} == {None}


def test_reap_keeps_the_outcome_of_an_attempt_that_already_ended(hub: Hub) -> None:
    agent, tid, grants = _setup(hub)
    _do(hub, leases.claim, agent, grants, todo_id=tid, lease_seconds=5)
    with hub.db.write() as s:  # an attempt ended by another path, its todo still claimed
        s.execute(update(Attempt).where(Attempt.todo_id == tid).values(outcome="cancelled"))
    hub.clock.advance(6)  # type: ignore[attr-defined]
    assert _do(hub, leases.reap)[0]["expired"] == 1
    assert _attempts(hub, tid)[0]["outcome"] == "cancelled"


def test_lease_times_come_from_the_database_clock_on_postgres_with_the_system_clock(postgres_url: str) -> None:
    engine = create_engine(postgres_url)
    try:
        with Session(engine) as s:
            s.execute(text("SET TIME ZONE 'Asia/Kolkata'"))  # the instant must survive any session zone
            db_now = s.execute(text("SELECT now()")).scalar_one()
            got = leases.lease_now(s, SystemClock())
            assert got == db_now and got.utcoffset() == timedelta(hours=5, minutes=30)
            fixed = FixedClock(datetime(2026, 1, 1, tzinfo=UTC))
            assert leases.lease_now(s, fixed) == fixed.at  # an injected clock wins (tests)
    finally:
        engine.dispose()


def test_lease_times_come_from_the_clock_on_sqlite(tmp_path: Path) -> None:
    engine = create_engine(f"sqlite:///{tmp_path / 'any.db'}")
    try:
        with Session(engine) as s:
            before = datetime.now(UTC)
            got = leases.lease_now(s, SystemClock())
            assert before <= got <= datetime.now(UTC) and got.tzinfo is not None
            fixed = FixedClock(datetime(2026, 1, 1, tzinfo=UTC))
            assert leases.lease_now(s, fixed) == fixed.at
    finally:
        engine.dispose()


@pytest.mark.parametrize("session_key", [None, "ses_a"])
def test_completing_one_held_todo_leaves_the_others_held(hub: Hub, session_key: str | None) -> None:
    agent, tid, grants = _setup(hub)
    _, other, _ = _setup(hub)
    for t in (tid, other):
        _do(hub, leases.claim, agent, grants, todo_id=t, session_key=session_key)
    _do(hub, leases.complete, agent, grants, todo_id=tid, session_key=session_key)
    assert (_todo(hub, tid).state, _todo(hub, other).state) == ("done", "claimed")


def test_complete_is_refused_where_the_agent_works_elsewhere_but_only_reads_here(hub: Hub) -> None:
    agent, tid, grants = _setup(hub)
    claim = _do(hub, leases.claim, agent, grants, todo_id=tid)
    with hub.db.write() as s:
        admin.add_project(s, "beta")
        admin.grant(s, "claude1", "beta", "work")
        mixed = {pid: ("read" if pid in grants else "work") for pid in admin.grants_of(s, agent)}
    with pytest.raises(Forbidden):
        _do(hub, leases.complete, agent, mixed, todo_id=tid, lease_token=claim["lease_token"])
    assert _todo(hub, tid).state == "claimed"


def test_complete_at_the_expiry_instant_is_refused(hub: Hub) -> None:
    agent, tid, grants = _setup(hub)
    claim = _do(hub, leases.claim, agent, grants, todo_id=tid, lease_seconds=10)
    hub.clock.at = _todo(hub, tid).lease_expires_at - timedelta(milliseconds=1)  # type: ignore[attr-defined]
    with pytest.raises(Conflict, match="^the lease has expired; claim the todo again$"):
        _do(hub, leases.complete, agent, grants, todo_id=tid, lease_token=claim["lease_token"])
    assert _todo(hub, tid).state == "claimed"


def test_every_operation_runs_on_the_system_clock(tmp_path: Path) -> None:
    settings = Settings(home=tmp_path)
    configure(settings)
    hub = Hub(settings, role="cli")  # the wall clock, as in production
    try:
        agent, tid, grants = _setup(hub, max_attempts=1)
        _do(hub, leases.claim, agent, grants, todo_id=tid, lease_seconds=60)
        assert _do(hub, leases.heartbeat, agent, grants, todo_id=tid, lease_seconds=120)["state"] == "claimed"
        assert _do(hub, leases.release, agent, grants, todo_id=tid)["state"] == "pending"
        _do(hub, leases.claim, agent, grants, todo_id=tid)
        assert _do(hub, leases.fail, agent, grants, todo_id=tid)["dead_lettered"]
        _, other, _ = _setup(hub)
        _do(hub, leases.claim, agent, grants, todo_id=other)
        assert _do(hub, leases.complete, agent, grants, todo_id=other)["state"] == "done"
        assert _do(hub, leases.reap) == ({"expired": 0, "dead_lettered": 0, "retried": 0}, [])
    finally:
        hub.close()


@pytest.mark.parametrize("op", [leases.heartbeat, leases.complete, leases.fail, leases.release])
def test_every_operation_is_allowed_until_the_last_millisecond_of_the_lease(hub: Hub, op: Any) -> None:
    agent, tid, grants = _setup(hub)
    claim = _do(hub, leases.claim, agent, grants, todo_id=tid, lease_seconds=10)
    hub.clock.at = _todo(hub, tid).lease_expires_at - timedelta(milliseconds=2)  # type: ignore[attr-defined]
    _do(hub, op, agent, grants, todo_id=tid, lease_token=claim["lease_token"])  # one reading: 1 ms before


def test_reaping_an_expired_lease_clears_it_and_ends_the_current_attempt(hub: Hub) -> None:
    agent, tid, grants = _setup(hub)
    _do(hub, leases.claim, agent, grants, todo_id=tid, session_key="ses_a")
    _do(hub, leases.release, agent, grants, todo_id=tid, session_key="ses_a")
    _do(hub, leases.claim, agent, grants, todo_id=tid, lease_seconds=5, session_key="ses_a")
    hub.clock.advance(6)  # type: ignore[attr-defined]
    _do(hub, leases.reap)
    t = _todo(hub, tid)
    assert (t.state, t.lease_token, t.lease_expires_at, t.claimed_by, t.lease_session) == (
        "pending", None, None, None, None)
    first, second = _attempts(hub, tid)
    assert (first["outcome"], second["outcome"], second["ended_at"]) == ("released", "lease_expired",
                                                                       iso(t.updated_at))


def test_one_reap_counts_every_dead_letter(hub: Hub) -> None:
    agent, _, grants = _setup(hub)
    ids = [_setup(hub, max_attempts=1)[1] for _ in range(2)]
    for tid in ids:
        _do(hub, leases.claim, agent, grants, todo_id=tid, lease_seconds=5)
    hub.clock.advance(6)  # type: ignore[attr-defined]
    assert _do(hub, leases.reap) == ({"expired": 2, "dead_lettered": 2, "retried": 0}, [])
    for tid in ids:
        assert _events(hub, tid)[-1] == ("todo.dead_lettered", {"failures": 1, "reason": "lease_expired"})


def test_a_transition_from_a_stale_read_is_a_conflict(hub: Hub) -> None:
    agent, tid, grants = _setup(hub)
    _do(hub, leases.claim, agent, grants, todo_id=tid)
    with hub.db.write() as s:
        stale = s.get(Todo, tid)
        s.execute(update(Todo.__table__).where(Todo.__table__.c.id == tid).values(lease_token="a-newer-claim"))
        with pytest.raises(Conflict) as err:
            leases._transition(s, stale, state="pending")
        assert str(err.value) == "the todo changed meanwhile; read it again"
    assert _todo(hub, tid).state == "claimed"


def test_claiming_the_next_todo_takes_only_from_projects_it_works_on(hub: Hub) -> None:
    agent, tid, grants = _setup(hub)
    with hub.db.write() as s:
        for name in ("beta", "gamma", "delta"):
            project = admin.add_project(s, name)
            todos.create(s, hub.clock, project_id=project.id, queue="reviews", kind="test", title=name, payload=None)
        admin.grant(s, "claude1", "beta", "work")
        admin.grant(s, "claude1", "gamma", "read")  # delta: no grant at all
        grants = admin.grants_of(s, agent)
    assert _do(hub, leases.claim, agent, grants, project="beta")["todo"]["title"] == "beta"
    assert _do(hub, leases.claim, agent, grants, project="beta") == {"empty": True}  # acme's is not beta's
    with pytest.raises(Forbidden):
        _do(hub, leases.claim, agent, grants, project="gamma")
    assert _do(hub, leases.claim, agent, grants)["todo"]["id"] == tid
    assert _do(hub, leases.claim, agent, grants) == {"empty": True}  # gamma (read) and delta stay pending


def test_at_equal_priority_then_oldest_first_then_by_id(hub: Hub) -> None:
    agent, first, grants = _setup(hub)
    _, second, _ = _setup(hub)
    _, third, _ = _setup(hub)
    ids = {first: "td_zzzz_oldest", second: "td_yyyy_tied_made_first", third: "td_aaaa_tied_made_last"}
    with hub.db.write() as s:
        # The oldest gets the largest id (an order by id alone would take it last), and of two
        # made at one instant the one made last gets the smaller id (stored order would differ).
        at = s.get(Todo, first).created_at
        for old, new in ids.items():
            s.execute(update(Todo.__table__).where(Todo.__table__.c.id == old).values(
                id=new, created_at=at if old == first else at + timedelta(seconds=1)))
    order = [_do(hub, leases.claim, agent, grants)["todo"]["id"] for _ in range(3)]
    assert order == ["td_zzzz_oldest", "td_aaaa_tied_made_last", "td_yyyy_tied_made_first"]


def test_claim_refusals_say_why(hub: Hub) -> None:
    agent, tid, grants = _setup(hub)
    _, assigned, _ = _setup(hub)
    with hub.db.write() as s:
        other = admin.add_agent(s, "claude2", "alice").id
        admin.grant(s, "claude2", "acme", "work")
    _do(hub, todos.assign, assigned, other)
    with pytest.raises(Conflict) as err:
        _do(hub, leases.claim, agent, grants, todo_id=assigned)
    assert str(err.value) == "the todo is assigned to another agent"
    _do(hub, leases.claim, agent, grants, todo_id=tid)
    _do(hub, leases.complete, agent, grants, todo_id=tid)
    with pytest.raises(Conflict) as err:
        _do(hub, leases.claim, agent, grants, todo_id=tid)
    assert str(err.value) == "the todo is not pending"


def test_a_retry_is_due_at_its_instant_and_only_its_own(hub: Hub) -> None:
    agent, tid, grants = _setup(hub)
    _do(hub, leases.claim, agent, grants, todo_id=tid)
    _do(hub, leases.fail, agent, grants, todo_id=tid)
    hub.clock.advance(10)  # type: ignore[attr-defined]
    _, later, _ = _setup(hub)
    _do(hub, leases.claim, agent, grants, todo_id=later)
    _do(hub, leases.fail, agent, grants, todo_id=later)  # due 10 s after the first
    due = _todo(hub, tid).next_retry_at
    hub.clock.at = due - timedelta(milliseconds=1)  # type: ignore[attr-defined]  # next reading: the instant
    assert _do(hub, leases.reap) == ({"expired": 0, "dead_lettered": 0, "retried": 1}, [tid])
    t = _todo(hub, tid)
    assert (t.state, t.next_retry_at, t.updated_at) == ("pending", None, due)
    assert _todo(hub, later).state == "failed" and _todo(hub, later).next_retry_at is not None


@pytest.mark.parametrize("op", [leases.complete, leases.fail, leases.release])
def test_ending_a_lease_forgets_its_session(hub: Hub, op: Any) -> None:
    agent, tid, grants = _setup(hub)
    _do(hub, leases.claim, agent, grants, todo_id=tid, session_key="ses_a")
    _do(hub, op, agent, grants, todo_id=tid, session_key="ses_a")
    t = _todo(hub, tid)
    assert (t.lease_session, t.lease_token, t.claimed_by, t.lease_expires_at) == (None, None, None, None)


@pytest.mark.parametrize("session_key", [None, "ses_a"])
def test_a_late_tokenless_complete_from_the_claimer_says_the_lease_expired(hub: Hub, session_key: str | None) -> None:
    agent, tid, grants = _setup(hub)
    _do(hub, leases.claim, agent, grants, todo_id=tid, lease_seconds=5, session_key=session_key)
    hub.clock.advance(6)  # type: ignore[attr-defined]
    with pytest.raises(Conflict) as err:
        _do(hub, leases.complete, agent, grants, todo_id=tid, session_key=session_key)
    assert str(err.value) == "the lease has expired; claim the todo again"
