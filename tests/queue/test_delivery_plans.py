"""Statements that name deliveries by primary key find them by it, not through the status index
(issue 11, :func:`switchboard.models.by_key_only`).

SQLite here has no planner statistics (nothing runs ANALYZE), and with none it planned
processing's ``id IN (<3 or more ids>) AND status = 'received'`` as a search of
``ix_deliveries_status_received_at``: every ``received`` delivery read for each batch, 1.7-3.3 ms
a batch of 32 with 2,000 of them, so processing slowed as its backlog grew (`bench/processing.py
--deliveries 16000`: 0.80 against 0.58 ms of CPU per delivery). The statements are explained
with the values they run with, on SQLite (no statistics) and PostgreSQL (statistics gathered
before the backlog came, as after a quiet period: there, too, the status index was chosen).
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event, insert

from switchboard.clock import utcnow
from switchboard.hub import Hub
from switchboard.intake import quarantine
from switchboard.models import Delivery
from switchboard.models.base import new_id
from switchboard.queue.batch import _STILL_RECEIVED, READ_DELIVERIES
from tests.conftest import World
from tests.queue.conftest import configured_world, explain, explain_prepared, settings_for

BACKLOG = 3000


@pytest.fixture(params=["sqlite", "postgresql"])
def world_hub(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[World, Hub]]:
    with configured_world(settings_for(request, tmp_path, request.param)) as pair:
        yield pair


def _insert(world: World, hub: Hub, n: int, status: str) -> list[str]:
    now = utcnow()
    rows = [{"id": new_id("dlv"), "source_id": world.source_id, "project_id": world.project_id,
             "status": status, "body_bytes": 2, "process_failures": 0, "received_at": now} for _ in range(n)]
    with hub.db.write() as s:
        s.execute(insert(Delivery), rows)
    return [row["id"] for row in rows]


def _backlog(world: World, hub: Hub) -> list[str]:
    """A quiet period then a burst: processed deliveries, planner statistics gathered on
    PostgreSQL (with no ``received`` row in them; SQLite has none, as in production), then a
    backlog of received ones; their ids."""
    _insert(world, hub, BACKLOG, "processed")
    if hub.db.is_sqlite:
        return _insert(world, hub, BACKLOG, "received")
    with hub.db.engine.connect() as conn:
        conn.exec_driver_sql("ANALYZE")
        conn.commit()
    return _insert(world, hub, BACKLOG, "received")


@pytest.mark.parametrize("batch", [3, 32])
def test_processing_finds_its_batch_by_primary_key(world_hub: tuple[World, Hub], batch: int) -> None:
    world, hub = world_hub
    ids = _backlog(world, hub)[:batch]
    key = "sqlite_autoindex_deliveries_1 (id=?)" if hub.db.is_sqlite else "deliveries_pkey"
    for name, prepared in (("still received", _STILL_RECEIVED[hub.db.is_sqlite]), ("read", READ_DELIVERIES)):
        plan = explain_prepared(hub, prepared, {"b_ids": ids})
        print(name, plan, sep="\n")
        assert key in plan, plan
        assert "ix_deliveries_status_received_at" not in plan, plan


def test_the_quarantine_sweep_reads_only_what_may_be_due(world_hub: tuple[World, Hub]) -> None:
    """The sweep's check (every 15 s) read every quarantined delivery through the status index
    when nothing was due; bounded by ``received_at`` too, it reads only those received before
    the cutoff. SQLite, with no statistics, as in production."""
    world, hub = world_hub
    if not hub.db.is_sqlite:
        pytest.skip("PostgreSQL plans this read from its statistics, by cost")
    _insert(world, hub, 200, "quarantined")
    seen: list[tuple[str, Any]] = []

    def capture(_conn: Any, _cursor: Any, statement: str, parameters: Any, *_: Any) -> None:
        seen.append((statement, parameters))

    engines = hub.db.engines()
    for engine in engines:
        event.listen(engine, "before_cursor_execute", capture)
    try:
        with hub.db.read() as s:
            assert not quarantine.expiry_due(s, hub.clock, timedelta(days=30))
    finally:
        for engine in engines:
            event.remove(engine, "before_cursor_execute", capture)
    [(sql, parameters)] = [(sql, p) for sql, p in seen if "FROM deliveries" in sql]
    plan = explain(hub, sql, parameters)
    assert "ix_deliveries_status_received_at (status=? AND received_at<?)" in plan, plan
