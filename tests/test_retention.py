"""Retention (issue 14) on SQLite and PostgreSQL: which bodies and rows :func:`prune` drops."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import select

from switchboard.clock import FixedClock
from switchboard.config import Settings
from switchboard.feed import events as feed
from switchboard.hub import Hub
from switchboard.models import Delivery, FeedEvent
from switchboard.retention import RetentionSchedule, prune
from tests.conftest import World, configure
from tests.services import fresh_postgres_database

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


@pytest.fixture(params=["sqlite", "postgresql"])
def setup(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Hub, World]]:
    if request.param == "sqlite":
        settings = Settings(home=tmp_path)
    else:
        settings = Settings(home=tmp_path, database_url=fresh_postgres_database(request.getfixturevalue("postgres_url")))
    world = configure(settings)
    hub = Hub(settings, clock=FixedClock(NOW), role="cli")
    try:
        yield hub, world
    finally:
        hub.close()


def _delivery(hub: Hub, world: World, key: str, status: str, age_days: float) -> str:
    with hub.db.write() as s:
        d = Delivery(source_id=world.source_id, project_id=world.project_id, dedup_key=key, status=status,
                     raw_body=b'{"x": 1}', body_bytes=8, received_at=NOW - timedelta(days=age_days))
        s.add(d)
        s.flush()
        return d.id


def test_prune_drops_settled_bodies_after_7_days_and_rows_after_90(setup: tuple[Hub, World]) -> None:
    hub, world = setup
    fresh = _delivery(hub, world, "k-fresh", "processed", 1)
    week = _delivery(hub, world, "k-week", "processed", 8)
    rejected_old = _delivery(hub, world, "k-rej", "failed", 30)
    held = _delivery(hub, world, "k-held", "quarantined", 20)  # keeps its body for a release
    waiting = _delivery(hub, world, "k-wait", "received", 100)  # never dropped unprocessed
    ancient = _delivery(hub, world, "k-old", "processed", 91)
    with hub.db.write() as s:
        old_event = feed.append(s, FixedClock(NOW - timedelta(days=95)), world.project_id, "delivery.received", "old")
        new_event = feed.append(s, FixedClock(NOW - timedelta(days=2)), world.project_id, "delivery.received", "new")
        old_id, new_id = old_event.id, new_event.id

    dry = prune(hub, dry_run=True)
    assert (dry.raw_bodies, dry.deliveries, dry.feed_events) == (3, 1, 1)
    assert dry.body_cutoff == NOW - timedelta(days=7) and dry.row_cutoff == NOW - timedelta(days=90)
    done = prune(hub)
    assert (done.raw_bodies, done.deliveries, done.feed_events, done.dry_run) == (3, 1, 1, False)
    with hub.db.read() as s:
        rows = {d.id: d for d in s.execute(select(Delivery)).scalars()}
        events = set(s.execute(select(FeedEvent.id)).scalars())
    assert set(rows) == {fresh, week, rejected_old, held, waiting}  # ancient is gone
    assert ancient not in rows
    assert rows[fresh].raw_body == b'{"x": 1}' and rows[held].raw_body is not None
    assert rows[waiting].raw_body is not None
    assert rows[week].raw_body is None and rows[rejected_old].raw_body is None
    assert rows[week].dedup_key == "k-week"  # the dedup key stays with the retained row
    assert old_id not in events and new_id in events
    assert prune(hub).raw_bodies == 0


def test_prune_goes_in_batches(setup: tuple[Hub, World], monkeypatch: pytest.MonkeyPatch) -> None:
    from switchboard import retention

    hub, world = setup
    monkeypatch.setattr(retention, "BATCH", 2)
    for n in range(5):
        _delivery(hub, world, f"k{n}", "processed", 100)
    assert prune(hub).deliveries == 5
    with hub.db.read() as s:
        assert s.execute(select(Delivery)).first() is None


def test_old_feed_events_go_oldest_first_in_batches(setup: tuple[Hub, World],
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Feed events are walked by id, ``BATCH`` per transaction, up to the first one newer than
    the cutoff (issue 11: filtered by ``created_at`` alone, the read went through the whole
    table in the write transaction when nothing was old enough). Counted as deleted."""
    from switchboard import retention

    hub, world = setup
    monkeypatch.setattr(retention, "BATCH", 2)
    ages = [95, 94, 93, 92, 91, 5, 4]
    with hub.db.write() as s:
        ids = [feed.append(s, FixedClock(NOW - timedelta(days=age)), world.project_id, "delivery.received",
                           f"{age} days").id for age in ages]
    assert prune(hub).feed_events == 5
    with hub.db.read() as s:
        assert set(s.execute(select(FeedEvent.id)).scalars()) == set(ids[5:])
    assert prune(hub).feed_events == 0


def test_an_event_dated_ahead_does_not_hold_back_the_old_ones(setup: tuple[Hub, World],
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """A review: one low-id event with a future ``created_at`` (a clock set ahead, then put
    back) limited each pass to fewer than ``BATCH`` deletions, and to none behind a batch of
    them. The walk steps over it."""
    from switchboard import retention

    hub, world = setup
    monkeypatch.setattr(retention, "BATCH", 4)
    ages = [-1, 95, 94, 93, 92, 91, 93, 92, 91, 5]
    with hub.db.write() as s:
        ids = [feed.append(s, FixedClock(NOW - timedelta(days=age)), world.project_id, "delivery.received",
                           f"{age} days").id for age in ages]
    assert prune(hub).feed_events == 8
    with hub.db.read() as s:
        assert set(s.execute(select(FeedEvent.id)).scalars()) == {ids[0], ids[-1]}


def test_retention_schedule_runs_at_most_once_per_interval(setup: tuple[Hub, World]) -> None:
    hub, world = setup
    schedule = RetentionSchedule(interval_seconds=3600)
    assert schedule.maybe_run(hub, 1000.0) is not None  # due at once
    _delivery(hub, world, "late", "processed", 100)
    assert schedule.maybe_run(hub, 1000.0 + 3599) is None
    assert schedule.maybe_run(hub, 1000.0 + 3600).deliveries == 1


def test_a_feed_emptied_by_retention_keeps_counting(setup: tuple[Hub, World]) -> None:
    """A quiet spell longer than the retention empties the feed; the next event still gets an
    id above every one given before, so a cursor kept from before reads it (migration 0022:
    SQLite without ``AUTOINCREMENT`` began again at 1, and every cursor skipped it)."""
    hub, world = setup
    with hub.db.write() as s:
        old = [feed.append(s, FixedClock(NOW - timedelta(days=95)), world.project_id, "delivery.received",
                           f"old {n}").id for n in range(3)]
    assert prune(hub).feed_events == 3
    with hub.db.write() as s:
        new = feed.append(s, FixedClock(NOW), world.project_id, "delivery.received", "after the quiet spell").id
    assert new > max(old)
    with hub.db.read() as s:
        assert [e.id for e in feed.tail(s, [(world.project_id, None, max(old))], 10)] == [new]
