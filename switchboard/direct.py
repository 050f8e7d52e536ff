"""Direct writes: a write transaction on the driver's connection, without an ORM session (issue 11).

A claim-next and a complete are three :class:`~switchboard.prepared.Prepared` statements each
on SQLite (one on PostgreSQL). Run in :meth:`Database.write`, the ORM session around them (a
pool check-out, the session and its transaction objects, a ``session.connection()`` look-up
per statement, the commit's bookkeeping) cost about as much CPU as the statements and the
commit together: 874 µs per claim+complete for one claimer on SQLite against 500 µs here. On
SQLite most of it ran while holding the one write lock, and with 8 claimer processes each
transaction held it 640 µs: 698 claim+complete/s, against 1,424/s here (``/tmp`` experiment
alternating the two on one machine; ``bench/queue.py`` measures the result).

What :meth:`Database.write` guarantees is kept: on SQLite this process's :attr:`write_lock`,
then the cross-process writer lock file, then ``BEGIN IMMEDIATE``; the driver's errors as
SQLAlchemy's, a lost database as :class:`~switchboard.errors.DependencyUnavailable`; the feed
bell after the commit and never after a rollback. On SQLite the connection is this process's
own, kept open (its page cache stays warm); on PostgreSQL one is checked out of the pool per
transaction, as ``write`` does (``autocommit``: the pool without BEGIN and COMMIT).

Only prepared statements run here. An operation that needs the ORM (why a complete matched
nothing; a claim by id) raises :class:`SessionNeeded` before it writes anything, and
:func:`run` does it again in :meth:`Database.write`.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import sqlalchemy as sa

from switchboard.db import AUTOCOMMIT, Database, sqlite_execute, translate_driver_errors
from switchboard.feed import bell

T = TypeVar("T")


class SessionNeeded(Exception):
    """Raised inside a direct write, before anything is written, by an operation that needs an
    ORM session for this case; :func:`run` runs it again in :meth:`Database.write`."""


class DirectWrite:
    """What :class:`~switchboard.prepared.Prepared` and the lease operations use of a session:
    ``connection()``, ``get_bind()`` and ``info`` (``AUTOCOMMIT``)."""

    def __init__(self, conn: sa.Connection, autocommit: bool) -> None:
        self._conn = conn
        self.info = {AUTOCOMMIT: autocommit}

    def connection(self) -> sa.Connection:
        """The SQLAlchemy connection the transaction runs on."""
        return self._conn

    def get_bind(self) -> sa.Engine:
        """Its engine (the dialect decides the SQL)."""
        return self._conn.engine


def _roll_back(db: Database, conn: sa.Connection, dbapi: Any) -> None:
    """Roll back what is still open (SQLite may have rolled back itself, e.g. on a full disk);
    a connection that cannot roll back is not used again."""
    try:
        if dbapi.in_transaction:
            dbapi.execute("ROLLBACK")
    except sqlite3.Error:
        conn.invalidate()
        db.drop_direct_connection()


@contextmanager
def write(db: Database, autocommit: bool = False) -> Iterator[DirectWrite]:
    """A write transaction for prepared statements only; commits on success, rolls back on error.

    Args:
        autocommit: as for :meth:`Database.write`: the body writes one statement at most, and on
            PostgreSQL it runs without BEGIN and COMMIT.

    Raises:
        DependencyUnavailable: the database cannot be reached (or SQLite stays locked past its
            busy timeout).
    """
    if db.write_lock is None:  # PostgreSQL
        engine = db.autocommit_engine if autocommit else db.engine
        try:
            with translate_driver_errors(), engine.connect() as conn:
                if autocommit:
                    yield DirectWrite(conn, True)
                else:
                    with conn.begin():
                        yield DirectWrite(conn, False)
        except BaseException:
            bell.rolled_back()
            raise
        bell.committed()
        return
    with db.write_lock:
        conn = db.direct_connection()
        dbapi = conn.connection.dbapi_connection
        with db.flocked(), translate_driver_errors():
            sqlite_execute(dbapi, "BEGIN IMMEDIATE", conn.dialect)
            try:
                yield DirectWrite(conn, autocommit)
                sqlite_execute(dbapi, "COMMIT", conn.dialect)
            except BaseException:  # the body's error or the COMMIT's
                bell.rolled_back()
                _roll_back(db, conn, dbapi)
                raise
    bell.committed()


def run(db: Database, operation: Callable[..., T], *args: Any, autocommit: bool = False, **kwargs: Any) -> T:
    """``operation(write, *args, **kwargs)`` in a direct write, or again in :meth:`Database.write`
    if it raises :class:`SessionNeeded`. Returns what it returns; raises what it raises."""
    try:
        with write(db, autocommit) as direct:
            return operation(direct, *args, **kwargs)
    except SessionNeeded:
        with db.write(autocommit=autocommit) as session:
            return operation(session, *args, **kwargs)
