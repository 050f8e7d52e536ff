"""The cheap at-head check every CLI command runs (issue 14, item 9).

A full ``alembic upgrade head`` builds Alembic's script directory and an engine (about a
second). Only ``init``, ``serve``, ``worker`` and ``migrate`` upgrade; every other command
calls :func:`require_at_head`, which reads the head revision from the migration files with a
regular expression and the database's ``alembic_version`` with the bare driver (``sqlite3`` or
psycopg): a few milliseconds (``bench/cli_start.py`` measures it). :func:`migrate_to` moves
a schema down or up for ``switchboard migrate --to`` (rolling a release back).
"""

from __future__ import annotations

import re
import sqlite3
from datetime import UTC, datetime
from functools import lru_cache
from pathlib import Path

from switchboard.config import Settings, sqlite_uri
from switchboard.errors import SwitchboardError

_REVISION = re.compile(r"^revision\s*(?::\s*str\s*)?=\s*['\"]([^'\"]+)['\"]", re.MULTILINE)
_DOWN = re.compile(r"^down_revision\s*(?::[^=]+)?=\s*(.+)$", re.MULTILINE)


class NoInstance(SwitchboardError):
    """No Switchboard instance here: run `switchboard init` first (or set SWITCHBOARD_HOME)."""

    code = "no_instance"
    status = 409


class MigrationNeeded(SwitchboardError):
    """The database schema is behind this version: run `switchboard migrate`."""

    code = "migration_needed"
    status = 409


class SchemaAhead(SwitchboardError):
    """The database was migrated by a newer Switchboard: its revision is not among this
    version's migrations (a release rolled back after ``switchboard migrate``)."""

    code = "schema_ahead"
    status = 409


class ConfirmationRequired(SwitchboardError):
    """Moving the schema down drops what the later migrations added, data included: run again
    with ``--yes`` (``switchboard migrate --to``)."""

    code = "confirmation_required"
    status = 409


def known_revisions() -> frozenset[str]:
    """Every revision in ``migrations/versions``."""
    return _graph()[0]


@lru_cache(maxsize=1)
def head_revision() -> str:
    """The newest revision in ``migrations/versions`` (the one no other revision follows)."""
    revisions, parents = _graph()
    heads = sorted(revisions - parents)
    if len(heads) != 1:
        raise RuntimeError(f"migrations have {len(heads)} heads: {heads}")
    return heads[0]


@lru_cache(maxsize=1)
def _graph() -> tuple[frozenset[str], frozenset[str]]:
    """``(revisions, parents)`` read from the migration files with regular expressions (once)."""
    revisions: set[str] = set()
    parents: set[str] = set()
    for path in (_migrations_dir() / "versions").glob("*.py"):
        text = path.read_text(encoding="utf-8")
        found = _REVISION.search(text)
        if not found:
            continue
        revisions.add(found.group(1))
        down = _DOWN.search(text)
        if down:
            parents.update(re.findall(r"['\"]([^'\"]+)['\"]", down.group(1)))
    return frozenset(revisions), frozenset(parents)


def refuse_newer(current: str | None) -> None:
    """Stop when ``current`` (the database's revision) is not one of this version's.

    Raises:
        SchemaAhead: a newer Switchboard migrated the database; neither ``migrate`` nor any
            command of this version can use it (Alembic itself only says it cannot locate
            the revision, with a traceback).
    """
    if current is not None and current not in known_revisions():
        head = head_revision()
        raise SchemaAhead(f"the database is at revision {current}, which this version does not know (its newest "
                          f"is {head}): a newer Switchboard migrated it. Run that version, or move the schema back "
                          f"with it first: `switchboard migrate --to {head} --yes`")


