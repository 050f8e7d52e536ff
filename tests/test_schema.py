"""The cheap at-head check (issue 14, item 9) on SQLite and PostgreSQL."""

from __future__ import annotations

from pathlib import Path

import psycopg
import pytest

from switchboard.config import Settings
from switchboard.db import alembic_config, upgrade
from switchboard.schema import MigrationNeeded, NoInstance, current_revision, head_revision, require_at_head
from tests.services import fresh_postgres_database


def test_head_revision_is_alembics_head() -> None:
    from alembic.script import ScriptDirectory

    assert head_revision() == ScriptDirectory.from_config(alembic_config(Settings())).get_current_head()


@pytest.fixture(params=["sqlite", "postgresql"])
def settings(request: pytest.FixtureRequest, tmp_path: Path) -> Settings:
    if request.param == "sqlite":
        return Settings(home=tmp_path / "instance")
    return Settings(home=tmp_path, database_url=fresh_postgres_database(request.getfixturevalue("postgres_url")))


def test_no_instance_then_at_head_then_behind(settings: Settings) -> None:
    with pytest.raises(NoInstance) as no:
        require_at_head(settings)
    assert "switchboard init" in no.value.message and no.value.code == "no_instance"
    if settings.is_sqlite:
        assert not settings.home.exists()  # the check creates nothing
    upgrade(settings)
    require_at_head(settings)
    assert current_revision(settings) == head_revision()
    if settings.is_sqlite:
        import sqlite3

        with sqlite3.connect(settings.home / "switchboard.db") as conn:
            conn.execute("update alembic_version set version_num = '0005'")
    else:
        with psycopg.connect(settings.database_url.replace("+psycopg", "")) as conn:
            conn.execute("update alembic_version set version_num = '0005'")
    with pytest.raises(MigrationNeeded) as behind:
        require_at_head(settings)
    assert "switchboard migrate" in behind.value.message


def test_an_unreachable_postgresql_is_dependency_unavailable(tmp_path: Path) -> None:
    from switchboard.errors import DependencyUnavailable
    from tests.conftest import free_port

    settings = Settings(home=tmp_path, database_url=f"postgresql://nobody:pw@127.0.0.1:{free_port()}/none")
    with pytest.raises(DependencyUnavailable) as exc:
        require_at_head(settings)
    assert ":pw@" not in exc.value.message and exc.value.message.startswith("the database failed")
