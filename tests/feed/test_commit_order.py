"""Feed cursors never skip an event committed late behind them (issue 18.6, DESIGN.md §6.4).

On PostgreSQL a sequence allocates ids before commit: an event whose transaction began first
and committed last used to land below a cursor that had already moved past it. These tests
hold a transaction open on purpose (and, in the stress test, delay commits at random) and
check every reader that walks feed positions: ``feed_read`` with a stored cursor and with
``next_since``, the trailer's subscriptions, subscription seeding and ``inbox_read``.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from switchboard import admin
from switchboard.config import Settings
from switchboard.db import upgrade
from switchboard.feed import events as feed
from switchboard.feed import pages
from switchboard.hub import Hub
from switchboard.notify import subscriptions, trailer
from tests.services import fresh_postgres_database


@pytest.fixture
def pg_hub(postgres_url: str, tmp_path: Path) -> Iterator[Hub]:
    settings = Settings(home=tmp_path, database_url=fresh_postgres_database(postgres_url))
    upgrade(settings)
    hub = Hub(settings, role="cli")
    yield hub
    hub.close()


def _world(hub: Hub) -> tuple[str, str, dict[str, str]]:
    with hub.db.write() as s:
        admin.add_human(s, "alice")
        project = admin.add_project(s, "acme")
        agent = admin.add_agent(s, "a1", "alice")
        admin.grant(s, "a1", "acme", "work")
        return agent.id, project.id, admin.grants_of(s, agent.id)


def _append(hub: Hub, project_id: str, title: str) -> int:
    with hub.db.write() as s:
        return int(feed.append(s, hub.clock, project_id, "todo.created", title).id or 0)


def _read(hub: Hub, agent_id: str, grants: dict[str, str], since: int | None = None) -> dict:
    with hub.db.write() as s:
        return pages.read(s, agent_id, grants, since=since)


def test_event_committed_late_behind_a_cursor_is_still_read(pg_hub: Hub) -> None:
    agent_id, project_id, grants = _world(pg_hub)
    with pg_hub.db.write() as s:
        sub = subscriptions.subscribe(s, pg_hub.clock, agent_id, grants, ["todo.created"])
    assert trailer.collect(pg_hub.db, agent_id) is None

    with pg_hub.db.write() as early:  # begins first, commits last
        first = int(feed.append(early, pg_hub.clock, project_id, "todo.created", "early").id or 0)
        second = _append(pg_hub, project_id, "late")  # commits while `early` is open
        assert second > first  # positions follow the transactions, not the commit
        assert _read(pg_hub, agent_id, grants)["events"] == []  # stored cursor: nothing settled yet
        assert _read(pg_hub, agent_id, grants, since=0)["events"] == []
        assert trailer.collect(pg_hub.db, agent_id) is None
        with pg_hub.db.write() as s:  # a subscription made now is seeded below the open one
            late_sub = subscriptions.subscribe(s, pg_hub.clock, agent_id, grants, ["todo.created"],
                                               project="acme")
        assert late_sub["cursor"] < first

    page = _read(pg_hub, agent_id, grants)
    assert [e["title"] for e in page["events"]] == ["early", "late"]
    assert [e["title"] for e in _read(pg_hub, agent_id, grants, since=0)["events"]] == ["early", "late"]
    member = trailer.collect(pg_hub.db, agent_id)
    assert member is not None
    titles = [(i["id"], i["title"]) for i in member["pending"]]
    # Both subscriptions deliver both events, each once.
    assert sorted(titles) == sorted([(first, "early"), (second, "late")] * 2)
    assert trailer.collect(pg_hub.db, agent_id) is None
    assert sub["cursor"] == 0


def test_concurrent_writers_with_delayed_commits_skip_nothing(pg_hub: Hub) -> None:
    agent_id, project_id, grants = _world(pg_hub)
    rng = random.Random(18_6)
    delays = [[rng.uniform(0, 0.08) for _ in range(12)] for _ in range(8)]
    committed: list[int] = []
    lock = threading.Lock()
    failures: list[BaseException] = []

    def writer(plan: list[float]) -> None:
        try:
            for n, delay in enumerate(plan):
                with pg_hub.db.write() as s:
                    eid = int(feed.append(s, pg_hub.clock, project_id, "todo.created", f"e{n}").id or 0)
                    threading.Event().wait(delay)  # commit late, as a slow transaction would
                with lock:
                    committed.append(eid)
        except BaseException as exc:  # pragma: no cover - reported below
            failures.append(exc)

    threads = [threading.Thread(target=writer, args=(plan,)) for plan in delays]
    for t in threads:
        t.start()
    seen: list[int] = []
    explicit: list[int] = []
    since = 0
    while any(t.is_alive() for t in threads):
        seen += [e["id"] for e in _read(pg_hub, agent_id, grants)["events"]]
        page = _read(pg_hub, agent_id, grants, since=since)
        explicit += [e["id"] for e in page["events"]]
        since = page["next_since"]
    for t in threads:
        t.join()
    for _ in range(50):  # drain what settled after the writers stopped
        page = _read(pg_hub, agent_id, grants)
        more = _read(pg_hub, agent_id, grants, since=since)
        seen += [e["id"] for e in page["events"]]
        explicit += [e["id"] for e in more["events"]]
        since = more["next_since"]
        if not page["events"] and not more["events"] and not page["has_more"]:
            break
    assert not failures
    assert len(committed) == 96
    assert seen == sorted(committed)  # every event once, in position order
    assert explicit == sorted(committed)


def test_sqlite_reads_are_unchanged(tmp_path: Path) -> None:
    settings = Settings(home=tmp_path)
    upgrade(settings)
    hub = Hub(settings, role="cli")
    try:
        agent_id, project_id, grants = _world(hub)
        ids = [_append(hub, project_id, f"e{n}") for n in range(3)]
        assert ids == sorted(ids)
        assert [e["id"] for e in _read(hub, agent_id, grants)["events"]] == ids
    finally:
        hub.close()


def _restored_id(session: Any, n: int = 0) -> int:
    """An event id as a cluster a million transactions ahead of this one made it (a restored dump)."""
    from sqlalchemy import text

    xid = int(session.execute(text("SELECT pg_current_xact_id()::text::bigint")).scalar_one())
    return ((xid + 1_000_000) << 16) | n


def _restored_event(hub: Hub, project_id: str) -> int:
    """A feed event with :func:`_restored_id`, titled ``restored``; its id."""
    from sqlalchemy import insert

    from switchboard.models import FeedEvent

    with hub.db.write() as s:
        restored = _restored_id(s)
        s.execute(insert(FeedEvent).values(id=restored, project_id=project_id, kind="todo.created",
                                           title="restored", created_at=hub.clock.now()))
    return restored


def test_a_dump_restored_into_a_younger_cluster_keeps_new_ids_ahead(pg_hub: Hub) -> None:
    """A restore (``pg_restore`` into another cluster) brings ids made from that cluster's
    transaction ids, here a million transactions ahead of this one's. ``switchboard migrate``
    (``db.upgrade``, the migration environment at head) raises the id offset (migration 0023):
    the restored event is read, and a new event gets a larger id, read from the cursor that
    passed the restored one. Without
    it the restored event stayed above every reader's horizon and new events went below it."""
    from switchboard.notify import sessions

    agent_id, project_id, grants = _world(pg_hub)
    for _ in range(6):  # psycopg prepares the reads from the fifth run: they must see the new offset
        assert _read(pg_hub, agent_id, grants)["events"] == []
    restored = _restored_event(pg_hub, project_id)
    upgrade(pg_hub.settings)

    assert [e["id"] for e in _read(pg_hub, agent_id, grants)["events"]] == [restored]
    new = _append(pg_hub, project_id, "after the restore")
    assert new > restored
    assert [e["title"] for e in _read(pg_hub, agent_id, grants)["events"]] == ["after the restore"]
    with pg_hub.db.write() as s:
        assert sessions.emit(s, pg_hub.clock, agent_id, None, "wake", {"content": "x"}) > restored
    with pg_hub.db.write() as s:  # aligned: nothing more to raise
        assert feed.align_ids(s.connection()) is None


