"""The receiver's source cache (issue 11) never outlives a change or a secret's expiry."""

from __future__ import annotations

import subprocess
import sys
import uuid
from datetime import timedelta

import sqlalchemy as sa

from switchboard import admin
from switchboard.hub import Hub
from tests.conftest import LiveApp, github_headers, wait_for


def _body() -> bytes:
    return (b'{"action": "opened", "issue": {"number": 7, "title": "Cache %s"}, '
            b'"repository": {"full_name": "acme/api"}, "sender": {"id": 21031067, "login": "Codertocat"}}'
            % uuid.uuid4().hex.encode())


def _post(live: LiveApp, secret: str) -> int:
    body = _body()
    return live.post_hook(body, github_headers(body, secret)).status_code


def test_a_source_disabled_by_raw_sql_in_another_process_is_refused_at_once(live: LiveApp) -> None:
    assert _post(live, live.world.secret) == 202  # the source is cached now
    path = sa.engine.make_url(live.world.settings.database_url).database
    script = ("import sqlite3, sys; c = sqlite3.connect(sys.argv[1]); "
              "c.execute('UPDATE sources SET enabled = 0 WHERE id = ?', (sys.argv[2],)); c.commit()")
    subprocess.run([sys.executable, "-c", script, str(path), live.world.source_id], check=True, timeout=30)
    assert _post(live, live.world.secret) == 404


def test_a_cached_secret_is_refused_once_it_expires(live: LiveApp) -> None:
    hub = Hub(live.world.settings, role="cli")
    try:
        with hub.db.write() as s:
            _, new = admin.rotate_secret(s, live.world.source_id, hub.clock.now(), timedelta(seconds=1.5))
    finally:
        hub.close()
    assert _post(live, new) == 202
    assert _post(live, live.world.secret) == 202  # still valid, and now cached
    wait_for(lambda: _post(live, live.world.secret) == 401, timeout=10, interval=0.1)
    assert _post(live, new) == 202
