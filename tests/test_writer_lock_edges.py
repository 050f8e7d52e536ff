"""The SQLite writer flock around ``Database.write``'s transaction (issue 11): exit paths that
must give it back, and transactions inside ``write`` that must not give it back early (from a
review of a variant that took it at BEGIN and gave it back in the dialect's do_commit, not kept:
see docs/ARCHITECTURE.md)."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import Session as OrmSession

from switchboard.db import Database
from switchboard.errors import DependencyUnavailable
from tests.test_writer_lock import _db, _flock_free


def _everything_given_back(db: Database, tmp_path: Path) -> None:
    assert db.write_lock is not None and not db.write_lock.locked()
    assert db.engine.pool.checkedout() == 0
    assert _flock_free(tmp_path)


def test_a_commit_refused_by_a_deferred_constraint_gives_everything_back(tmp_path: Path) -> None:
    db = _db(tmp_path)
    with db.write() as s:
        s.execute(sa.text("CREATE TABLE p (id INTEGER PRIMARY KEY)"))
        s.execute(sa.text("CREATE TABLE c (p_id INTEGER REFERENCES p(id) DEFERRABLE INITIALLY DEFERRED)"))
    with pytest.raises(sa.exc.IntegrityError), db.write() as s:
        s.execute(sa.text("INSERT INTO c VALUES (42)"))  # fails at COMMIT only
    _everything_given_back(db, tmp_path)
    with db.write() as s:  # the SQLite transaction the failed COMMIT left open was rolled back
        s.execute(sa.text("INSERT INTO t VALUES (1)"))
    with db.read() as s:
        assert s.execute(sa.text("SELECT count(*) FROM c")).scalar() == 0
        assert s.execute(sa.text("SELECT count(*) FROM t")).scalar() == 1
    db.dispose()


def test_an_after_commit_hook_that_raises_gives_everything_back(tmp_path: Path) -> None:
    db = _db(tmp_path)

    def boom(_session: object) -> None:
        raise RuntimeError("after commit")

    sa.event.listen(OrmSession, "after_commit", boom)
    try:
        with pytest.raises(RuntimeError), db.write() as s:
            s.execute(sa.text("INSERT INTO t VALUES (1)"))
    finally:
        sa.event.remove(OrmSession, "after_commit", boom)
    _everything_given_back(db, tmp_path)
    with db.read() as s:
        assert s.execute(sa.text("SELECT count(*) FROM t")).scalar() == 1
    db.dispose()


def test_savepoints_keep_the_flock_until_the_outer_commit(tmp_path: Path) -> None:
    db = _db(tmp_path)
    with db.write() as s:
        s.execute(sa.text("INSERT INTO t VALUES (1)"))
        nested = s.begin_nested()
        s.execute(sa.text("INSERT INTO t VALUES (2)"))
        nested.rollback()
        assert not _flock_free(tmp_path)
        with s.begin_nested():
            s.execute(sa.text("INSERT INTO t VALUES (3)"))
        assert not _flock_free(tmp_path)
    _everything_given_back(db, tmp_path)
    with db.read() as s:
        assert s.execute(sa.text("SELECT x FROM t ORDER BY x")).scalars().all() == [1, 3]
    db.dispose()


def test_a_pooled_connection_returned_by_the_writing_thread_does_not_give_the_flock_back(tmp_path: Path) -> None:
    """The pool's reset-on-return calls the dialect's do_rollback: a second connection of the write
    engine that the thread inside ``write`` checks in (here: opened and closed without a
    statement) runs the wrapped rollback in the owner thread and gives the flock back mid-transaction
    (another process may then BEGIN IMMEDIATE and wait on SQLite's busy handler). No production code
    uses ``db.engine`` inside ``write`` today; before 68511ab the flock was held across the block."""
    db = _db(tmp_path)
    with db.write() as s:
        s.execute(sa.text("INSERT INTO t VALUES (1)"))
        other = db.engine.connect()
        other.close()  # reset on return: ROLLBACK on a connection with no transaction
        held = not _flock_free(tmp_path)
    assert held, "the flock was given back while the write transaction was open"
    db.dispose()


def test_dispose_while_a_writer_holds_the_flock_does_not_break_its_commit(tmp_path: Path) -> None:
    """Shutdown (hub.close -> dispose) while another thread is in a write transaction: the commit
    that already happened must not be turned into an error by the flock's release."""
    db = _db(tmp_path)
    inside, go = threading.Event(), threading.Event()
    errors: list[BaseException] = []

    def writer() -> None:
        try:
            with db.write() as s:
                s.execute(sa.text("INSERT INTO t VALUES (1)"))
                inside.set()
                go.wait(10)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    t = threading.Thread(target=writer)
    t.start()
    assert inside.wait(10)
    db.dispose()
    go.set()
    t.join(10)
    assert [type(e).__name__ for e in errors] in ([], [DependencyUnavailable.__name__])
