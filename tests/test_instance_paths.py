"""An instance folder whose name holds URL characters (``?``, ``#``, ``%``, spaces) is used as named.

The default ledger URL is ``sqlite:///<home>/switchboard.db`` and SQLAlchemy reads a URL's path
up to a ``?`` and percent-decodes it: unquoted, a home ``/srv/a?b`` put the ledger in the file
``/srv/a`` (and ``%41`` in a name opened a folder named ``A``). The read-only and checkpoint
connections open ``file:`` URIs (https://sqlite.org/uri.html), with the same pitfalls.
"""

from __future__ import annotations

import logging
import os
import sqlite3
from pathlib import Path

import pytest
import sqlalchemy as sa

from switchboard.backup import backup
from switchboard.config import Settings, sqlite_uri
from switchboard.db import upgrade
from switchboard.schema import current_revision, head_revision

ODD = "odd dir?x#y%41z&q=1"


def test_the_ledger_url_names_the_file_in_the_home_folder(tmp_path: Path) -> None:
    settings = Settings(home=tmp_path / ODD / "instance")
    expected = tmp_path / ODD / "instance" / "switchboard.db"
    assert settings.sqlite_path == expected
    assert sa.engine.make_url(settings.database_url).database == str(expected)
    assert Settings(home=tmp_path, database_url="sqlite://").sqlite_path is None


def test_init_backup_and_revision_use_the_folder_as_named(tmp_path: Path) -> None:
    settings = Settings(home=tmp_path / ODD / "instance")
    upgrade(settings)
    ledger = tmp_path / ODD / "instance" / "switchboard.db"
    assert ledger.is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == [ODD]  # nothing made beside it
    assert current_revision(settings) == head_revision()
    copy = tmp_path / ODD / "copy.db"
    assert backup(settings, copy)["path"] == str(copy)
    with sqlite3.connect(copy) as conn:
        assert conn.execute("select count(*) from alembic_version").fetchone() == (1,)


def test_sqlite_uri_keeps_url_characters_in_the_file_name(tmp_path: Path) -> None:
    path = tmp_path / ODD
    path.mkdir()
    with sqlite3.connect(path / "f.db") as conn:
        conn.execute("create table t (x)")
    with sqlite3.connect(sqlite_uri(path / "f.db", "ro"), uri=True) as conn:
        assert conn.execute("select name from sqlite_master").fetchall() == [("t",)]


def test_a_folder_name_that_is_not_utf8_is_opened_as_named(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    # A name with byte 0xff (a surrogate escape in Python): quote() of the str raised.
    # (The log lines name the folder; a captured lone surrogate cannot cross to pytest-xdist.)
    caplog.set_level(logging.CRITICAL)
    folder = Path(os.fsdecode(bytes(tmp_path) + b"/bad\xffname"))
    settings = Settings(home=folder)
    upgrade(settings)
    assert current_revision(settings) == head_revision()
    copy = folder / "copy.db"
    backup(settings, copy)
    assert copy.is_file()


def test_a_sqlite_file_uri_url_is_refused_with_the_form_to_use() -> None:
    from switchboard.errors import ConfigError

    with pytest.raises(ConfigError) as refused:
        Settings.from_env({"SWITCHBOARD_DATABASE_URL": "sqlite:///file:/srv/x.db?uri=true"})
    assert "give SQLite a file path (sqlite:////abs/path.db), not a file: URI" in refused.value.message
