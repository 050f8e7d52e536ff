"""Prepared hot statements: a Core statement compiled once per dialect, run on the DBAPI cursor.

Issue 11: a claim and a complete are three statements each, and with 8 claimer processes on
SQLite the time each transaction holds the one write lock is the ceiling. About two thirds of
a statement's time was SQLAlchemy's per-execution bookkeeping (compiled-cache key, parameter
construction and post-compile expansion, the execution context and result objects), not the
database. A :class:`Prepared` keeps what does not change between calls:

- the SQL text SQLAlchemy compiles for the dialect (once; an expanding ``IN`` list once per
  length, from the same compiled text),
- each bound parameter's fixed value (literals such as ``state = 'claimed'``) and the type's
  bind processor for the dialect (UTC times, JSON),
- the result processors of the ``RETURNING`` columns,

and runs on the session's own DBAPI connection, inside its transaction. The SQL and the value
conversions are SQLAlchemy's own, so a row written or read here is the row the ORM would write
or read (``tests/queue/test_prepared.py`` compares them on SQLite and PostgreSQL).

The processors are read with ``TypeEngine._cached_bind_processor`` / ``_cached_result_processor``,
the calls SQLAlchemy's own execution makes (SQLAlchemy is pinned, ``pyproject.toml``).
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import sqlalchemy as sa
from sqlmodel import Session

from switchboard.feed import bell

_POSTCOMPILE = re.compile(r"__\[POSTCOMPILE_(\w+)\]")
_NAMED = re.compile(r"%\((\w+)\)s")
_CACHE = "_switchboard_prepared"
"""The attribute of a dialect holding its compiled statements ({Prepared: {length: _Compiled}})."""
_COMPILING = threading.Lock()


class _Compiled:
    """One statement compiled for one dialect and one length of its expanding list."""

    def __init__(self, stmt: Any, dialect: sa.Dialect, expanding: str | None, length: int,
                 returning: Sequence[sa.Column[Any]]) -> None:
        compiled = stmt.compile(dialect=dialect)
        if compiled.insert_prefetch or compiled.update_prefetch:
            # SQLAlchemy would fill these from Python-side column defaults at each execution.
            names = ", ".join(c.name for c in [*compiled.insert_prefetch, *compiled.update_prefetch])
            raise ValueError(f"give every column with a Python-side default a value: {names}")
        exported = [c.name for c in getattr(stmt, "exported_columns", ())]
        if exported != [c.name for c in returning]:
            raise ValueError(f"returning must be the statement's own columns, in order: {exported}")
        binds = compiled.binds
        sql = compiled.string
        positional = bool(compiled.positional)
        self.expanded = [f"{expanding}_{i + 1}" for i in range(length)] if expanding else []
        if expanding is not None:
            # An empty list is an empty set, on both databases (``IN ()`` is SQLite only).
            marks = ", ".join("?" if positional else f"%({name})s" for name in self.expanded) or \
                "SELECT NULL WHERE 1 != 1"
            sql = _POSTCOMPILE.sub(lambda m: marks if m.group(1) == expanding else m.group(0), sql)
        if "__[POSTCOMPILE_" in sql:
            raise ValueError("only the one named expanding parameter is supported")
        if positional:
            order: list[str] = []
            for name in compiled.positiontup or []:
                order.extend(self.expanded if name == expanding else [name])
        else:
            order = list(dict.fromkeys(_NAMED.findall(sql)))
        self.sql = sql
        self.positional = positional
        self.order = order
        self.fixed: dict[str, Any] = {}
        self.processors: dict[str, Callable[[Any], Any]] = {}
        for name in order:
            source = binds.get(expanding if name in self.expanded else name)
            if source is None:
                continue
            if not source.required and name not in self.expanded:
                self.fixed[name] = source.effective_value
            processor = source.type._cached_bind_processor(dialect)  # noqa: SLF001 - as SQLAlchemy's execution
            if processor is not None:
                self.processors[name] = processor
        self.columns = [c.name for c in returning]
        self.results = [c.type._cached_result_processor(dialect, None) for c in returning]  # noqa: SLF001

    def parameters(self, params: Mapping[str, Any], expanding: str | None) -> Any:
        values = dict(self.fixed)
        values.update(params)
        if expanding is not None:
            values.update(zip(self.expanded, values.pop(expanding), strict=True))
        for name, processor in self.processors.items():
            values[name] = processor(values[name])
        if self.positional:
            return tuple(values[name] for name in self.order)
        return {name: values[name] for name in self.order}


class Prepared:
    """A hot statement: compiled once per dialect, executed on the session's DBAPI cursor.

    Args:
        stmt: the Core statement (bound parameters by name, at most one ``expanding`` one). An
            INSERT must give every column that has a Python-side default a value.
        returning: the columns it returns (``RETURNING``, or a SELECT's), in order; their types
            convert the values. Empty for none.

    Raises:
        ValueError: when compiled, for a column left to a Python-side default, or ``returning``
            not the statement's own columns.
        expanding: the name of its expanding ``IN`` parameter, if any (a list when run).
        writes_feed: it inserts into ``feed_events``: the feed bell rings after the commit, as
            for the ORM's statements (:mod:`switchboard.feed.bell`).
    """

    def __init__(self, stmt: Any, returning: Sequence[sa.Column[Any]] = (), expanding: str | None = None,
                 writes_feed: bool = False) -> None:
        self.stmt = stmt
        self.returning = list(returning)
        self.expanding = expanding
        self.writes_feed = writes_feed

    def _for(self, dialect: sa.Dialect, length: int) -> _Compiled:
        # Compiled per dialect object, not per dialect name: a type's processors may read state
        # the engine put on its dialect (the vault's key ring, ``sealing.columns.attach``), and
        # two databases in one process (tests, tools) have two rings. The cache hangs off the
        # dialect itself: the result processors refer to their dialect, so a cache held here
        # (even a weak-keyed one) would keep every closed engine's dialect alive.
        cache: dict[Prepared, dict[int, _Compiled]] | None = dialect.__dict__.get(_CACHE)
        by_length = None if cache is None else cache.get(self)
        found = None if by_length is None else by_length.get(length)
        if found is None:
            with _COMPILING:
                by_length = dialect.__dict__.setdefault(_CACHE, {}).setdefault(self, {})
                found = by_length.get(length)
                if found is None:
                    found = by_length[length] = _Compiled(self.stmt, dialect, self.expanding, length, self.returning)
        return found

    def run(self, session: Session | sa.Connection, params: Mapping[str, Any]) -> list[dict[str, Any]]:
        """Execute once in ``session``'s transaction (a ``Session``, or a ``Connection`` in one).

        Args:
            params: values by parameter name; the expanding one as a list (empty: an empty set).

        Returns:
            The ``RETURNING`` rows as dicts (column name to value, converted as the ORM would);
            ``[]`` without ``RETURNING``.

        Raises:
            The driver's errors, as SQLAlchemy would raise them (wrapped in its ``DBAPIError``s).
        """
        conn = session if isinstance(session, sa.Connection) else session.connection()
        length = len(params[self.expanding]) if self.expanding is not None else 0
        compiled = self._for(conn.dialect, length)
        values = compiled.parameters(params, self.expanding)
        cursor = conn.connection.dbapi_connection.cursor()  # type: ignore[union-attr]
        try:
            try:
                cursor.execute(compiled.sql, values)
            except Exception as exc:
                raise _driver_error(conn, compiled.sql, values, exc) from exc
            if self.writes_feed:
                bell.mark_feed_write()
            if not compiled.columns:
                return []
            rows = cursor.fetchall()
        finally:
            cursor.close()
        names, results = compiled.columns, compiled.results
        return [{name: (value if proc is None else proc(value))
                 for name, proc, value in zip(names, results, row, strict=True)} for row in rows]

    def run_many(self, session: Session, params: Sequence[Mapping[str, Any]]) -> None:
        """Execute once per parameter set in ``session``'s transaction, with the driver's
        ``executemany`` (SQLAlchemy's own for a list of parameter sets). No ``RETURNING`` and no
        expanding list (their lengths would differ between sets).

        Raises:
            ValueError: the statement has ``RETURNING`` or an expanding parameter.
            The driver's errors, as :meth:`run`.
        """
        if self.returning or self.expanding is not None:
            raise ValueError("run_many takes statements without RETURNING or an expanding list")
        if not params:
            return
        conn = session.connection()
        compiled = self._for(conn.dialect, 0)
        values = [compiled.parameters(p, None) for p in params]
        cursor = conn.connection.dbapi_connection.cursor()  # type: ignore[union-attr]
        try:
            try:
                cursor.executemany(compiled.sql, values)
            except Exception as exc:
                raise _driver_error(conn, compiled.sql, values, exc) from exc
            if self.writes_feed:
                bell.mark_feed_write()
        finally:
            cursor.close()


def _driver_error(conn: sa.Connection, sql: str, values: Any, exc: Exception) -> Exception:
    """The driver's ``exc`` as SQLAlchemy wraps it (``IntegrityError``, ``OperationalError``, ...).

    SQLAlchemy's disconnect handling does not see it (the statement ran on the driver's cursor):
    a dead connection is found and the pool invalidated by the ``ROLLBACK`` that follows, which
    goes through SQLAlchemy (``Database.write``/``read`` end their session on any error, and the
    ``handle_error`` hook of :mod:`switchboard.db` sees the disconnect there;
    ``tests/queue/test_autocommit.py``). Callers on a bare ``Connection`` must run in a
    transaction that is rolled back on error, as ``engine.begin()`` does.
    """
    return sa.exc.DBAPIError.instance(sql, values, exc, conn.dialect.loaded_dbapi.Error, dialect=conn.dialect)
