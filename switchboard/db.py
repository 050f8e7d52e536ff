"""Engines, sessions and the single-writer rule (DESIGN.md §3).

SQLite has one writer: in embedded mode every write transaction runs under a process-wide
lock, then an exclusive ``flock`` on ``<database>-writer.lock`` shared by every Switchboard
process on the file (the kernel wakes the next writer the moment the lock is free, where
SQLite's busy handler sleeps 1, 2, 5, 10 ... ms between retries: with 8 claimer processes
84 % of their time went there, issue 11), and starts with ``BEGIN IMMEDIATE`` (so it takes SQLite's write lock up front instead of
failing on upgrade), readers use their own deferred transactions, and the file runs in WAL mode
with a busy timeout for other processes (the CLI, a second ``serve``). PostgreSQL needs none of
this: the same code runs with plain transactions and row locks.
"""

from __future__ import annotations

import fcntl
import logging
import os
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.exc import InterfaceError, OperationalError
from sqlmodel import Session

from switchboard.config import Settings
from switchboard.errors import DependencyUnavailable
from switchboard.wal import (
    CHECKPOINT_INTERVAL_SECONDS,
    WAL_AUTOCHECKPOINT_PAGES,
    WAL_SIZE_LIMIT_BYTES,
    WalCheckpointer,
)

log = logging.getLogger(__name__)

SQLITE_BUSY_TIMEOUT_MS = 10_000
PING_IDLE_SECONDS = 1.0
"""PostgreSQL: a pooled connection idle at least this long is pinged before use (see :func:`_pg_engine`)."""
AUTOCOMMIT = "switchboard.autocommit"
"""``Session.info`` key: true in a session of :meth:`Database.write` ``(autocommit=True)`` on
PostgreSQL, where each statement is its own transaction."""
POOL_SIZE, POOL_OVERFLOW = 10, 10
"""PostgreSQL: connections kept open for write transactions, and the extra ones under load."""
AUTOCOMMIT_POOL_SIZE, AUTOCOMMIT_POOL_OVERFLOW = 10, 10
"""PostgreSQL: the same for the autocommit pool: reads (:meth:`Database.read`) and one-statement
writes (a claim-next, a complete). A process opens at most the four summed (40)."""


def _sqlite_engine(url: str, immediate: bool) -> sa.Engine:
    engine = sa.create_engine(
        url,
        connect_args={"check_same_thread": False, "timeout": SQLITE_BUSY_TIMEOUT_MS / 1000},
        pool_size=8,
        max_overflow=16,
        poolclass=sa.pool.QueuePool,
    )

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        # Let SQLAlchemy's "begin" event emit BEGIN itself (pysqlite's own is deferred).
        dbapi_conn.isolation_level = None
        cur = dbapi_conn.cursor()
        cur.execute("PRAGMA journal_mode=WAL")
        cur.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
        cur.execute("PRAGMA foreign_keys=ON")
        cur.execute("PRAGMA synchronous=NORMAL")
        # SQLite's own checkpoint (copy the WAL into the database file and fsync), far less often
        # than its default 4 MB: it runs inside a writer's COMMIT, under the writer lock, and a
        # claim+complete rewrites the same few pages, which one checkpoint copies once (issue 11).
        # In ``serve`` and workers a WalCheckpointer thread checkpoints first and starts the log
        # over, so this one is a backstop. The thresholds and why: switchboard/wal.py.
        cur.execute(f"PRAGMA wal_autocheckpoint={WAL_AUTOCHECKPOINT_PAGES}")
        cur.execute(f"PRAGMA journal_size_limit={WAL_SIZE_LIMIT_BYTES}")
        cur.close()

    begin = "BEGIN IMMEDIATE" if immediate else "BEGIN"

    @event.listens_for(engine, "begin")
    def _on_begin(conn: sa.Connection) -> None:
        # On the DBAPI connection: SQLAlchemy's execution path cost about a tenth of a claim's
        # time under the writer lock (issue 11).
        sqlite_execute(conn.connection.dbapi_connection, begin, conn.dialect)

    return engine


