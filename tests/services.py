"""Real PostgreSQL and Redis servers for the test suite.

Each fixture prefers a server the caller already runs (its URL in
``SWITCHBOARD_TEST_DATABASE_URL`` or ``SWITCHBOARD_TEST_REDIS_URL``), and
otherwise starts a throwaway one from the binaries on this machine, on a free
loopback port, for the whole session. When a binary is missing the dependent
tests skip with the reason, unless ``SWITCHBOARD_REQUIRE_SERVICES=1`` (CI),
where they fail instead (``CONVENTIONS.md``, Tests).

Register the fixtures with ``pytest_plugins = ["tests.services"]`` in
``tests/conftest.py``.
"""

from __future__ import annotations

import glob
import os
from contextlib import contextmanager
import pwd
import shlex
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import NoReturn
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest
import redis
from psycopg import sql

DATABASE_URL_ENV = "SWITCHBOARD_TEST_DATABASE_URL"
REDIS_URL_ENV = "SWITCHBOARD_TEST_REDIS_URL"
REQUIRE_ENV = "SWITCHBOARD_REQUIRE_SERVICES"

#: PostgreSQL major versions tried first, in order; any other installed one follows.
PREFERRED_POSTGRES_VERSIONS = ("15",)
#: Seconds to wait for a server to accept connections.
STARTUP_TIMEOUT = 60.0
#: Times a server is started on a fresh port when the chosen one was taken meanwhile.
START_ATTEMPTS = 3


def _unavailable(reason: str) -> NoReturn:
    """Skip the requesting test, or fail it when services are required.

    Args:
        reason: Why the service cannot be provided, shown in the test report.

    Raises:
        pytest.skip.Exception: Normally.
        pytest.fail.Exception: When ``SWITCHBOARD_REQUIRE_SERVICES=1``.
    """
    if os.environ.get(REQUIRE_ENV) == "1":
        pytest.fail(f"{reason} ({REQUIRE_ENV}=1)", pytrace=False)
    pytest.skip(reason)


