"""Kind-filtered feed reads go through ``ix_feed_project_kind_id``, one index range per project
and kind (issue 11, :func:`switchboard.feed.events.tail`).

SQLite here has no planner statistics (nothing runs ANALYZE), and with none it planned
``project_id = ? AND kind IN (<2 or more kinds>) AND id > ? ORDER BY id LIMIT n`` through
``ix_feed_project_id`` with the kind as a filter: every event of the project after the cursor
read by each subscription drain (in the write transaction of a tool call, the notifications
trailer) and each ``feed_read`` with ``kinds``. The statements a drain and a ``feed_read``
execute are captured and explained with the values they ran with, on SQLite and PostgreSQL
(statistics gathered after the other kind's events came, as on a busy instance).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event, insert, text

from switchboard import admin
from switchboard.clock import utcnow
from switchboard.feed import pages
from switchboard.hub import Hub
from switchboard.models import FeedEvent
from switchboard.notify import subscriptions, trailer
from tests.conftest import World
from tests.queue.conftest import configured_world, explain, settings_for

OTHER = 3000
WANTED = ("question.posted", "approval.requested", "approval.decided", "todo.failed", "friend.requested")


@pytest.fixture(params=["sqlite", "postgresql"])
def world_hub(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[World, Hub]]:
    with configured_world(settings_for(request, tmp_path, request.param)) as pair:
        yield pair


def _busy_projects(world: World, hub: Hub) -> tuple[str, dict[str, str]]:
    """acme and beta (read), each with ``OTHER`` ``todo.claimed`` events and one of every wanted
    kind spread among them, and gamma (no grant) with twice as many ``todo.claimed``, statistics
    gathered on PostgreSQL; beta's id, the agent's grants."""
    with hub.db.write() as s:
        beta = admin.add_project(s, "beta").id
        gamma = admin.add_project(s, "gamma").id
        admin.grant(s, "claude1", "beta", "read")
        grants = admin.grants_of(s, world.agent_id)
    now = utcnow()
    for pid, n in ((world.project_id, OTHER), (beta, OTHER), (gamma, 2 * OTHER)):
        rows = [{"project_id": pid, "kind": "todo.claimed", "title": "t", "created_at": now} for _ in range(n)]
        if pid != gamma:
            for i, kind in enumerate(WANTED):
                rows[i * OTHER // len(WANTED) + 1]["kind"] = kind
        with hub.db.write() as s:
            s.execute(insert(FeedEvent), rows)
    if not hub.db.is_sqlite:
        with hub.db.engine.connect() as conn:
            conn.exec_driver_sql("ANALYZE")
            conn.commit()
    return beta, grants


def _feed_reads(hub: Hub, run: Any) -> list[tuple[str, Any]]:
    """The statements reading ``feed_events`` while ``run()`` runs, with their values."""
    seen: list[tuple[str, Any]] = []

    def capture(_conn: Any, _cursor: Any, statement: str, parameters: Any, *_: Any) -> None:
        if statement.lstrip().upper().startswith("SELECT") and "FROM feed_events" in statement:
            seen.append((statement, parameters))

    event.listen(hub.db.engine, "before_cursor_execute", capture)
    try:
        run()
    finally:
        event.remove(hub.db.engine, "before_cursor_execute", capture)
    assert seen
    return seen


def _ranges(hub: Hub, reads: list[tuple[str, Any]], index: str, branches: list[int], also: str = "") -> None:
    """Each statement reads ``branches[i]`` index ranges of ``index`` (or ``also``), merged by id,
    and nothing else."""
    assert len(reads) == len(branches), reads
    others = {"ix_feed_project_id", "ix_feed_project_kind_id", "feed_events_pkey"} - {index, also}
    for (sql, values), count in zip(reads, branches):
        plan = explain(hub, sql, values)
        print(sql, plan, sep="\n")
        assert plan.count(index) + (plan.count(also) if also else 0) == count, plan
        assert not [name for name in others if name in plan], plan
        assert not [step for step in ("SCAN feed_events", "MULTI-INDEX OR", "Seq Scan", "Bitmap", "Sort  (cost")
                    if step in plan], plan
        if count > 1:
            assert "MERGE (UNION ALL)" in plan or "Merge Append" in plan, plan


@pytest.mark.parametrize("kinds", [1, 2, 5])
def test_a_subscription_drain_reads_only_its_kinds(world_hub: tuple[World, Hub], kinds: int) -> None:
    world, hub = world_hub
    with hub.db.write() as s:  # seeded before the events: all of them are pending
        subscriptions.subscribe(s, hub.clock, world.agent_id, admin.grants_of(s, world.agent_id),
                                list(WANTED[:kinds]), None)
    _busy_projects(world, hub)
    drained: list[Any] = []

    def drain() -> None:
        with hub.db.write() as s:
            drained.append(trailer.drain(s, world.agent_id))

    reads = _feed_reads(hub, drain)
    items, more = drained[0]
    assert [i["kind"] for i in items] == [*WANTED[:kinds], *WANTED[:kinds]] and not more  # acme's, then beta's
    _ranges(hub, reads, "ix_feed_project_kind_id", [kinds, kinds])  # one statement per project


@pytest.mark.parametrize("kinds", [1, 2, 5])
def test_a_feed_read_with_kinds_reads_only_those_kinds(world_hub: tuple[World, Hub], kinds: int) -> None:
    world, hub = world_hub
    beta, grants = _busy_projects(world, hub)
    wanted = list(WANTED[:kinds])
    pages_read: list[dict[str, Any]] = []

    def read() -> None:
        with hub.db.write() as s:  # stored cursors over both projects, then from an explicit id
            pages_read.append(pages.read(s, world.agent_id, grants, kinds=wanted, limit=kinds + 1))
            pages_read.append(pages.read(s, world.agent_id, grants, kinds=wanted, project="beta", since=0))

    reads = _feed_reads(hub, read)
    stored, explicit = pages_read
    assert [e["kind"] for e in stored["events"]] == [*wanted, wanted[0]]
    assert [e["project_id"] for e in stored["events"]] == [world.project_id] * kinds + [beta]
    assert stored["has_more"] == (kinds > 1)  # 2 x kinds events, a page of kinds + 1
    assert [e["kind"] for e in explicit["events"]] == wanted and not explicit["has_more"]
    _ranges(hub, reads, "ix_feed_project_kind_id", [2 * kinds, kinds])


def test_a_feed_read_over_several_projects_reads_each_by_project(world_hub: tuple[World, Hub]) -> None:
    """Without kinds, an OR of per-project cursors was a MULTI-INDEX OR on SQLite, every event
    after the cursors read and sorted for a page, and one walk of the primary key filtered by
    project on PostgreSQL. Now a limited range per project; PostgreSQL may still walk the key for
    one (``project_id = ?`` alone is not selective here, and its statistics say so)."""
    world, hub = world_hub
    _, grants = _busy_projects(world, hub)
    pages_read: list[dict[str, Any]] = []

    def read() -> None:
        with hub.db.write() as s:  # stored cursors over both projects, then from an explicit id
            pages_read.append(pages.read(s, world.agent_id, grants, limit=10))
            pages_read.append(pages.read(s, world.agent_id, grants, since=0, limit=10))

    reads = _feed_reads(hub, read)
    stored, explicit = pages_read
    assert [e["project_id"] for e in stored["events"]] == [world.project_id] * 10 and stored["has_more"]
    assert explicit["events"] == stored["events"] and explicit["has_more"]
    _ranges(hub, reads, "ix_feed_project_id", [2, 2], also="" if hub.db.is_sqlite else "feed_events_pkey")


def test_postgresql_plans_the_union_for_its_values_every_time(world_hub: tuple[World, Hub]) -> None:
    """Prepared by psycopg from its fifth run, the union got a generic plan from the eleventh
    that walked ``feed_events_pkey`` in every branch (57-87 ms past 120,000 events of another
    kind, against 1.5-3 ms: a review). :func:`switchboard.feed.events.tail` runs it unprepared;
    the connection keeps preparing everything else."""
    world, hub = world_hub
    if hub.db.is_sqlite:
        pytest.skip("psycopg's server-side prepared statements")
    _, grants = _busy_projects(world, hub)
    with hub.db.read() as s:
        for _ in range(20):
            pages.read(s, world.agent_id, grants, kinds=list(WANTED[:2]), since=0, limit=3)
        prepared = s.execute(text("SELECT statement FROM pg_prepared_statements")).scalars().all()
        threshold = s.connection().connection.driver_connection.prepare_threshold  # type: ignore[union-attr]
    assert not [sql for sql in prepared if "UNION ALL" in sql], prepared
    assert threshold is not None