def sqlite_execute(dbapi_conn: Any, sql: str, dialect: sa.Dialect) -> None:
    """Run ``sql`` (no parameters, no rows) on a SQLite DBAPI connection, a driver error wrapped
    as SQLAlchemy's own, so a locked database still becomes the 503 of
    :func:`translate_driver_errors`."""
    try:
        dbapi_conn.execute(sql)
    except sqlite3.Error as exc:
        raise sa.exc.DBAPIError.instance(sql, (), exc, sqlite3.Error, dialect=dialect) from exc


def _pg_engine(url: str, autocommit: bool = False, disconnects: list[float] | None = None) -> sa.Engine:
    """A PostgreSQL engine whose pool pings a connection only after :data:`PING_IDLE_SECONDS` idle.

    With ``autocommit`` every connection of the pool is opened in autocommit mode (each statement
    its own transaction) and stays so: the pool of :meth:`Database.write` ``(autocommit=True)``.
    Switching a shared pool's connection into autocommit and back on every checkout (SQLAlchemy's
    ``execution_options(isolation_level=...)``) was about a fifth of a claimer's Python time per
    claim+complete (issue 11).

    SQLAlchemy's ``pool_pre_ping`` costs a round trip on every checkout: a quarter of a claimer's
    time with 8 claimers (issue 11). A connection checked in less than a second ago was working
    then; one idle longer (a server restart, an idle timeout) is pinged first, and a dead one is
    replaced before the caller sees it (SQLAlchemy's "pessimistic" recipe: the ``checkout`` event
    raising ``DisconnectionError``). A connection that dies within that second fails its one
    statement (a 503, see :func:`translate_driver_errors`) and SQLAlchemy invalidates the pool.

    Args:
        url: the PostgreSQL URL.
        autocommit: open every connection in autocommit (see above).
        disconnects: a one-item list shared by the engines of one :class:`Database`, holding the
            ``time.monotonic()`` of the last disconnect any of them saw; a connection idle since
            then is pinged at checkout however recently it was used, so after a server restart
            the other pool does not fail a request of its own first.
    """
    if autocommit:
        engine = sa.create_engine(url, pool_size=AUTOCOMMIT_POOL_SIZE, max_overflow=AUTOCOMMIT_POOL_OVERFLOW,
                                  isolation_level="AUTOCOMMIT")
    else:
        engine = sa.create_engine(url, pool_size=POOL_SIZE, max_overflow=POOL_OVERFLOW)

    @event.listens_for(engine, "checkin")
    def _on_checkin(_dbapi_conn: Any, record: Any) -> None:
        record.info["idle_since"] = time.monotonic()

    shared = disconnects if disconnects is not None else [0.0]

    @event.listens_for(engine, "handle_error")
    def _on_error(ctx: Any) -> None:
        if ctx.is_disconnect:  # a sibling pool's connections idle since then are pinged first
            shared[0] = time.monotonic()

    @event.listens_for(engine, "checkout")
    def _on_checkout(dbapi_conn: Any, record: Any, _proxy: Any) -> None:
        since = record.info.pop("idle_since", None)
        if since is None or (time.monotonic() - since < PING_IDLE_SECONDS and since > shared[0]):
            return
        try:
            engine.dialect.do_ping(dbapi_conn)
        except engine.dialect.loaded_dbapi.Error as exc:
            raise sa.exc.DisconnectionError(f"ping failed: {type(exc).__name__}") from exc

    return engine


def make_engine(settings: Settings, disconnects: list[float] | None = None) -> sa.Engine:
    """Return the engine for ``settings.database_url`` (SQLite pragmas applied).

    For SQLite the instance folder is created if missing.
    """
    if settings.is_sqlite:
        from switchboard.instance import secure

        secure(settings)  # folder 0700, database files 0600 before SQLite creates them (issue 13 item 5)
        return _sqlite_engine(settings.database_url, immediate=True)
    return _pg_engine(settings.database_url, disconnects=disconnects)


