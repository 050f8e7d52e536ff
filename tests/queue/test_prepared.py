"""Prepared hot statements (issue 11, ``switchboard/prepared.py``) write and read exactly what the
ORM writes and reads, on SQLite and PostgreSQL: times as aware UTC, JSON (and JSON null), an
expanding ``IN`` list of any length, driver errors as SQLAlchemy's, and the feed bell."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy import bindparam, insert, select, update

from switchboard import admin
from switchboard.feed import bell
from switchboard.feed import events as feed
from switchboard.hub import Hub
from switchboard.models import Agent, Attempt, FeedEvent, Todo
from switchboard.models.base import new_id
from switchboard.prepared import Prepared
from switchboard.queue import leases
from tests.queue.conftest import configured_hub, settings_for

TODOS = Todo.__table__  # type: ignore[attr-defined]
WHEN = datetime(2026, 11, 30, 12, 0, 0, 123456, tzinfo=UTC)

_INSERT = Prepared(insert(TODOS).values({c: bindparam(c, type_=TODOS.c[c].type) for c in (
    "id", "project_id", "queue", "state", "kind", "title", "payload", "priority", "attempt_count",
    "failure_count", "max_attempts", "ring_count", "created_at", "updated_at")}))
_INSERT_RETURNING = Prepared(insert(TODOS).values(id=bindparam("id")).returning(TODOS.c.id), [TODOS.c.id])
_TOUCH = Prepared(
    update(TODOS).where(TODOS.c.id.in_(bindparam("ids", expanding=True)), TODOS.c.state == "pending")
    .values(priority=TODOS.c.priority + 1, updated_at=bindparam("now", type_=TODOS.c.updated_at.type))
    .returning(*TODOS.c), TODOS.c, "ids")


def _project(hub: Hub) -> str:
    with hub.db.read() as s:
        return str(s.execute(sa.text("SELECT id FROM projects")).scalar_one())


def _insert(hub: Hub, project_id: str, payload: object) -> str:
    todo_id = new_id("td")
    with hub.db.write() as s:
        _INSERT.run(s, {"id": todo_id, "project_id": project_id, "queue": "q", "state": "pending", "kind": "k",
                        "title": "t", "payload": payload, "priority": 0, "attempt_count": 0, "failure_count": 0,
                        "max_attempts": 5, "ring_count": 0, "created_at": WHEN, "updated_at": WHEN})
    return todo_id


def test_rows_written_read_back_as_the_orm_does(hub: Hub) -> None:
    project_id = _project(hub)
    with_payload = _insert(hub, project_id, {"a": [1, "ü"], "b": None})
    without = _insert(hub, project_id, None)
    with hub.db.write() as s:  # a write, rolled back below (a read refuses to flush one)
        a, b = s.get(Todo, with_payload), s.get(Todo, without)
        assert a is not None and b is not None
        assert a.payload == {"a": [1, "ü"], "b": None} and a.created_at == WHEN
        assert b.payload is None
        # Stored as the ORM stores None in this JSON column (JSON null), on both databases.
        orm_id = new_id("td")
        s.add(Todo(id=orm_id, project_id=project_id, queue="q", kind="k", title="t", created_at=WHEN, updated_at=WHEN))
        s.flush()
        raw = s.execute(select(TODOS.c.id, sa.cast(TODOS.c.payload, sa.String)).where(
            TODOS.c.id.in_([without, orm_id]))).all()
        assert len({value for _, value in raw}) == 1
        s.rollback()


@pytest.mark.parametrize("count", [1, 3])
def test_an_expanding_list_of_any_length_and_returning(hub: Hub, count: int) -> None:
    project_id = _project(hub)
    ids = [_insert(hub, project_id, {"n": i}) for i in range(count)]
    later = datetime(2026, 12, 1, 8, 0, tzinfo=UTC)
    with hub.db.write() as s:
        rows = _TOUCH.run(s, {"ids": ids, "now": later})
    assert sorted(r["id"] for r in rows) == sorted(ids)
    for r in rows:
        assert r["priority"] == 1 and r["updated_at"] == later and r["created_at"] == WHEN
        assert r["payload"] == {"n": ids.index(r["id"])}
    with hub.db.read() as s:
        assert [t.updated_at for t in s.execute(select(Todo).where(Todo.id.in_(ids))).scalars()] == [later] * count  # type: ignore[attr-defined]


_RETITLE = Prepared(update(TODOS).where(TODOS.c.id == bindparam("b_id")).values(
    title=bindparam("v_title"), payload=bindparam("v_payload", type_=TODOS.c.payload.type),
    updated_at=bindparam("v_now", type_=TODOS.c.updated_at.type)))


def test_run_many_writes_each_parameter_set_converted_as_the_orm_does(hub: Hub) -> None:
    project_id = _project(hub)
    ids = [_insert(hub, project_id, None) for _ in range(3)]
    later = datetime(2026, 12, 5, 1, 2, 3, 456789, tzinfo=UTC)
    with hub.db.write() as s:
        _RETITLE.run_many(s, [{"b_id": i, "v_title": f"t{n}", "v_payload": {"n": n, "ü": [n]}, "v_now": later}
                              for n, i in enumerate(ids)])
        _RETITLE.run_many(s, [])  # nothing to write: no statement
    with hub.db.read() as s:
        todos = {t.id: t for t in s.execute(select(Todo).where(Todo.id.in_(ids))).scalars()}  # type: ignore[attr-defined]
    for n, todo_id in enumerate(ids):
        assert todos[todo_id].title == f"t{n}" and todos[todo_id].payload == {"n": n, "ü": [n]}
        assert todos[todo_id].updated_at == later


def test_run_many_refuses_returning_and_expanding_and_wraps_driver_errors(hub: Hub) -> None:
    with hub.db.write() as s:
        with pytest.raises(ValueError, match="RETURNING or an expanding"):
            _TOUCH.run_many(s, [{"ids": ["td_x"], "now": WHEN}])
        with pytest.raises(ValueError, match="RETURNING or an expanding"):
            _INSERT_RETURNING.run_many(s, [])
    project_id = _project(hub)
    todo_id = _insert(hub, project_id, None)
    row = {"id": todo_id, "project_id": project_id, "queue": "q", "state": "pending", "kind": "k", "title": "t",
           "payload": None, "priority": 0, "attempt_count": 0, "failure_count": 0, "max_attempts": 5,
           "ring_count": 0, "created_at": WHEN, "updated_at": WHEN}
    with pytest.raises(sa.exc.IntegrityError), hub.db.write() as s:
        _INSERT.run_many(s, [row])


def test_run_takes_a_connection_as_well_as_a_session(hub: Hub) -> None:
    project_id = _project(hub)
    todo_id = _insert(hub, project_id, {"k": 1})
    with hub.db.write() as s:
        rows = _TOUCH.run(s.connection(), {"ids": [todo_id], "now": WHEN})
    assert [(r["id"], r["priority"], r["payload"]) for r in rows] == [(todo_id, 1, {"k": 1})]


def test_a_driver_error_is_sqlalchemys(hub: Hub) -> None:
    project_id = _project(hub)
    todo_id = _insert(hub, project_id, None)
    with pytest.raises(sa.exc.IntegrityError), hub.db.write() as s:
        _INSERT.run(s, {"id": todo_id, "project_id": project_id, "queue": "q", "state": "pending", "kind": "k",
                        "title": "t", "payload": None, "priority": 0, "attempt_count": 0, "failure_count": 0,
                        "max_attempts": 5, "ring_count": 0, "created_at": WHEN, "updated_at": WHEN})


def test_a_feed_write_rings_the_bell_after_commit_only(hub: Hub, monkeypatch: pytest.MonkeyPatch) -> None:
    project_id = _project(hub)
    rings: list[int] = []
    monkeypatch.setattr(bell.BELL, "forward", lambda: rings.append(1))
    with hub.db.write() as s:
        feed.record(s, hub.clock, project_id, "todo.created", "made", subject_id="td_x")
        assert rings == []
    assert rings == [1]
    with pytest.raises(RuntimeError), hub.db.write() as s:
        feed.record(s, hub.clock, project_id, "todo.created", "rolled back", subject_id="td_y")
        raise RuntimeError("abort")
    with hub.db.write() as s:
        s.connection()
    assert rings == [1]
    with hub.db.read() as s:
        titles = s.execute(select(FeedEvent.title).where(FeedEvent.subject_id.in_(["td_x", "td_y"]))).scalars().all()  # type: ignore[union-attr]
    assert titles == ["made"]


@pytest.fixture(params=["sqlite", "postgresql"])
def system_hub(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Hub]:
    """A configured hub with the system clock: on PostgreSQL the claim and the complete are one
    statement each (``lease_sql.pg_claim_recorded`` / ``pg_complete_recorded``)."""
    with configured_hub(settings_for(request, tmp_path, request.param)) as h:
        yield h


def test_claim_and_complete_write_the_attempt_and_the_events(system_hub: Hub) -> None:
    hub = system_hub
    project_id = _project(hub)
    todo_id = _insert(hub, project_id, {"x": 1})
    with hub.db.read() as s:
        agent = s.execute(select(Agent)).scalars().one()
        grants = admin.grants_of(s, agent.id)
    before = datetime.now(UTC)
    with hub.db.write() as s:
        claimed = leases.claim(s, hub.clock, agent.id, grants, project="acme", queue="q",
                               is_postgres=not hub.db.is_sqlite)
    assert claimed["todo"]["id"] == todo_id and claimed["attempt"] == 1
    with hub.db.write() as s:
        done = leases.complete(s, hub.clock, agent.id, grants, todo_id=todo_id, result={"ok": True},
                               lease_token=claimed["lease_token"])
    after = datetime.now(UTC)
    assert done["state"] == "done"
    with hub.db.read() as s:
        attempt = s.execute(select(Attempt).where(Attempt.todo_id == todo_id)).scalars().one()
        todo = s.get(Todo, todo_id)
        events = s.execute(select(FeedEvent).where(FeedEvent.subject_id == todo_id).order_by(FeedEvent.id)).scalars().all()  # type: ignore[arg-type]
    assert todo is not None and todo.result == {"ok": True} and todo.state == "done"
    assert attempt.number == 1 and attempt.agent_id == agent.id and attempt.outcome == "completed"
    assert before - timedelta(seconds=5) <= attempt.claimed_at <= attempt.ended_at <= after + timedelta(seconds=5)  # type: ignore[operator]
    assert attempt.claimed_at.tzinfo is not None and attempt.lease_expires_at > attempt.claimed_at
    assert [(e.kind, e.title, e.project_id, e.data) for e in events] == [
        ("todo.claimed", "t", project_id, {"agent_id": agent.id, "attempt": 1}),
        ("todo.completed", "t", project_id, {"agent_id": agent.id, "attempt": 1}),
    ]
    assert all(before - timedelta(seconds=5) <= e.created_at <= after + timedelta(seconds=5) for e in events)


def test_two_databases_in_one_process_each_read_bodies_with_their_own_key_ring(tmp_path: Path) -> None:
    # A prepared statement's type processors read the key ring the engine put on its dialect:
    # compiled once per dialect name, processing's read of the batch opened a second instance's
    # bodies with the first instance's ring ("the vault key for this delivery body is not
    # configured"), found by tests/intake/test_secret_flow.py in a shared test process.
    from switchboard.config import Settings
    from switchboard.models import Delivery
    from switchboard.queue.jobs import process_delivery
    from switchboard.sealing.keys import load_key_ring
    from tests.conftest import CASES, _configure, configure, store_github_delivery

    body = (CASES / "github" / "issues.opened.json").read_bytes()
    settings = [Settings(home=tmp_path / name) for name in ("a", "b")]
    # The second one configured from scratch: a template copy shares the template's ring.
    worlds = [configure(settings[0]), _configure(settings[1], "It's a Secret to Everybody")]
    assert load_key_ring(settings[0]).keys != load_key_ring(settings[1]).keys
    for s, world in zip(settings, worlds, strict=True):
        hub = Hub(s, role="cli")
        try:
            delivery_id = store_github_delivery(hub, world, body)
            assert process_delivery(hub, delivery_id) == "processed"
            with hub.db.read() as session:
                assert session.get(Delivery, delivery_id).todo_id is not None  # type: ignore[union-attr]
        finally:
            hub.close()


def test_a_closed_databases_dialect_is_freed_after_a_prepared_statement_ran(tmp_path: Path) -> None:
    # The compiled statements' result processors refer to their dialect: a cache held by the
    # Prepared (even weak-keyed by dialect) kept every closed engine's dialect, its key-ring
    # function and settings alive for the life of the process (found by a review, issue 11).
    import gc
    import weakref

    from switchboard.config import Settings
    from switchboard.queue.batch import READ_DELIVERIES
    from tests.conftest import configure

    settings = Settings(home=tmp_path / "one")
    configure(settings)
    hub = Hub(settings, role="cli")
    with hub.db.read() as session:
        assert READ_DELIVERIES.run(session, {"b_ids": ["dlv_none"]}) == []
    dialect = weakref.ref(hub.db.read_engine.dialect)
    hub.close()
    del hub, session
    gc.collect()
    assert dialect() is None
