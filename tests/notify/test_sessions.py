"""Agent-stream events on the ledger (DESIGN.md §6.5a; issue 10 item 3): a stream's position
never passes an event committed late behind it, on SQLite and on PostgreSQL (where ids are
allocated before commit: the issue 18.6 class), so ``Last-Event-ID`` resumes with no gap."""

from __future__ import annotations

import random
import threading

import pytest

from switchboard import admin
from switchboard.hub import Hub
from switchboard.notify import sessions


def _agent(hub: Hub) -> str:
    with hub.db.write() as s:
        admin.add_human(s, "alice")
        return admin.add_agent(s, "a1", "alice").id


def _read_ids(hub: Hub, agent_id: str, after: int) -> list[int]:
    with hub.db.read() as s:
        return [int(e.id or 0) for e in sessions.read_after(s, agent_id, "ses_a", after, limit=10_000)]


def test_an_event_committed_late_is_not_passed_by_a_reader(hub: Hub) -> None:
    agent_id = _agent(hub)
    if hub.db.is_sqlite:
        pytest.skip("SQLite has one writer: ids are allocated in commit order")
    early = hub.db.write()
    s_early = early.__enter__()
    try:
        sessions.emit(s_early, hub.clock, agent_id, "ses_a", "wake", {"content": "early"})
        with hub.db.write() as s:
            sessions.emit(s, hub.clock, agent_id, "ses_a", "wake", {"content": "late"})
        assert _read_ids(hub, agent_id, 0) == []  # the committed one waits behind the open one
    finally:
        early.__exit__(None, None, None)
    ids = _read_ids(hub, agent_id, 0)
    assert len(ids) == 2 and ids == sorted(ids)


def test_concurrent_writers_with_delayed_commits_skip_nothing(hub: Hub) -> None:
    agent_id = _agent(hub)
    writers, per_writer = 6, 25
    done = threading.Event()
    rng = random.Random(7)
    delays = [[rng.uniform(0, 0.02) for _ in range(per_writer)] for _ in range(writers)]

    def write(n: int) -> None:
        for delay in delays[n]:
            with hub.db.write() as s:
                sessions.emit(s, hub.clock, agent_id, "ses_a", "wake", {"content": "x"})
                done.wait(delay)  # hold the transaction open a little: commits come out of order

    threads = [threading.Thread(target=write, args=(n,)) for n in range(writers)]
    for t in threads:
        t.start()
    position, seen = 0, []
    while any(t.is_alive() for t in threads):
        new = _read_ids(hub, agent_id, position)
        if new:
            seen += new
            position = new[-1]
    for t in threads:
        t.join()
    seen += _read_ids(hub, agent_id, position)
    assert len(seen) == writers * per_writer and len(set(seen)) == len(seen) and seen == sorted(seen)


def test_a_batch_picker_goes_round_the_live_sessions_least_recently_woken_first(hub: Hub) -> None:
    # Processing picks the session of many wakes in one transaction (issue 11): the result must be
    # what one pick() per wake gives, the least recently woken live session each time.
    agent_id = _agent(hub)
    with hub.db.write() as s:
        for name in ("ses_a", "ses_b", "ses_c"):
            sessions.attach(s, hub.clock, agent_id, name, f"stream_{name}")
        sessions.emit(s, hub.clock, agent_id, "ses_a", "wake", {})  # ses_a was woken last
    with hub.db.write() as s:
        picker = sessions.Picker(s, hub.clock)
        picked = [picker.pick(["ag_nobody", agent_id]) for _ in range(5)]
    assert [p[1] for p in picked if p] == ["ses_b", "ses_c", "ses_a", "ses_b", "ses_c"]
    assert {p[0] for p in picked if p} == {agent_id}
    with hub.db.write() as s:
        assert sessions.Picker(s, hub.clock).pick(["ag_nobody"]) is None


def test_agent_events_pruned_away_leave_the_ids_counting(hub: Hub) -> None:
    """A day without events prunes an agent's stream empty; the next event's id is above the
    ones before, so a stream resumed with an old ``Last-Event-ID`` gets it (migration 0022:
    SQLite without ``AUTOINCREMENT`` began again at 1)."""
    from datetime import timedelta

    from switchboard.clock import FixedClock

    agent_id = _agent(hub)
    then = FixedClock(hub.clock.now() - timedelta(seconds=sessions.EVENT_KEEP_SECONDS + 60))
    with hub.db.write() as s:
        for n in range(3):
            sessions.emit(s, then, agent_id, "ses_a", "wake", {"content": f"old {n}"})
    last_seen = max(_read_ids(hub, agent_id, 0))
    with hub.db.write() as s:
        assert sessions.prune(s, hub.clock) == 3
    with hub.db.write() as s:
        sessions.emit(s, hub.clock, agent_id, "ses_a", "wake", {"content": "after the quiet spell"})
    new = _read_ids(hub, agent_id, last_seen)
    assert len(new) == 1 and new[0] > last_seen