def _migrations_dir() -> Path:
    """``migrations/`` beside the package (as :func:`switchboard.db.migrations_dir`, without
    importing SQLAlchemy: this module must stay cheap to import)."""
    here = Path(__file__).resolve().parent
    for candidate in (here.parent / "migrations", here / "_migrations"):
        if (candidate / "env.py").exists():
            return candidate
    raise FileNotFoundError("migrations/ not found next to the switchboard package")


def current_revision(settings: Settings) -> str | None:
    """The database's revision, or ``None`` when no instance exists (no file, no table).

    Raises:
        DependencyUnavailable: PostgreSQL cannot be reached.
    """
    if settings.is_sqlite:
        path = settings.sqlite_path
        if path is None or not path.exists():
            return None
        conn = sqlite3.connect(sqlite_uri(path, "ro"), uri=True, timeout=10)
        try:
            return _version(conn.execute, sqlite3.OperationalError)
        finally:
            conn.close()
    import psycopg

    from switchboard.errors import DependencyUnavailable

    url = settings.database_url.replace("postgresql+psycopg://", "postgresql://", 1)
    try:
        with psycopg.connect(url, connect_timeout=10) as conn:
            return _version(conn.execute, psycopg.errors.UndefinedTable)
    except psycopg.OperationalError as exc:
        raise DependencyUnavailable(f"the database failed: {str(exc).strip().splitlines()[0][:200]}") from exc


def _version(execute: object, missing_table: type[Exception]) -> str | None:
    try:
        row = execute("select version_num from alembic_version").fetchone()  # type: ignore[operator]
    except missing_table:
        return None
    return row[0] if row else None


def require_at_head(settings: Settings) -> None:
    """Stop unless an instance exists at the current schema.

    Raises:
        NoInstance: no database file (SQLite) or no ``alembic_version`` (PostgreSQL).
        MigrationNeeded: the schema is behind this version's migrations.
        SchemaAhead: a newer version migrated it (:func:`refuse_newer`).
    """
    current = current_revision(settings)
    if current is None:
        import os

        if settings.is_sqlite and os.environ.get("SWITCHBOARD_DATABASE_URL", "").strip():
            # Named by its file, not the home folder: a new-user run with a database URL into a
            # missing folder was told "no Switchboard instance at <the home that existed>".
            raise NoInstance(f"no Switchboard database at {settings.sqlite_path} (SWITCHBOARD_DATABASE_URL): "
                             "check the path, or run `switchboard init` to create it there")
        origin = "SWITCHBOARD_HOME" if os.environ.get("SWITCHBOARD_HOME") else "the default: SWITCHBOARD_HOME is not set"
        where = f"{settings.home} ({origin})" if settings.is_sqlite else "SWITCHBOARD_DATABASE_URL (no schema there)"
        raise NoInstance(f"no Switchboard instance at {where}: run `switchboard init` first, "
                         "or set SWITCHBOARD_HOME to the instance folder")
    refuse_newer(current)
    head = head_revision()
    if current != head:
        raise MigrationNeeded(f"the database is at revision {current}, this version needs {head}: "
                              "run `switchboard migrate` (serve and worker also migrate at start)")


