"""Fixtures for queue tests: a configured hub on SQLite and on PostgreSQL, with a controllable clock."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from switchboard.clock import FixedClock
from switchboard.config import Settings
from switchboard.hub import Hub
from tests.conftest import configure
from tests.services import fresh_postgres_database

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=timezone.utc)


class TickingClock(FixedClock):
    """Advances one millisecond per reading, so creation order is observable; ``advance`` jumps."""

    def now(self) -> datetime:
        self.at += timedelta(milliseconds=1)
        return self.at

    def advance(self, seconds: float) -> None:
        self.at += timedelta(seconds=seconds)


@pytest.fixture(params=["sqlite", "postgresql"])
def hub(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Hub]:
    if request.param == "sqlite":
        settings = Settings(home=tmp_path)
    else:
        settings = Settings(home=tmp_path, database_url=fresh_postgres_database(request.getfixturevalue("postgres_url")))
    configure(settings)
    h = Hub(settings, clock=TickingClock(NOW), role="cli")
    try:
        yield h
    finally:
        h.close()


