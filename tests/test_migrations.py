"""Migrations: upgrade an empty database to head, then models and schema agree (SQLite, PostgreSQL)."""

from __future__ import annotations

from pathlib import Path

import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
import pytest

from switchboard.config import Settings
from switchboard.db import upgrade
from switchboard.models import metadata
from tests.services import fresh_postgres_database


EXPRESSION_INDEXES = {"ix_todos_claim_queue", "ix_todos_claim_any"}


def _expression_index(diff: object) -> bool:
    return (isinstance(diff, tuple) and diff[0] in ("add_index", "remove_index")
            and getattr(diff[1], "name", None) in EXPRESSION_INDEXES)


def _assert_schema_matches(url: str) -> None:
    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            ctx = MigrationContext.configure(conn, opts={"compare_type": True})
            diffs = [d for d in compare_metadata(ctx, metadata) if not _expression_index(d)]
            assert diffs == [], diffs
            # Alembic cannot compare expression indexes (``priority DESC``): check they exist.
            names = {ix["name"] for ix in sa.inspect(conn).get_indexes("todos")}
            assert EXPRESSION_INDEXES <= names
            assert ctx.get_current_revision() is not None
    finally:
        engine.dispose()


pytestmark = pytest.mark.filterwarnings("ignore:autogenerate skipping:UserWarning")


def test_sqlite_empty_database_upgrades_to_head(tmp_path: Path) -> None:
    settings = Settings(home=tmp_path)
    upgrade(settings)
    _assert_schema_matches(settings.database_url)
    upgrade(settings)  # idempotent at head


def test_postgresql_empty_database_upgrades_to_head(postgres_url: str, tmp_path: Path) -> None:
    settings = Settings(home=tmp_path, database_url=fresh_postgres_database(postgres_url))
    upgrade(settings)
    _assert_schema_matches(settings.database_url)
