"""The instance folder's permissions: private to the service's user (issue 13 item 5).

The folder holds the SQLite ledger (deliveries, todos, sealed secrets) and the vault key file.
:func:`secure` makes the folder ``0700`` and the database files ``0600``. SQLite creates
``-wal``, ``-shm`` and ``-journal`` files later with the mode of the database file, so creating
the database file ``0600`` before SQLite first opens it covers them too (its unix VFS,
``robust_open``/``findCreateFileMode``); existing ones are tightened here as well.
"""

from __future__ import annotations

import fcntl
import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager
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
"""In the instance folder while ``switchboard serve`` runs: ``{"url", "pid", "previous"}``, the
address it listens on, so CLI commands print links and check health there (see :func:`served_url`)."""


def record_served(settings: Settings, url: str) -> tuple[Path, dict[str, object] | None] | None:
    """Write :data:`SERVED_FILE` for this process, remembering the record of another ``serve``
    still running on this instance (restored by :func:`forget_served`). ``None`` when the folder
    is not writable."""
    import json

    path = settings.home / SERVED_FILE
    previous = _live_record(settings)
    try:
        path.write_text(json.dumps({"url": url, "pid": os.getpid()}))
        path.chmod(0o600)
    except OSError as exc:
        log.debug("could not record the served address in %s: %s", path, exc)
        return None
    return path, previous


def forget_served(recorded: tuple[Path, dict[str, object] | None] | None) -> None:
    """Remove the record :func:`record_served` wrote, if it is still this process's; put back
    the record of another ``serve`` of this instance that still runs (a review: two ``serve``
    on one home, and the first lost its record when the second stopped)."""
    import json

    if recorded is None:
        return
    path, previous = recorded
    try:
        if json.loads(path.read_text()).get("pid") != os.getpid():
            return
        if previous is not None and _alive(int(previous["pid"])):  # type: ignore[call-overload]
            path.write_text(json.dumps(previous))
        else:
            path.unlink()
    except (OSError, ValueError, AttributeError, KeyError, TypeError):
        pass


def _alive(pid: int) -> bool:
    """Whether ``pid`` is a running process of this user (another user's is not ours)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except OSError:  # ProcessLookupError: gone; PermissionError: another user's process
        return False
    try:
        # A serve killed with SIGKILL stays a zombie until its parent reaps it, and a zombie
        # answers kill(pid, 0): CLI links went on naming its dead port (a new-user run).
        with open(f"/proc/{pid}/stat", "rb") as stat_file:
            return stat_file.read().rpartition(b")")[2].split()[0] != b"Z"
    except (OSError, IndexError):
        return True  # no procfs (not Linux): kill(pid, 0) is all there is


def _live_record(settings: Settings) -> dict[str, object] | None:
    """The record in :data:`SERVED_FILE` if this user wrote it (owner, not writable by others),
    its URL is one ``serve`` writes (plain http to a local or the configured host, no path) and
    its process runs; else ``None``."""
    import json
    import stat
    from urllib.parse import urlsplit

    path = settings.home / SERVED_FILE
    try:
        info = path.stat()
        if info.st_uid != os.getuid() or info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
            return None  # planted by someone else: never follow it (a review: a login link to their host)
        record = json.loads(path.read_text())
        url, pid = str(record["url"]), int(record["pid"])
        parts = urlsplit(url)
        host, port = parts.hostname, parts.port
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
    local = {"127.0.0.1", "::1", "localhost", settings.host.strip("[]")}
    if parts.scheme != "http" or host not in local or port is None or parts.path or parts.query \
            or parts.username or parts.password or not _alive(pid):
        return None
    return {"url": url, "pid": pid}


def served_url(settings: Settings) -> str | None:
    """The address a running ``switchboard serve`` of this instance listens on, or ``None``
    (no file, one this user did not write, a URL ``serve`` would not write, or its process has
    ended).

    Before, CLI commands built every link from ``SWITCHBOARD_HOST``/``SWITCHBOARD_PORT``: with
    ``serve --port 18777`` a login link pointed at 8080 and ``doctor`` said the hub was down
    (a new-user run).
    """
    record = _live_record(settings)
    return None if record is None else str(record["url"])


RUNNING_LOCK = "running.lock"
"""In the instance folder: every ``serve`` and ``worker`` of this instance on this machine holds a
shared ``flock`` on it from its start (before it migrates) to its exit, and ``migrate --to``
takes it exclusively while it moves the schema down (:func:`exclusive_or_none`). The kernel
drops a lock with its process, so a ``serve`` killed with ``kill -9`` leaves none behind. A
break run moved the schema under a running ``serve`` that :func:`served_url` did not see (one
listening on another address than the CLI's ``SWITCHBOARD_HOST``, or still starting)."""

_held: dict[Path, int] = {}  # this process's shared locks by instance folder, kept open until exit


def hold_running_lock(settings: Settings) -> None:
    """Take the shared lock on :data:`RUNNING_LOCK` for the rest of this process (``serve`` and
    ``worker`` at start). Waits while a ``migrate --to`` holds it (seconds); without a writable
    instance folder, does nothing (such a folder has no schema to move either)."""
    home = settings.home.absolute()
    if home in _held:
        return
    try:
        home.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = _open_lock(home)
    except OSError as exc:
        log.debug("no running lock in %s: %s", home, exc)
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_SH)
    except OSError as exc:  # ENOLCK (some network file systems): run without it, as without a folder
        os.close(fd)
        log.warning("could not lock %s (%s): `migrate --to` will not see this process", home / RUNNING_LOCK, exc)
        return
    _held[home] = fd


@contextmanager
def exclusive_or_none(settings: Settings) -> Iterator[bool]:
    """The exclusive lock on :data:`RUNNING_LOCK` for the ``with`` block, never waiting: yields
    ``False`` (holding nothing) when a ``serve`` or ``worker`` of this instance on this machine
    holds it, else ``True`` (no such process can start until the block ends)."""
    try:
        fd = _open_lock(settings.home)
    except OSError:
        yield True  # no writable folder: no serve or worker of this machine holds a lock in it
        return
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        yield True
    finally:
        os.close(fd)  # releases the lock


def _open_lock(home: Path) -> int:
    """A descriptor of ``home``'s :data:`RUNNING_LOCK` (made 0600 if missing, not inherited)."""
    return os.open(home / RUNNING_LOCK, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
