"""The instance folder's permissions: private to the service's user (issue 13 item 5).

The folder holds the SQLite ledger (deliveries, todos, sealed secrets) and the vault key file.
:func:`secure` makes the folder ``0700`` and the database files ``0600``. SQLite creates
``-wal``, ``-shm`` and ``-journal`` files later with the mode of the database file, so creating
the database file ``0600`` before SQLite first opens it covers them too (its unix VFS,
``robust_open``/``findCreateFileMode``); existing ones are tightened here as well.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from switchboard.config import Settings

log = logging.getLogger(__name__)
FOLDER_MODE = 0o700
FILE_MODE = 0o600
SQLITE_SUFFIXES = ("", "-wal", "-shm", "-journal")


def _tighten(path: Path, mode: int) -> None:
    try:
        info = path.stat()
    except FileNotFoundError:
        return
    if info.st_mode & 0o777 != mode and info.st_uid == os.geteuid():
        os.chmod(path, mode)


def secure(settings: Settings) -> None:
    """Create the instance folder ``0700`` and the database file ``0600``; tighten existing ones.

    A folder or file owned by another user is left as it is (with a warning): the service must
    not change what it does not own.
    """
    home = Path(settings.home)
    home.mkdir(mode=FOLDER_MODE, parents=True, exist_ok=True)
    _tighten(home, FOLDER_MODE)
    db = settings.sqlite_path
    if db is None:
        return
    db.parent.mkdir(mode=FOLDER_MODE, parents=True, exist_ok=True)
    if not db.exists():
        os.close(os.open(db, os.O_CREAT | os.O_WRONLY, FILE_MODE))
    for suffix in SQLITE_SUFFIXES:
        _tighten(Path(str(db) + suffix), FILE_MODE)
    if db.stat().st_mode & 0o077:
        log.warning("database file %s is readable by others and not ours to change; chmod 600 it", db)


SERVED_FILE = "serve.json"
"""In the instance folder while ``switchboard serve`` runs: ``{"url", "pid"}``, the address it
listens on, so CLI commands print links and check health there (see :func:`served_url`)."""


def record_served(settings: Settings, url: str) -> Path | None:
    """Write :data:`SERVED_FILE` for this process (``None`` when the folder is not writable)."""
    import json

    path = settings.home / SERVED_FILE
    try:
        path.write_text(json.dumps({"url": url, "pid": os.getpid()}))
    except OSError as exc:
        log.debug("could not record the served address in %s: %s", path, exc)
        return None
    return path


def forget_served(path: Path | None) -> None:
    """Remove the file :func:`record_served` wrote, if it is still this process's."""
    import json

    if path is None:
        return
    try:
        if json.loads(path.read_text()).get("pid") == os.getpid():
            path.unlink()
    except (OSError, ValueError, AttributeError):
        pass


def served_url(settings: Settings) -> str | None:
    """The address a running ``switchboard serve`` of this instance listens on, or ``None``
    (no file, a malformed one, or its process has ended).

    Before, CLI commands built every link from ``SWITCHBOARD_HOST``/``SWITCHBOARD_PORT``: with
    ``serve --port 18777`` a login link pointed at 8080 and ``doctor`` said the hub was down
    (a new-user run).
    """
    import json

    try:
        record = json.loads((settings.home / SERVED_FILE).read_text())
        url, pid = str(record["url"]), int(record["pid"])
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
    if pid <= 0:
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:
        pass  # alive, as another user
    return url if url.startswith(("http://", "https://")) else None