def migrate_to(settings: Settings, revision: str, confirmed: bool = False) -> tuple[str, str | None]:
    """Move an existing instance's schema to ``revision``, down or up (``switchboard migrate
    --to``): down before running an earlier release, whose migrations end there.

    Moving down runs the downgrades of every later migration, which drop what each added: tables
    and columns, with their data (going back to 0001 drops, for one, who owns each project). It
    is refused unless ``confirmed`` (the CLI's ``--yes``); on SQLite a copy of the database as it
    was is then written beside it first (:func:`switchboard.backup.backup`, mode 0600), so nothing
    is lost. On PostgreSQL the refusal gives the ``pg_dump`` command to run first.

    Returns:
        ``(the revision the schema was at before, the path of the copy made first or None)``.

    Raises:
        InvalidArgument: ``revision`` is not one of this version's migrations.
        Conflict: moving down while a ``serve`` or ``worker`` of this instance runs on this
            machine (it would go on writing with this version's schema; seen by the lock they
            hold, :data:`switchboard.instance.RUNNING_LOCK`): stop them first.
        ConfirmationRequired: moving down without ``confirmed``; nothing changed.
        NoInstance: no database (nothing to move; ``switchboard init`` makes one).
        SchemaAhead: the database was migrated by a newer version than this one.
        DependencyUnavailable: PostgreSQL cannot be reached.
    """
    from alembic import command
    from alembic.script import ScriptDirectory

    from switchboard.db import alembic_config
    from switchboard.errors import Conflict, InvalidArgument
    from switchboard.instance import exclusive_or_none, secure, served_url

    if revision not in known_revisions():
        raise InvalidArgument(f"unknown revision {revision!r}: this version's revisions are 0001 to {head_revision()} "
                              "(the four digits that start each file name in migrations/versions)")
    current = current_revision(settings)
    if current is None:
        raise NoInstance("no Switchboard instance here to migrate: run `switchboard init` first")
    refuse_newer(current)
    config = alembic_config(settings)
    newest_first = [script.revision for script in ScriptDirectory.from_config(config).walk_revisions()]
    undone = newest_first.index(revision) - newest_first.index(current)
    if undone <= 0:  # up, or where it is
        secure(settings)  # folder 0700, database files 0600, as upgrade()
        command.upgrade(config, revision)
        return current, None
    with exclusive_or_none(settings) as alone:
        running = served_url(settings)  # also a serve of a release before the lock
        if not alone or running:
            who = (f"`switchboard serve` is running for this instance ({running})" if running else
                   "a `switchboard serve`, `switchboard worker` or other `migrate --to` of this instance is "
                   "running on this machine")
            raise Conflict(f"{who}: stop it, and every `switchboard worker`, before moving the schema back")
        return current, _move_down(settings, config, current, revision, undone, confirmed)


def _move_down(settings: Settings, config: object, current: str, revision: str, undone: int,
               confirmed: bool) -> str | None:
    """:func:`migrate_to`'s move down, no ``serve`` or ``worker`` running; the copy's path."""
    from alembic import command

    from switchboard.instance import secure

    if not confirmed:
        what = (f"moving the schema down from {current} to {revision} undoes {undone} migration"
                f"{'s' if undone > 1 else ''}, whose downgrades drop what each added (tables and columns, "
                "with their data)")
        if not settings.is_sqlite:
            from switchboard.backup import pg_dump_command

            dump = settings.home / f"switchboard-at-{current}.dump"
            raise ConfirmationRequired(f"{what}. Back the database up first ({pg_dump_command(settings, dump)}), "
                                       "then run again with --yes")
        db = settings.sqlite_path
        where = "" if db is None else (f": a copy of the database at {current} is written first, to "
                                       f"{db.parent}/{db.stem}-at-{current}-<UTC time>.db")
        raise ConfirmationRequired(f"{what}. Run again with --yes{where}")
    secure(settings)  # folder 0700, database files 0600, as upgrade()
    copy = _copy_path(settings, current)
    if copy is not None:
        from switchboard.backup import backup

        backup(settings, copy)
    command.downgrade(config, revision)
    return None if copy is None else str(copy)


def _copy_path(settings: Settings, current: str) -> Path | None:
    """Where :func:`migrate_to` copies a SQLite database before moving it down: beside it,
    named for its revision and the UTC second (``switchboard-at-0024-20261207T155012Z.db``);
    ``None`` on PostgreSQL (and for an in-memory database)."""
    db = settings.sqlite_path if settings.is_sqlite else None
    if db is None:
        return None
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    path, n = db.with_name(f"{db.stem}-at-{current}-{stamp}.db"), 1
    while path.exists():  # a second move down within the same second
        n += 1
        path = db.with_name(f"{db.stem}-at-{current}-{stamp}-{n}.db")
    return path