class Database:
    """The ledger: a write path (one writer on SQLite) and a read path.

    Args:
        settings: where the database is.
    """

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.is_sqlite = settings.is_sqlite
        disconnects = [0.0]
        self.engine = make_engine(settings, disconnects)
        # PostgreSQL: a pool of its own whose connections stay in autocommit, each statement its
        # own transaction (see write(autocommit=True) and read()); SQLite does not use it.
        self.autocommit_engine = self.engine if self.is_sqlite else _pg_engine(
            settings.database_url, autocommit=True, disconnects=disconnects)
        if self.is_sqlite:
            self.read_engine = _sqlite_engine(settings.database_url, immediate=False)
        else:
            self.read_engine = self.autocommit_engine
        self.write_lock = threading.Lock() if self.is_sqlite else None
        """SQLite: this process's writers queue here before the writer lock file (:meth:`flocked`)."""
        self._direct: tuple[int, sa.Connection] | None = None
        self._flock_path: str | None = None
        self._flock_fd: int | None = None
        self._flock_pid = 0
        self._file: str | None = None
        self.checkpointer: WalCheckpointer | None = None
        path = settings.sqlite_path
        if path is not None:
            self._file = str(path)
            self._flock_path = f"{path}-writer.lock"

    def start_checkpointer(self, interval: float = CHECKPOINT_INTERVAL_SECONDS) -> None:
        """SQLite file databases: checkpoint the WAL from a background thread (see
        :class:`WalCheckpointer`) until :meth:`dispose`; long-running processes call this
        (``serve`` and ``switchboard worker``; not ``serve``'s processing process, which shares
        ``serve``'s file). No-op on PostgreSQL, in memory, or when already running."""
        if self._file is not None and self.checkpointer is None:
            self.checkpointer = WalCheckpointer(self._file, interval, lock_path=self._flock_path)

    def _writer_fd(self) -> int | None:
        """This process's descriptor of the writer lock file (reopened after a fork)."""
        if self._flock_path is None:
            return None
        if self._flock_fd is None or self._flock_pid != os.getpid():
            self._flock_fd = os.open(self._flock_path, os.O_RDWR | os.O_CREAT, 0o600)
            self._flock_pid = os.getpid()
        return self._flock_fd

    def engines(self) -> list[sa.Engine]:
        """Every engine of this database, each once: the writer's, the readers' (SQLite) and the
        autocommit one (PostgreSQL, the readers' too). Whatever rides on an engine's dialect
        (the vault key ring of :func:`switchboard.sealing.columns.attach`) goes on each."""
        return list({id(e): e for e in (self.engine, self.read_engine, self.autocommit_engine)}.values())

    @contextmanager
    def write(self, autocommit: bool = False) -> Iterator[Session]:
        """A write transaction; commits on success, rolls back on error.

        Args:
            autocommit: the body writes with one statement at most (reads before it are fine).
                On PostgreSQL it then runs without BEGIN and COMMIT, each statement its own
                transaction: two round trips fewer (issue 11: claims, completes). Lease
                operations refuse a multi-statement write in such a session
                (:func:`switchboard.queue.leases.one_statement`). SQLite ignores it: its
                ``BEGIN IMMEDIATE`` is how the single writer is kept, and costs no round trip.

        Raises:
            DependencyUnavailable: when the database cannot be reached.
        """
        lock = self.write_lock
        if lock is None:
            engine = self.autocommit_engine if autocommit else self.engine  # PostgreSQL: both set
            with translate_driver_errors():
                with Session(engine, expire_on_commit=False, info={AUTOCOMMIT: autocommit}) as session:
                    with session.begin():
                        yield session
            return
        # SQLite: this process's writers queue on the process lock first (so at most one write
        # connection is checked out per process, however many threads wait); the connection and
        # the session are ready before the cross-process flock is taken, and the flock is given
        # back right after COMMIT: only the transaction itself runs under it (issue 11).
        with lock:
            with translate_driver_errors():
                conn = self.engine.connect()
            try:
                with Session(bind=conn, expire_on_commit=False) as session:
                    with self.flocked(), translate_driver_errors(), session.begin():
                        yield session
            finally:
                conn.close()

    @contextmanager
    def flocked(self) -> Iterator[None]:
        """SQLite: hold the cross-process writer lock file (``flock``) until the block ends. The
        caller holds :attr:`write_lock` already. Without a lock file (in memory, a read-only
        folder) SQLite's busy timeout still applies."""
        fd = None
        try:
            fd = self._writer_fd()
            if fd is not None:
                fcntl.flock(fd, fcntl.LOCK_EX)
        except OSError:
            fd = None
        try:
            yield
        finally:
            if fd is not None:
                try:
                    fcntl.flock(fd, fcntl.LOCK_UN)
                except OSError:
                    pass  # dispose() closed the file meanwhile, which gave the lock back

    def direct_connection(self) -> sa.Connection:
        """SQLite: this process's connection for :mod:`switchboard.direct` writes, opened once and
        kept (its page cache stays warm); use it only under :attr:`write_lock`."""
        if self._direct is not None and self._direct[0] != os.getpid():
            self.drop_direct_connection()
        if self._direct is None:
            with translate_driver_errors():
                self._direct = (os.getpid(), self.engine.connect())
        return self._direct[1]

    def drop_direct_connection(self) -> None:
        """Close and forget :meth:`direct_connection` (after a failure left it unusable). One
        inherited across a fork is kept referenced and never closed: closing it, or letting the
        pool take it back, would roll back the parent's SQLite handle from the child."""
        if self._direct is not None:
            if self._direct[0] == os.getpid():
                self._direct[1].close()
            else:
                _INHERITED.append(self._direct[1])
        self._direct = None

    @contextmanager
    def read(self) -> Iterator[Session]:
        """A read-only session: a deferred transaction on SQLite; on PostgreSQL the autocommit
        pool, each statement its own transaction (issue 11: a BEGIN and a ROLLBACK round trip
        saved, and psycopg's ``rollback()`` forgot every statement it prepared on the connection;
        READ COMMITTED gave each statement its own snapshot already).

        Raises:
            RuntimeError: a flush with anything to write (on PostgreSQL it would commit at
                once; ``autoflush`` is off): a programming error, write in :meth:`write`.
        """
        with translate_driver_errors():
            with ReadSession(self.read_engine, expire_on_commit=False, autoflush=False) as session:
                yield session

    def dispose(self) -> None:
        """Close pooled connections and stop the checkpointer (call after fork and at shutdown)."""
        if self.checkpointer is not None:
            self.checkpointer.close()
            self.checkpointer = None
        # A direct write running in another thread finishes first (up to DISPOSE_WAIT_SECONDS):
        # closing its connection under it would roll it back half-done.
        mine = self._direct is not None and self._direct[0] == os.getpid() and self.write_lock is not None
        held = mine and self.write_lock.acquire(timeout=DISPOSE_WAIT_SECONDS)  # type: ignore[union-attr]
        try:
            if self._flock_fd is not None and self._flock_pid == os.getpid():
                os.close(self._flock_fd)
            self._flock_fd = None
            if held or not mine:
                self.drop_direct_connection()
        finally:
            if held:
                self.write_lock.release()  # type: ignore[union-attr]
        for engine in self.engines():
            engine.dispose()


