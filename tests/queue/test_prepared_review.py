"""Review 13 of ``switchboard/prepared.py``: cases where a :class:`Prepared` statement does not
do what SQLAlchemy's own execution of the same statement does."""

from __future__ import annotations

import pytest
import sqlalchemy as sa
from sqlalchemy import bindparam, insert, select, update

from switchboard.hub import Hub
from switchboard.models import Todo
from switchboard.models.base import new_id
from switchboard.prepared import Prepared
from tests.queue.test_prepared import _TOUCH, WHEN, _insert, _project

TODOS = Todo.__table__  # type: ignore[attr-defined]


def test_an_empty_expanding_list_matches_nothing_on_both_databases(hub: Hub) -> None:
    """SQLAlchemy renders an empty IN list as an always-false expression on every dialect; the
    Prepared text becomes ``IN ()``: nothing on SQLite, a syntax error (500, and an aborted
    transaction) on PostgreSQL."""
    _insert(hub, _project(hub), None)
    with hub.db.write() as s:
        assert _TOUCH.run(s, {"ids": [], "now": WHEN}) == []
        assert s.connection().execute(
            _TOUCH.stmt, {"ids": [], "now": WHEN}).all() == []  # what SQLAlchemy does with the same statement


def test_an_insert_leaving_out_defaulted_columns_writes_their_defaults_or_is_refused(hub: Hub) -> None:
    """Columns left out of an INSERT get their Python-side defaults when SQLAlchemy executes it
    (``compiled.insert_prefetch``); Prepared binds ``effective_value`` (None) for them instead."""
    project_id = _project(hub)
    stmt = insert(TODOS).values(id=bindparam("id"), project_id=bindparam("project_id"), kind=bindparam("kind"),
                                title=bindparam("title"),
                                created_at=bindparam("created_at", type_=TODOS.c.created_at.type),
                                updated_at=bindparam("updated_at", type_=TODOS.c.updated_at.type))
    params = {"project_id": project_id, "kind": "k", "title": "t", "created_at": WHEN, "updated_at": WHEN}
    core_id, prepared_id = new_id("td"), new_id("td")
    with hub.db.write() as s:
        s.connection().execute(stmt, {**params, "id": core_id})
    try:
        prepared = Prepared(stmt)
        with hub.db.write() as s:
            prepared.run(s, {**params, "id": prepared_id})
    except (ValueError, TypeError, sa.exc.ArgumentError):
        return  # refused up front: acceptable
    with hub.db.read() as s:
        core, mine = s.get(Todo, core_id), s.get(Todo, prepared_id)
        assert core is not None and mine is not None
        for column in ("queue", "state", "priority", "attempt_count", "failure_count", "max_attempts", "ring_count"):
            assert getattr(mine, column) == getattr(core, column), column


def test_returning_columns_are_labelled_as_the_statement_returns_them(hub: Hub) -> None:
    """``returning`` is given apart from the statement's own RETURNING clause; in another order
    (same length) the values are labelled with the wrong names and nothing complains."""
    project_id = _project(hub)
    todo_id = _insert(hub, project_id, None)
    stmt = (update(TODOS).where(TODOS.c.id == bindparam("b_id")).values(title=bindparam("b_title"))
            .returning(TODOS.c.id, TODOS.c.title))
    try:
        prepared = Prepared(stmt, [TODOS.c.title, TODOS.c.id])
        with hub.db.write() as s:
            rows = prepared.run(s, {"b_id": todo_id, "b_title": "new"})
    except ValueError:
        return  # refused: acceptable
    assert rows == [{"id": todo_id, "title": "new"}]
    with hub.db.read() as s:
        assert s.execute(select(TODOS.c.title).where(TODOS.c.id == todo_id)).scalar_one() == "new"
