"""The instance folder is private: folder 0700, database files 0600, WAL files included (issue 13 item 5)."""

from __future__ import annotations

import os
import stat
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
