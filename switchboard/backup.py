"""``switchboard backup PATH``: a consistent copy of the ledger while the hub serves (issue 14).

SQLite: the online backup API (https://www.sqlite.org/backup.html, Python's
``sqlite3.Connection.backup``) copies the database page by page under read transactions, so
``serve`` keeps writing meanwhile and the copy is one consistent snapshot (WAL content
included). The copy is written beside PATH and renamed into place, so PATH is either complete
or absent. PostgreSQL: ``pg_dump`` is the tool; the command is printed, nothing is copied.

The vault key ring is never in the copy: the sealed bodies and secret values in it open only
with ``<home>/vault.keys`` (or ``SWITCHBOARD_VAULT_KEYS``), which must be kept separately.
"""

from __future__ import annotations

import os
import sqlite3
from contextlib import closing
from pathlib import Path
from urllib.parse import parse_qsl, urlencode, urlsplit

from switchboard.config import Settings, sqlite_uri
from switchboard.errors import Conflict, DependencyUnavailable, InvalidArgument


class UsePgDump(InvalidArgument):
    """PostgreSQL is backed up with pg_dump."""

    code = "use_pg_dump"


def pg_dump_command(settings: Settings, path: Path) -> str:
    """The ``pg_dump`` command for ``settings.database_url`` (password left out: use PGPASSWORD)."""
    parts = urlsplit(settings.database_url.replace("postgresql+psycopg://", "postgresql://", 1))
    netloc = parts.netloc
    if parts.password is not None:
        netloc = netloc.replace(f":{parts.password}@", "@")
    # libpq also takes the password as a query parameter (a review: printed in the refusal of
    # `migrate --to`, which users paste into tickets).
    query = urlencode([(k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True) if k != "password"])
    url = parts._replace(netloc=netloc, query=query).geturl()
    return f"pg_dump --format=custom --file '{path}' '{url}'"


def backup(settings: Settings, path: Path) -> dict[str, object]:
    """Copy the SQLite ledger to ``path``.

    Returns:
        ``{path, bytes, pages}``.

    Raises:
        UsePgDump: the ledger is PostgreSQL (the message holds the command).
        Conflict: ``path`` exists.
        InvalidArgument: ``path``'s folder does not exist.
        DependencyUnavailable: the copy could not be written (a full disk, no permission);
            nothing is left at ``path``.
    """
    path = Path(path).expanduser().absolute()
    if not settings.is_sqlite:
        raise UsePgDump(f"back up PostgreSQL with pg_dump: {pg_dump_command(settings, path)}")
    if path.exists():
        raise Conflict(f"{path} exists; give a new file name")
    if not path.parent.is_dir():
        raise InvalidArgument(f"{path.parent} is not a folder")
    source = settings.sqlite_path
    if source is None:
        raise InvalidArgument("an in-memory database has nothing to back up")
    partial = path.with_name(path.name + ".partial")
    try:
        # Created 0600 before a page is copied: the ledger is never readable by others, even
        # in a folder secure() does not tighten (a review).
        os.close(os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600))
        with closing(sqlite3.connect(sqlite_uri(source, "ro"), uri=True, timeout=30)) as src, \
                closing(sqlite3.connect(partial)) as dst:
            src.backup(dst, pages=1024)  # steps of 1024 pages: the writer is never held for long
            pages = dst.execute("pragma page_count").fetchone()[0]
            dst.execute("pragma journal_mode=DELETE")  # a single self-contained file
        os.replace(partial, path)
    except (sqlite3.Error, OSError) as exc:  # a full disk, a folder not writable: no traceback, no half file
        partial.unlink(missing_ok=True)
        raise DependencyUnavailable(f"could not write the copy to {path}: {exc}") from None
    return {"path": str(path), "bytes": path.stat().st_size, "pages": pages}