def test_a_writer_open_while_the_offset_is_raised_still_writes_above_the_restored_ids(pg_hub: Hub) -> None:
    """A review: ``align_ids`` set the offset from its own transaction id, so a writer whose
    transaction began before the raise and inserted after it got an id below the restored ones
    (an event lost behind the cursor, or a duplicate key). The offset now starts from the
    oldest running transaction."""
    import psycopg

    from tests.services import _libpq_url

    agent_id, project_id, grants = _world(pg_hub)
    assert _read(pg_hub, agent_id, grants)["events"] == []
    restored = _restored_event(pg_hub, project_id)
    assert [e["id"] for e in _read(pg_hub, agent_id, grants)["events"]] == []  # above the horizon: unread
    with psycopg.connect(_libpq_url(pg_hub.settings.database_url)) as writer:
        writer.execute("SELECT pg_current_xact_id()")  # a worker mid-job: its transaction began first
        upgrade(pg_hub.settings)
        written = writer.execute("INSERT INTO feed_events (project_id, kind, title, created_at) VALUES "
                                 "(%s, 'todo.created', 'open across the raise', now()) RETURNING id",
                                 (project_id,)).fetchone()
        writer.commit()
    assert written is not None and written[0] > restored
    assert [e["title"] for e in _read(pg_hub, agent_id, grants)["events"]] == ["restored", "open across the raise"]


