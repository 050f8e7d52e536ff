"""Fixtures for queue tests: a configured hub on SQLite and on PostgreSQL, with a controllable clock."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy import insert, select

from switchboard import admin
from switchboard.clock import Clock, FixedClock, utcnow
from switchboard.config import Settings
from switchboard.hub import Hub
from switchboard.models import Agent, Todo
from switchboard.models.base import new_id
from switchboard.prepared import Prepared
from switchboard.queue.todos import create
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




@pytest.fixture(params=["sqlite", "postgresql"])
def system_clock_hub(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Hub]:
    """A configured hub with the system clock (on PostgreSQL a claim-next is one statement)."""
    with configured_hub(settings_for(request, tmp_path, request.param)) as h:
        yield h


def agent_of(hub: Hub) -> tuple[str, dict[str, str], str]:
    """claude1 (work on acme, from ``configure``): its id, its grants, and acme's id."""
    with hub.db.read() as s:
        agent = s.execute(select(Agent)).scalars().one()
        project_id = str(s.execute(sa.text("SELECT id FROM projects")).scalar_one())
        return agent.id, admin.grants_of(s, agent.id), project_id


def new_todo(hub: Hub, project_id: str) -> str:
    """A pending todo on queue ``q``; its id."""
    with hub.db.write() as s:
        todo, _ = create(s, hub.clock, project_id=project_id, queue="q", kind="task", title="t", payload=None)
        return todo.id


def fill(hub: Hub, project_id: str, n: int, queue: str = "load") -> None:
    """Insert ``n`` pending todos in bulk."""
    now = utcnow()
    rows = [{"id": new_id("td"), "project_id": project_id, "queue": queue, "state": "pending", "kind": "load",
             "title": f"load {i}", "priority": 0, "attempt_count": 0, "failure_count": 0, "max_attempts": 5,
             "ring_count": 0, "created_at": now, "updated_at": now} for i in range(n)]
    with hub.db.write() as s:
        for start in range(0, n, 5000):
            s.execute(insert(Todo), rows[start:start + 5000])


def explain(hub: Hub, sql: str, values: Any) -> str:
    """The plan the database makes for ``sql`` with ``values`` (SQLite's ``EXPLAIN QUERY PLAN``,
    PostgreSQL's ``EXPLAIN``), its rows joined into lines."""
    prefix = "EXPLAIN QUERY PLAN " if hub.db.is_sqlite else "EXPLAIN "
    raw = hub.db.engine.raw_connection()
    try:
        cursor = raw.cursor()
        cursor.execute(prefix + sql, values)
        return "\n".join(" ".join(str(part) for part in r) for r in cursor.fetchall())
    finally:
        raw.rollback()
        raw.close()


def explain_prepared(hub: Hub, prepared: Prepared, params: dict[str, Any]) -> str:
    """:func:`explain` of a :class:`Prepared` statement as it runs with ``params``."""
    expanding = prepared.expanding
    compiled = prepared._for(hub.db.engine.dialect, len(params[expanding]) if expanding else 0)  # noqa: SLF001
    return explain(hub, compiled.sql, compiled.parameters(params, expanding))