class ReadSession(Session):
    """The session of :meth:`Database.read`: a flush with anything to write raises."""


@event.listens_for(ReadSession, "before_flush")
def _refuse_writes(session: Session, *_: Any) -> None:
    raise RuntimeError("a read session writes nothing (on PostgreSQL it would commit at once)")


DISPOSE_WAIT_SECONDS = 5.0
"""How long :meth:`Database.dispose` waits for a direct write running in another thread."""
_INHERITED: list[sa.Connection] = []
"""Direct connections inherited across a fork (see :meth:`Database.drop_direct_connection`)."""

_FAILURE_LOG_SECONDS = 10.0
_failure_logged = [0.0]


@contextmanager
def translate_driver_errors() -> Iterator[None]:
    """Driver and pool failures become :class:`DependencyUnavailable` (a retryable 503).

    Its message is what callers see (webhook senders, agents, REST clients), so it names no
    host, port or user: the driver's own words (``connection to server at "10.0.0.5", port
    5432 failed``) go to the log instead, once per :data:`_FAILURE_LOG_SECONDS` at most (a
    review found a 503 to webhook senders quoting the database's address).
    """
    try:
        yield
    except sa.exc.TimeoutError as exc:
        raise DependencyUnavailable("the database connection pool is exhausted; retry later") from exc
    except (OperationalError, InterfaceError) as exc:
        reason = str(exc.orig).strip().splitlines()[0][:200] if exc.orig is not None else type(exc).__name__
        now = time.monotonic()
        if now - _failure_logged[0] >= _FAILURE_LOG_SECONDS:
            _failure_logged[0] = now
            log.warning("the database failed: %s", reason)
        raise DependencyUnavailable("the database is unavailable; retry later") from exc