def _free_port() -> int:
    """Return a TCP port on 127.0.0.1 that was free a moment ago.

    Returns:
        The port number. Another process may take it before the server binds
        it, which is why the starters retry.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _tail(path: Path, lines: int = 30) -> str:
    """Return the last lines of a log file, or a note that it is missing.

    Args:
        path: The log file.
        lines: How many lines to keep.

    Returns:
        The text, for an error message.
    """
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return f"(no log at {path})"


# --- PostgreSQL -------------------------------------------------------------


def _postgres_bindir() -> Path | None:
    """Find a directory holding ``initdb`` and ``pg_ctl``.

    Debian keeps them off ``PATH`` in ``/usr/lib/postgresql/<major>/bin``; the
    preferred major versions come first, then the newest other one, then
    ``PATH``.

    Returns:
        The directory, or None when no PostgreSQL server is installed.
    """
    candidates = [Path(f"/usr/lib/postgresql/{v}/bin") for v in PREFERRED_POSTGRES_VERSIONS]
    others = glob.glob("/usr/lib/postgresql/*/bin")
    others.sort(key=lambda p: int(Path(p).parent.name) if Path(p).parent.name.isdigit() else -1)
    candidates += [Path(p) for p in reversed(others)]
    initdb = shutil.which("initdb")
    if initdb:
        candidates.append(Path(initdb).parent)
    for bindir in candidates:
        if (bindir / "initdb").is_file() and (bindir / "pg_ctl").is_file():
            return bindir
    return None


def _as_postgres_user(argv: list[str]) -> list[str]:
    """Wrap a command so that it runs as ``postgres`` when we are root.

    PostgreSQL refuses to run as root; as any other user it runs as is.

    Args:
        argv: The command.

    Returns:
        The command to execute.
    """
    if os.geteuid() != 0:
        return argv
    if shutil.which("runuser"):
        return ["runuser", "-u", "postgres", "--", *argv]
    return ["su", "-s", "/bin/sh", "postgres", "-c", shlex.join(argv)]


def _run(argv: list[str], *, cwd: Path, what: str) -> None:
    """Run a setup command, failing with its output if it fails.

    Args:
        argv: The command.
        cwd: Working directory (one the ``postgres`` user can enter).
        what: Short description for the error message.

    Raises:
        RuntimeError: The command exited non-zero.
    """
    result = subprocess.run(
        argv, cwd=cwd, stdin=subprocess.DEVNULL, capture_output=True, text=True, check=False
    )
    if result.returncode != 0:
        raise RuntimeError(
            f"{what} failed (exit {result.returncode}): {shlex.join(argv)}\n{result.stdout}{result.stderr}"
        )


def _start_postgres(bindir: Path, root: Path) -> int:
    """Initialise a cluster under ``root/data`` and start it on a free port.

    Args:
        bindir: Directory holding ``initdb`` and ``pg_ctl``.
        root: Empty directory owned by the server's user; also its socket dir.

    Returns:
        The TCP port the server listens on at 127.0.0.1.

    Raises:
        RuntimeError: ``initdb`` failed, or the server would not start.
    """
    data = root / "data"
    _run(
        _as_postgres_user(
            [
                str(bindir / "initdb"),
                "-D",
                str(data),
                "-U",
                "postgres",
                "--auth=trust",
                "-E",
                "UTF8",
                "--no-locale",
                "--no-sync",
            ]
        ),
        cwd=root,
        what="initdb",
    )
    log = root / "postgres.log"
    last_error = ""
    for _ in range(START_ATTEMPTS):
        port = _free_port()
        options = (
            f"-p {port} -k {root} -c listen_addresses=127.0.0.1 "
            "-c fsync=off -c synchronous_commit=off -c full_page_writes=off"
        )
        # -l sends the postmaster's output to a file, so no pipe of ours stays open.
        argv = _as_postgres_user(
            [
                str(bindir / "pg_ctl"),
                "-D",
                str(data),
                "-l",
                str(log),
                "-o",
                options,
                "-w",
                "-t",
                str(int(STARTUP_TIMEOUT)),
                "start",
            ]
        )
        try:
            _run(argv, cwd=root, what="pg_ctl start")
            return port
        except RuntimeError as error:
            last_error = f"{error}\n{_tail(log)}"
    raise RuntimeError(last_error)


def _stop_postgres(bindir: Path, root: Path) -> None:
    """Stop the cluster under ``root/data`` if it is running.

    Args:
        bindir: Directory holding ``pg_ctl``.
        root: The directory given to :func:`_start_postgres`.
    """
    subprocess.run(
        _as_postgres_user([str(bindir / "pg_ctl"), "-D", str(root / "data"), "-m", "fast", "-w", "stop"]),
        cwd=root,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        check=False,
    )


def _libpq_url(url: str) -> str:
    """Turn a SQLAlchemy ``postgresql+driver://`` URL into a libpq URI.

    Args:
        url: e.g. ``postgresql+psycopg://postgres@127.0.0.1:5432/db``.

    Returns:
        The same URL with the scheme ``postgresql``.
    """
    parts = urlsplit(url)
    return urlunsplit(parts._replace(scheme="postgresql"))


def fresh_postgres_database(postgres_url: str) -> str:
    """Create a new, uniquely named database on the server of ``postgres_url``.

    The connecting role needs ``CREATEDB``. Databases made on the session's
    own server vanish with it; on a server from ``SWITCHBOARD_TEST_DATABASE_URL``
    they stay (all are named ``switchboard_test_<hex>``).

    Args:
        postgres_url: SQLAlchemy URL of any existing database on the server,
            usually the ``postgres_url`` fixture.

    Returns:
        The SQLAlchemy URL of the new, empty database (same driver, user,
        host and query as ``postgres_url``).

    Raises:
        psycopg.Error: The server refused the connection or the CREATE.
    """
    name = f"switchboard_test_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(_libpq_url(postgres_url), autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    return urlunsplit(urlsplit(postgres_url)._replace(path=f"/{name}"))


@contextmanager
def running_postgres() -> Iterator[str]:
    """Start a throwaway PostgreSQL server (see :func:`postgres_url`); yield its URL.

    Raises:
        RuntimeError: the server would not start. Skips/fails (pytest) when binaries are missing.
    """
    if url := os.environ.get(DATABASE_URL_ENV):
        yield url
        return
    bindir = _postgres_bindir()
    if bindir is None:
        _unavailable(
            "PostgreSQL server binaries (initdb, pg_ctl) not found in "
            f"/usr/lib/postgresql/*/bin or on PATH; install postgresql-15 or set {DATABASE_URL_ENV}"
        )
    owner = None
    if os.geteuid() == 0:
        try:
            owner = pwd.getpwnam("postgres")
        except KeyError:
            _unavailable("running as root, and PostgreSQL needs a 'postgres' user to run as; none exists")
    # Under /tmp when root: the default temp dir (e.g. $TMPDIR) may not be traversable by postgres.
    root = Path(tempfile.mkdtemp(prefix="switchboard-pg-", dir="/tmp" if owner else None))
    root.chmod(0o755)
    if owner:
        os.chown(root, owner.pw_uid, owner.pw_gid)
    started = False
    try:
        port = _start_postgres(bindir, root)
        started = True
        with psycopg.connect(
            host="127.0.0.1", port=port, user="postgres", dbname="postgres", autocommit=True
        ) as conn:
            conn.execute("CREATE DATABASE switchboard_test")
        yield f"postgresql+psycopg://postgres@127.0.0.1:{port}/switchboard_test"
    finally:
        if started:
            _stop_postgres(bindir, root)
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """Provide a PostgreSQL server for the session, as a SQLAlchemy URL.

    Uses ``SWITCHBOARD_TEST_DATABASE_URL`` when set. Otherwise initialises a
    cluster in a temporary directory (as the ``postgres`` user when run as
    root), starts it on a free 127.0.0.1 port with trust auth and fsync off,
    creates ``switchboard_test``, and stops and deletes it at teardown.

    Yields:
        ``postgresql+psycopg://postgres@127.0.0.1:<port>/switchboard_test``.
    """
    with running_postgres() as url:
        yield url


# --- Redis ------------------------------------------------------------------


class RestartableRedis:
    """A redis-server of its own on a fixed port: it can be killed, started again, or stopped
    with ``proc.send_signal(signal.SIGSTOP)`` so that it stops answering."""

    def __init__(self, root: Path) -> None:
        server = shutil.which("redis-server")
        if server is None:
            _unavailable("redis-server not found on PATH")
        self.server, self.root, self.port = server, root, _free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        argv = redis_server_argv(self.server, self.port, self.root)
        self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL)
        assert _wait_for_redis(self.proc, self.port), "redis-server did not start"

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait(timeout=10)


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    """Provide a Redis server for the session, as a URL.

    Uses ``SWITCHBOARD_TEST_REDIS_URL`` when set. Otherwise starts
    ``redis-server`` from ``PATH`` on a free 127.0.0.1 port with persistence
    off, waits until it answers PING, and terminates it at teardown.

    Yields:
        ``redis://127.0.0.1:<port>/0``.

    Raises:
        RuntimeError: The server exited or did not answer within
            ``STARTUP_TIMEOUT`` seconds.
    """
    if url := os.environ.get(REDIS_URL_ENV):
        yield url
        return
    server = shutil.which("redis-server")
    if server is None:
        _unavailable(f"redis-server not found on PATH; install redis-server or set {REDIS_URL_ENV}")
    root = Path(tempfile.mkdtemp(prefix="switchboard-redis-"))
    log = root / "redis.log"
    proc: subprocess.Popen[bytes] | None = None
    try:
        last_error = ""
        for _ in range(START_ATTEMPTS):
            port = _free_port()
            with log.open("ab") as out:
                proc = subprocess.Popen(
                    redis_server_argv(server, port, root),
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                )
            if _wait_for_redis(proc, port):
                break
            proc.terminate()
            proc.wait(timeout=10)
            last_error = f"redis-server did not start on port {port}:\n{_tail(log)}"
            proc = None
        else:
            raise RuntimeError(last_error)
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        shutil.rmtree(root, ignore_errors=True)


def redis_server_argv(server: str, port: int, root: Path) -> list[str]:
    """``redis-server`` on 127.0.0.1:``port`` with persistence off and its files in ``root``."""
    return [server, "--save", "", "--appendonly", "no", "--port", str(port), "--bind", "127.0.0.1",
            "--dir", str(root)]


def _wait_for_redis(proc: subprocess.Popen[bytes], port: int) -> bool:
    """Poll a starting Redis until it answers PING.

    Args:
        proc: The server process.
        port: Its port on 127.0.0.1.

    Returns:
        True once PING succeeds; False if the process exited or
        ``STARTUP_TIMEOUT`` seconds passed.
    """
    client = redis.Redis(host="127.0.0.1", port=port, socket_connect_timeout=1, socket_timeout=1)
    deadline = time.monotonic() + STARTUP_TIMEOUT
    try:
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                if client.ping():
                    return True
            except redis.RedisError:
                time.sleep(0.05)
        return False
    finally:
        client.close()
