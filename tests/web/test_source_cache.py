"""The receiver's source cache (issue 11) never outlives a change or a secret's expiry."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import uuid
from datetime import timedelta

import sqlalchemy as sa

from switchboard import admin
from switchboard.hub import Hub
from switchboard.models.stamps import read_stamp
from switchboard.web.ingest import SourceCache
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
    _disable_in_another_process(live)
    assert _post(live, live.world.secret) == 404


def _disable_in_another_process(live: LiveApp) -> None:
    path = sa.engine.make_url(live.world.settings.database_url).database
    script = ("import sqlite3, sys; c = sqlite3.connect(sys.argv[1]); "
              "c.execute('UPDATE sources SET enabled = 0 WHERE id = ?', (sys.argv[2],)); c.commit()")
    subprocess.run([sys.executable, "-c", script, str(path), live.world.source_id], check=True, timeout=30)


def test_a_source_disabled_while_cached_is_refused_before_its_body_on_a_quiet_instance(live: LiveApp) -> None:
    # A review: with no delivery stored after the disable, the writer never saw the stamp move,
    # and the request guard kept reading bodies sent to the disabled source (the writer refused
    # them: nothing accepted, but the entry lived on). The maintenance pass now checks the stamp.
    assert _post(live, live.world.secret) == 202  # the source is cached now
    assert live.hub.source_cache.peek(live.world.source_id, live.hub.clock.now()) is not None
    _disable_in_another_process(live)
    wait_for(lambda: live.hub.source_cache.peek(live.world.source_id, live.hub.clock.now()) is None,
             timeout=15, interval=0.1)
    host, port = live.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        # A body announced and never sent: answered 404 at once, not after the body timeout.
        sock.sendall(f"POST /hooks/{live.world.source_id} HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n"
                     .encode())
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = sock.recv(4096)
            assert chunk, "closed without an answer"
            head += chunk
    assert head.startswith(b"HTTP/1.1 404") and b"no such source" in head


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


def test_a_secret_that_expires_while_the_body_arrives_does_not_verify_it(live: LiveApp) -> None:
    # A review of a change that reused the guard's look-up (made before the body) in the receiver:
    # a delivery signed with a secret that expired mid-upload was answered 202. Expiry moves no
    # stamp, so neither the writer's STALE nor a failed verification would have caught it.
    hub = Hub(live.world.settings, role="cli")
    try:
        with hub.db.write() as s:
            admin.rotate_secret(s, live.world.source_id, hub.clock.now(), timedelta(seconds=2))
    finally:
        hub.close()
    assert _post(live, live.world.secret) == 202  # still valid, and cached with both secrets
    body = _body()
    head = f"POST /hooks/{live.world.source_id} HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n"
    head += "".join(f"{k}: {v}\r\n" for k, v in github_headers(body, live.world.secret).items()) + "\r\n"
    host, port = live.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(head.encode() + body[:10])
        time.sleep(3)  # the old secret expires while the rest of the body is on its way
        sock.sendall(body[10:])
        answer = b""
        while b"\r\n\r\n" not in answer:
            chunk = sock.recv(65536)
            assert chunk, "closed without an answer"
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 401"), answer[:200]


def test_an_entry_read_under_an_older_stamp_is_never_kept(live: LiveApp) -> None:
    # A review: loads run in worker threads; a load that read before a change could land its
    # entry in the dict a newer load had just started, and the maintenance check (stamp equal to
    # the cache's) never dropped it. The two halves of that interleaving, made deterministic:
    cache = SourceCache(live.hub)
    now = live.hub.clock.now()
    entry = cache.load(live.world.source_id)
    assert entry is not None and cache.peek(live.world.source_id, now) is entry
    # (1) a load whose stamp is older than the cache's returns its entry but does not cache it
    cache._stamp = entry.stamp + 1_000_000  # a newer load already ran
    cache._entries = {}
    again = cache.load(live.world.source_id)
    assert again is not None and cache.peek(live.world.source_id, now) is None
    # (2) an old entry in a dict whose stamp is current is dropped by the maintenance check
    _disable_in_another_process(live)
    with live.hub.db.read() as s:
        current = read_stamp(s.connection())
    assert current > entry.stamp
    cache._stamp, cache._entries = current, {live.world.source_id: entry}
    assert cache.check() is True
    assert cache.peek(live.world.source_id, now) is None
    assert cache.check() is False