def unreachable(exc: BaseException) -> bool:
    """Whether ``exc`` is the database being unreachable rather than anything about the work: a
    :class:`DependencyUnavailable` (from :func:`translate_driver_errors`) caused by a lost or
    refused connection, a server shutting down, an exhausted pool, or SQLite's lock held past
    the busy timeout. Processing does not count such a failure against a delivery."""
    if not isinstance(exc, DependencyUnavailable):
        return False
    cause = exc.__cause__
    if isinstance(cause, sa.exc.TimeoutError):
        return True
    if isinstance(cause, sa.exc.DBAPIError):
        if cause.connection_invalidated or "database is locked" in str(cause.orig):
            return True
        # PostgreSQL (psycopg): a failure to connect carries no SQLSTATE; class 08 is a connection
        # exception, 57P01-57P03 a server shutting down or starting, 53300 too many connections.
        sqlstate = getattr(cause.orig, "sqlstate", "")
        return sqlstate is None or sqlstate.startswith("08") or sqlstate in _UNAVAILABLE_SQLSTATES
    return False


_UNAVAILABLE_SQLSTATES = frozenset({"57P01", "57P02", "57P03", "53300"})


def migrations_dir() -> Path:
    """The Alembic environment shipped beside the package (``migrations/``)."""
    here = Path(__file__).resolve().parent
    for candidate in (here.parent / "migrations", here / "_migrations"):
        if (candidate / "env.py").exists():
            return candidate
    raise FileNotFoundError("migrations/ not found next to the switchboard package")


def alembic_config(settings: Settings) -> Any:
    """An Alembic ``Config`` pointing at ``migrations/`` and ``settings.database_url``."""
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(migrations_dir()))
    cfg.set_main_option("sqlalchemy.url", settings.database_url.replace("%", "%%"))
    cfg.attributes["settings"] = settings  # migration 0009 seals source secrets with the vault ring
    return cfg


def upgrade(settings: Settings) -> None:
    """Apply every migration up to head (``switchboard init`` and ``serve`` start-up); at head on
    PostgreSQL the same transaction keeps new event ids ahead of restored ones
    (``migrations/env.py``, :func:`switchboard.feed.events.align_ids`).

    Raises:
        SchemaAhead: the database is at a revision this version does not have (a newer
            version migrated it; raised by the migration environment, ``migrations/env.py``,
            before any migration runs): the database is not changed.
        DependencyUnavailable: PostgreSQL cannot be reached.
    """
    from alembic import command

    from switchboard.instance import secure

    secure(settings)  # folder 0700, database files 0600 (issue 13 item 5)
    command.upgrade(alembic_config(settings), "head")
