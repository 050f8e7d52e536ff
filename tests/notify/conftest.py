"""The notify tests' shared fixture: a migrated hub on SQLite and on PostgreSQL (a module that
needs another hub, e.g. with a fixed clock, defines its own ``hub``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from switchboard.config import Settings
from switchboard.db import upgrade
from switchboard.hub import Hub
from tests.services import fresh_postgres_database


@pytest.fixture(params=["sqlite", "postgresql"])
def hub(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Hub]:
    if request.param == "sqlite":
        settings = Settings(home=tmp_path)
    else:
        settings = Settings(home=tmp_path, database_url=fresh_postgres_database(request.getfixturevalue("postgres_url")))
    upgrade(settings)
    h = Hub(settings, role="cli")
    yield h
    h.close()
