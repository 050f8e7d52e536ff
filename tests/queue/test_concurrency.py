"""Concurrency (DESIGN.md §6.2): 8 processes claim from one queue of 2,000 todos, on SQLite and
PostgreSQL: every todo completed exactly once, zero double claims; half of them through
direct writes (:mod:`switchboard.direct`)."""

from __future__ import annotations

import multiprocessing as mp
from pathlib import Path

import pytest
from sqlalchemy import func, select

from switchboard import admin, direct
from switchboard.config import Settings
from switchboard.hub import Hub
from switchboard.models import Attempt, Todo
from switchboard.queue import leases
from tests.conftest import configure
from tests.queue.conftest import fill
from tests.services import fresh_postgres_database

TODOS = 2000
CLAIMERS = 8


def _claimer(settings: Settings, agent_name: str, results: "mp.Queue[list[str]]") -> None:
    hub = Hub(settings, role="cli")
    done: list[str] = []
    try:
        with hub.db.read() as s:
            agent_id = admin.agent_by_name(s, agent_name).id
            grants = admin.grants_of(s, agent_id)
        # Half the workers write through the ORM session, half through direct writes (the tools'
        # path, issue 11): both keep the one-writer rule and exactly-once claims together.
        use_direct = int(agent_name.removeprefix("worker")) % 2 == 0
        while True:
            if use_direct:
                claim = direct.run(hub.db, leases.claim, hub.clock, agent_id, grants, project="acme",
                                   queue="load", is_postgres=not hub.db.is_sqlite)
            else:
                with hub.db.write() as s:
                    claim = leases.claim(s, hub.clock, agent_id, grants, project="acme", queue="load",
                                         is_postgres=not hub.db.is_sqlite)
            if claim.get("empty"):
                break
            if use_direct:
                direct.run(hub.db, leases.complete, hub.clock, agent_id, grants, todo_id=claim["todo"]["id"],
                           lease_token=claim["lease_token"])
            else:
                with hub.db.write() as s:
                    leases.complete(s, hub.clock, agent_id, grants, todo_id=claim["todo"]["id"],
                                    lease_token=claim["lease_token"])
            done.append(claim["todo"]["id"])
    finally:
        results.put(done)
        hub.close()


@pytest.fixture(params=["sqlite", "postgresql"])
def load_settings(request: pytest.FixtureRequest, tmp_path: Path) -> Settings:
    if request.param == "sqlite":
        return Settings(home=tmp_path)
    return Settings(home=tmp_path, database_url=fresh_postgres_database(request.getfixturevalue("postgres_url")))


@pytest.mark.timeout(1200)
def test_eight_processes_complete_every_todo_exactly_once(load_settings: Settings) -> None:
    world = configure(load_settings)
    hub = Hub(load_settings, role="cli")
    try:
        with hub.db.write() as s:
            for i in range(CLAIMERS):
                admin.add_agent(s, f"worker{i}", "alice")
                admin.grant(s, f"worker{i}", "acme", "work")
        fill(hub, world.project_id, TODOS)
        ctx = mp.get_context("spawn")
        results: mp.Queue[list[str]] = ctx.Queue()
        procs = [ctx.Process(target=_claimer, args=(load_settings, f"worker{i}", results)) for i in range(CLAIMERS)]
        for p in procs:
            p.start()
        claimed: list[str] = []
        for _ in procs:
            claimed += results.get(timeout=240)
        for p in procs:
            p.join(timeout=30)
            assert p.exitcode == 0
        assert len(claimed) == TODOS and len(set(claimed)) == TODOS, "no todo claimed twice"
        with hub.db.read() as s:
            states = dict(s.execute(select(Todo.state, func.count()).group_by(Todo.state)).all())
            attempts = s.execute(select(func.count()).select_from(Attempt)).scalar_one()
            busiest = s.execute(
                select(func.count()).select_from(Attempt).group_by(Attempt.todo_id).order_by(func.count().desc())
            ).scalars().first()
        assert states == {"done": TODOS}
        assert attempts == TODOS and busiest == 1
        per_worker = sorted(len(set(c)) for c in [claimed])
        assert per_worker
    finally:
        hub.close()
