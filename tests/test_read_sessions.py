"""Read sessions (``Database.read``), on SQLite and PostgreSQL (issue 11).

On PostgreSQL a read ran in a transaction of the writers' pool: a BEGIN and a ROLLBACK round
trip around its statements, and psycopg's ``rollback()`` forgets every statement it prepared on
the connection (and sends ``DEALLOCATE ALL``), so no hot statement stayed prepared there. Reads
now run on the autocommit pool: each statement its own transaction, as READ COMMITTED already
gave each statement its own snapshot.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import select, text

from switchboard.hub import Hub
from switchboard.models import Project
from tests.queue.conftest import configured_hub, settings_for


@pytest.fixture(params=["sqlite", "postgresql"])
def hub(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Hub]:
    with configured_hub(settings_for(request, tmp_path, request.param)) as h:  # project acme
        yield h


def _postgres_only(hub: Hub) -> None:
    if hub.db.is_sqlite:
        pytest.skip("PostgreSQL's pools and psycopg's prepared statements")


def test_a_read_opens_no_transaction_on_postgresql(hub: Hub) -> None:
    _postgres_only(hub)
    from psycopg.pq import TransactionStatus

    with hub.db.read() as s:
        assert s.execute(select(Project.name)).scalar_one() == "acme"
        driver = s.connection().connection.driver_connection
        assert driver.info.transaction_status == TransactionStatus.IDLE  # type: ignore[union-attr]


def test_what_a_read_prepared_is_still_prepared_after_it(hub: Hub) -> None:
    """psycopg prepares a statement from its fifth run; before, every read's ROLLBACK forgot it
    (``pg_prepared_statements`` was empty after twelve reads)."""
    _postgres_only(hub)
    for _ in range(12):
        with hub.db.read() as s:
            assert s.execute(select(Project.id).where(Project.name == "acme")).scalar_one()
    pool = hub.db.read_engine.pool
    assert pool.checkedin() == 1, pool.status()  # the connection read below made every read
    with hub.db.read() as s:
        prepared = s.execute(text("SELECT statement, generic_plans + custom_plans FROM pg_prepared_statements")).all()
    runs = [n for sql, n in prepared if "FROM projects" in sql and "projects.name" in sql]
    assert runs and runs[0] >= 7, prepared


def test_a_read_refuses_to_flush_a_write(hub: Hub) -> None:
    """What a read flushes would be committed at once on PostgreSQL; a flush with nothing to
    write (``admin.grants_of`` flushes the session it is given) is fine."""
    with hub.db.read() as s:
        s.flush()
        s.add(Project(name="other"))
        with pytest.raises(RuntimeError, match="read session writes nothing"):
            s.flush()
    with hub.db.read() as s:
        assert s.execute(select(Project.name)).scalars().all() == ["acme"]


def test_a_changed_object_in_a_read_is_never_written(hub: Hub) -> None:
    """On PostgreSQL a read's statements commit at once, so an ORM change must never be flushed
    there (``autoflush`` is off): before it was rolled back, now it would stay."""
    with hub.db.read() as s:
        project = s.execute(select(Project).where(Project.name == "acme")).scalar_one()
        project.name = "changed"
        assert s.execute(select(Project.name).where(Project.id == project.id)).scalar_one() == "acme"
    with hub.db.read() as s:
        assert s.execute(select(Project.name)).scalars().all() == ["acme"]
