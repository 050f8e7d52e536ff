"""The receiver's delivery writer (``web/ingest.py``, issue 11): a commit hands its stored
deliveries to processing in one call, and answers every waiting request, duplicates included."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from switchboard.config import Settings
from switchboard.hub import Hub
from switchboard.models.base import new_id
from switchboard.models.stamps import read_stamp
from switchboard.web.ingest import DeliveryWriter
from tests.conftest import configure


def _row(hub: Hub, world_source: str, project_id: str, n: int) -> dict[str, Any]:
    return {
        "id": new_id("dlv"), "source_id": world_source, "project_id": project_id, "dedup_key": f"key-{n}",
        "body_digest": f"digest-{n}", "status": "received", "event": "issues", "content_type": "application/json",
        "headers": {"x-github-event": "issues"}, "raw_body": b'{"n": %d}' % n, "body_bytes": 8, "human_id": None,
        "quarantine_reason": None, "error_code": None, "error_detail": None, "todo_id": None,
        "process_failures": 0, "received_at": hub.clock.now(), "processed_at": None, "released_at": None,
        "released_by": None,
    }


def test_each_commit_hands_off_its_deliveries_once_and_answers_every_request(tmp_path: Path) -> None:
    settings = Settings(home=tmp_path)
    world = configure(settings)
    hub = Hub(settings, role="cli")
    handed: list[list[str]] = []
    commits: list[int] = []
    lock = threading.Lock()

    def on_stored(ids: list[str]) -> None:
        with lock:
            handed.append(list(ids))

    # The writer commits on this process's direct connection (switchboard.direct), on the driver.
    raw = hub.db.direct_connection().connection.dbapi_connection
    raw.set_trace_callback(lambda sql: commits.append(1) if sql == "COMMIT" else None)
    writer = DeliveryWriter(hub, on_stored)
    try:
        with hub.db.read() as s:
            stamp = read_stamp(s.connection())
        rows = [_row(hub, world.source_id, world.project_id, n) for n in range(40)]
        again = dict(rows[0], id=new_id("dlv"))  # the same dedup key: a duplicate of the first

        async def store_all() -> tuple[list[tuple[str, str | None]], int, tuple[str, str | None]]:
            outcomes = await asyncio.gather(*(writer.store(r, stamp) for r in rows))
            committed = len(commits)
            return outcomes, committed, await writer.store(again, stamp)

        outcomes, committed, duplicate = asyncio.run(store_all())
    finally:
        writer.close()
        hub.close()
    ids = [r["id"] for r in rows]
    assert outcomes == [("stored", i) for i in ids]
    assert duplicate == ("duplicate", ids[0])
    # One hand-off per commit, each with that commit's ids, each id once; none for the duplicate.
    assert sorted(i for batch in handed for i in batch) == sorted(ids)
    assert all(batch for batch in handed) and len(handed) == committed
    with sa.create_engine(settings.database_url).connect() as conn:
        assert conn.execute(sa.text("SELECT count(*) FROM deliveries")).scalar_one() == 40


def test_a_row_the_database_refuses_is_a_retryable_503_without_its_values(tmp_path: Path,
                                                                         caplog: Any) -> None:
    from switchboard.errors import DependencyUnavailable
    from switchboard.web.ingest import STORE_FAILED, delivery_insert, write_batch

    settings = Settings(home=tmp_path)
    world = configure(settings)
    hub = Hub(settings, role="cli")
    try:
        with hub.db.read() as s:
            stamp = read_stamp(s.connection())
        bad = dict(_row(hub, world.source_id, world.project_id, 1), project_id=None,
                   dedup_key="secret-looking-dedup-key")  # NOT NULL: the database refuses the row
        answers, stale = write_batch(hub.db, delivery_insert(hub.db.engine.dialect.name), [(bad, stamp, None)])
    finally:
        hub.close()
    [(outcome, error)] = answers
    assert outcome is None and not stale
    # Not the driver's IntegrityError (a 500 in the receiver, quoting the row): a 503 to retry.
    assert isinstance(error, DependencyUnavailable) and error.message == STORE_FAILED
    assert "secret-looking-dedup-key" not in caplog.text
