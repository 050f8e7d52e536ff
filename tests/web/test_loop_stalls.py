"""The event loop never waits on the database (issue 11; issue 13 item 11).

Before the grouped writer, one webhook in flight while another process held SQLite's write
lock stalled every other request of ``serve`` (``/api/v1/health`` took 9.7 s): the receiver
waited for the lock on the event loop.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx2
import sqlalchemy as sa

from tests.conftest import World, cli_env, free_port, github_headers, start_serve, stop

HOLD_LOCK = """
import sqlite3, sys
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("BEGIN IMMEDIATE")
print("locked", flush=True)
sys.stdin.readline()
conn.execute("ROLLBACK")
"""


def _body(number: int) -> bytes:
    return (b'{"action": "opened", "issue": {"number": %d, "title": "Stall %d"}, '
            b'"repository": {"full_name": "acme/api"}, "sender": {"id": 21031067, "login": "Codertocat"}}'
            % (number, number))


def test_health_answers_while_another_process_holds_the_sqlite_write_lock_and_a_webhook_waits(
        world: World, tmp_path: Path) -> None:
    env = cli_env(world.settings.home)
    server = start_serve(env, free_port(), tmp_path / "serve.log")
    holder = None
    try:
        hook_url = f"{server.url}/hooks/{world.source_id}"
        warm = _body(1)
        assert httpx2.post(hook_url, content=warm, headers=github_headers(warm, world.secret)).status_code == 202

        path = sa.engine.make_url(world.settings.database_url).database
        holder = subprocess.Popen([sys.executable, "-c", HOLD_LOCK, str(path)], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, text=True)
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"

        answered: dict[str, int] = {}
        body = _body(2)

        def send() -> None:
            answered["status"] = httpx2.post(hook_url, content=body, headers=github_headers(body, world.secret),
                                             timeout=60).status_code

        hook = threading.Thread(target=send, daemon=True)
        hook.start()
        slowest = 0.0
        with httpx2.Client(timeout=5) as client:
            for _ in range(20):
                t0 = time.perf_counter()
                assert client.get(f"{server.url}/api/v1/health").status_code == 200
                slowest = max(slowest, time.perf_counter() - t0)
        assert hook.is_alive(), "the webhook should still be waiting for the write lock"
        # Far from the fault (the write lock's 10 s busy timeout; 9.7 s measured), wide enough
        # for a loaded CI machine (one request of twenty may wait its turn for a core).
        assert slowest < 3.0, f"health took {slowest:.2f} s while a webhook waited for the write lock"

        assert holder.stdin is not None
        holder.stdin.write("\n")
        holder.stdin.flush()
        holder.wait(timeout=10)
        hook.join(timeout=30)
        # Acknowledged only after its commit, once the lock was free.
        assert answered["status"] == 202
    finally:
        if holder is not None and holder.poll() is None:
            holder.kill()
            holder.wait()
        stop(server.proc)
