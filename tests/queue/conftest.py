"""Fixtures for queue tests: a configured hub on SQLite and on PostgreSQL, with a controllable clock."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from switchboard.clock import Clock, FixedClock
from switchboard.config import Settings
from switchboard.hub import Hub
from tests.conftest import World, configure
from tests.services import fresh_postgres_database

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=timezone.utc)


class TickingClock(FixedClock):
    """Advances one millisecond per reading, so creation order is observable; ``advance`` jumps."""

    def now(self) -> datetime:
        self.at += timedelta(milliseconds=1)
        return self.at

    def advance(self, seconds: float) -> None:
        self.at += timedelta(seconds=seconds)


def settings_for(request: pytest.FixtureRequest, tmp_path: Path, backend: str) -> Settings:
    """Settings on a fresh SQLite file or a fresh PostgreSQL database (``backend``)."""
    if backend == "sqlite":
        return Settings(home=tmp_path)
    return Settings(home=tmp_path, database_url=fresh_postgres_database(request.getfixturevalue("postgres_url")))


@contextmanager
def configured_world(settings: Settings, clock: Clock | None = None) -> Iterator[tuple[World, Hub]]:
    """The world :func:`tests.conftest.configure` made on ``settings`` and a hub on it; closed afterwards."""
    world = configure(settings)
    h = Hub(settings, clock=clock, role="cli")
    try:
        yield world, h
    finally:
        h.close()


@contextmanager
def configured_hub(settings: Settings, clock: Clock | None = None) -> Iterator[Hub]:
    """A hub on ``settings`` configured by :func:`tests.conftest.configure`; closed afterwards."""
    with configured_world(settings, clock) as (_world, h):
        yield h


@pytest.fixture(params=["sqlite", "postgresql"])
def hub(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Hub]:
    with configured_hub(settings_for(request, tmp_path, request.param), TickingClock(NOW)) as h:
        yield h


