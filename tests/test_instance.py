"""The instance folder is private: folder 0700, database files 0600, WAL files included (issue 13 item 5)."""

from __future__ import annotations

import os
import stat
import time
from pathlib import Path

from switchboard import admin
from switchboard.config import Settings
from switchboard.db import upgrade
from switchboard.hub import Hub


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_a_new_instance_is_private_under_a_permissive_umask(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        settings = Settings(home=tmp_path / "instance")
        upgrade(settings)
        hub = Hub(settings, role="cli")
        try:
            with hub.db.write() as s:  # a write creates -wal and -shm (WAL mode)
                admin.add_human(s, "alice")
            home = settings.home
            db = home / "switchboard.db"
            assert _mode(home) == 0o700
            assert (Path(str(db) + "-wal")).exists() and (Path(str(db) + "-shm")).exists()
            for suffix in ("", "-wal", "-shm"):
                assert _mode(Path(str(db) + suffix)) == 0o600, suffix
            assert _mode(home / "vault.keys") == 0o600
        finally:
            hub.close()
    finally:
        os.umask(old)


def test_an_existing_open_instance_is_tightened_at_start(tmp_path: Path) -> None:
    settings = Settings(home=tmp_path / "instance")
    upgrade(settings)
    db = settings.home / "switchboard.db"
    os.chmod(settings.home, 0o755)
    os.chmod(db, 0o644)
    upgrade(settings)
    assert _mode(settings.home) == 0o700 and _mode(db) == 0o600


def test_a_served_address_is_followed_only_as_serve_writes_it(tmp_path: Path) -> None:
    # A review: a planted serve.json sent `login` links to another host.
    import json
    import subprocess

    from switchboard.instance import SERVED_FILE, forget_served, record_served, served_url

    settings = Settings(home=tmp_path)
    path = tmp_path / SERVED_FILE
    recorded = record_served(settings, "http://127.0.0.1:18777")
    assert served_url(settings) == "http://127.0.0.1:18777"
    for url in ("http://attacker.example", "https://127.0.0.1:18777", "http://127.0.0.1:18777/x",
                "http://u:p@127.0.0.1:1", "http://127.0.0.1"):
        path.write_text(json.dumps({"url": url, "pid": os.getpid()}))
        assert served_url(settings) is None, url
    path.write_text(json.dumps({"url": "http://127.0.0.1:18777", "pid": os.getpid()}))
    path.chmod(0o666)
    assert served_url(settings) is None  # writable by others
    path.chmod(0o600)
    assert served_url(settings) == "http://127.0.0.1:18777"
    # Two serve on one home: the second's exit puts the first's record back while it runs.
    other = subprocess.Popen(["sleep", "30"])
    try:
        path.write_text(json.dumps({"url": "http://127.0.0.1:18001", "pid": other.pid}))
        second = record_served(settings, "http://127.0.0.1:18002")
        assert served_url(settings) == "http://127.0.0.1:18002"
        forget_served(second)
        assert served_url(settings) == "http://127.0.0.1:18001"
    finally:
        other.kill()
        other.wait()
    assert served_url(settings) is None  # its process ended
    forget_served(recorded)  # not this process's record any more: left alone


def test_a_serve_killed_and_not_yet_reaped_is_not_followed(tmp_path: Path) -> None:
    # A new-user run: `kill -9` of a serve started with `&` left a zombie (its shell had not
    # reaped it); a zombie answers kill(pid, 0), and CLI links went on naming its dead port.
    import json
    import signal
    import subprocess

    from switchboard.instance import SERVED_FILE, served_url

    settings = Settings(home=tmp_path)
    other = subprocess.Popen(["sleep", "30"])
    try:
        (tmp_path / SERVED_FILE).write_text(json.dumps({"url": "http://127.0.0.1:18001", "pid": other.pid}))
        (tmp_path / SERVED_FILE).chmod(0o600)
        assert served_url(settings) == "http://127.0.0.1:18001"
        os.kill(other.pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while b") Z" not in Path(f"/proc/{other.pid}/stat").read_bytes():  # killed, not reaped
            assert time.monotonic() < deadline
            time.sleep(0.02)
        assert served_url(settings) is None
    finally:
        other.kill()
        other.wait()