@pytest.mark.parametrize("holder", ["agent_events", "agent_cursors", "subscriptions", "inbox_items"])
def test_the_offset_passes_the_largest_id_whichever_row_holds_it(pg_hub: Hub, holder: str) -> None:
    """A review: only a feed event held the largest id in the tests. The last transaction before a
    dump is often a wake (an agent event) or a cursor's move."""
    from sqlalchemy import text

    from switchboard.notify import sessions

    agent_id, project_id, grants = _world(pg_hub)
    with pg_hub.db.write() as s:
        restored = _restored_id(s, 7)
        row = {"a": agent_id, "p": project_id, "r": restored, "t": pg_hub.clock.now()}
        s.execute(text({
            "agent_events": "INSERT INTO agent_events (id, agent_id, kind, created_at) VALUES (:r, :a, 'wake', :t)",
            "agent_cursors": "INSERT INTO agent_cursors (agent_id, stream, project_id, position) "
                             "VALUES (:a, 'feed', :p, :r)",
            "subscriptions": "INSERT INTO subscriptions (id, kind, agent_id, project_id, seed_event_id, created_at) "
                             "VALUES ('sub_1', 'todo.created', :a, :p, :r, :t)",
            "inbox_items": "INSERT INTO inbox_items (id, agent_id, human_id, project_id, kind, title, status, "
                           "on_expiry, seq, created_at) VALUES ('inb_1', :a, (SELECT id FROM humans), :p, "
                           "'question', 'q', 'open', 'expire', :r, :t)",
        }[holder]), row)
    upgrade(pg_hub.settings)
    assert _append(pg_hub, project_id, "after") > restored
    with pg_hub.db.write() as s:
        assert sessions.emit(s, pg_hub.clock, agent_id, None, "wake", {"content": "x"}) > restored


def test_an_id_committed_behind_an_open_transaction_is_not_taken_for_another_timeline(pg_hub: Hub) -> None:
    """A review: ``ahead`` compared with the readers' horizon (``xmin``), and an id committed while
    an older transaction was open is above it and handed out at once (``question_post``'s
    ``seq``): ``inbox_wait(since=seq)`` was refused as a position from a restore. Every
    committed id is below ``xmax``."""
    import psycopg

    from switchboard.inbox import items as inbox
    from tests.services import _libpq_url

    agent_id, project_id, grants = _world(pg_hub)
    with psycopg.connect(_libpq_url(pg_hub.settings.database_url)) as older:
        older.execute("SELECT pg_current_xact_id()")  # a writer that began first, still open
        given = _append(pg_hub, project_id, "committed behind it")
        with pg_hub.db.write() as s:
            assert not feed.ahead(s, given)
            assert _read(pg_hub, agent_id, grants, since=given)["events"] == []
            assert inbox.read(s, agent_id, since=given)["items"] == []
            assert feed.ahead(s, given + 2**40)
        older.rollback()
