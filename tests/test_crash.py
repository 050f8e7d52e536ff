"""Crash: ``kill -9`` of ``serve`` in the middle of a burst, then restart (DESIGN.md §2):
every delivery that got a 2xx is present and becomes exactly one todo; nothing half-processed."""

from __future__ import annotations

import json
import signal
import sqlite3
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx2

from tests.conftest import (
    CASES,
    cli_env,
    cli_github_world,
    free_port,
    github_headers,
    start_serve,
    stop,
    wait_for,
)

BURST = 400


def test_kill_9_mid_burst_loses_nothing_acknowledged(tmp_path: Path) -> None:
    home = tmp_path / "instance"
    env = cli_env(home)
    port = free_port()
    source = cli_github_world(env, public_url=f"http://127.0.0.1:{port}")
    base = json.loads((CASES / "github" / "issues.opened.json").read_bytes())
    bodies = []
    for i in range(BURST):
        base["issue"]["number"] = i + 1
        bodies.append(json.dumps(base).encode())

    server = start_serve(env, port, tmp_path / "serve1.log")
    acked: list[str] = []
    lock = threading.Lock()
    killed = threading.Event()

    def post(i: int) -> None:
        if killed.is_set():
            return
        try:
            resp = httpx2.post(source["url"], content=bodies[i], timeout=10,
                               headers=github_headers(bodies[i], source["secret"], delivery=f"burst-{i}"))
        except httpx2.HTTPError:
            return  # no answer: not acknowledged
        if resp.status_code in (200, 202):
            with lock:
                acked.append(resp.json()["delivery_id"])
                if len(acked) == BURST // 2:
                    server.proc.send_signal(signal.SIGKILL)
                    killed.set()

    with ThreadPoolExecutor(max_workers=16) as pool:
        list(pool.map(post, range(BURST)))
    server.proc.wait(timeout=10)
    assert server.proc.returncode == -signal.SIGKILL
    assert len(acked) >= BURST // 2

    db = home / "switchboard.db"
    restarted = start_serve(env, port, tmp_path / "serve2.log")
    try:
        def settled() -> bool:
            with sqlite3.connect(db) as conn:
                return conn.execute("select count(*) from deliveries where status = 'received'").fetchone()[0] == 0
        wait_for(settled, timeout=60, interval=0.2)
        with sqlite3.connect(db) as conn:
            rows = dict(conn.execute("select id, status from deliveries").fetchall())
            todo_by_delivery = conn.execute(
                "select delivery_id, count(*) from todos group by delivery_id").fetchall()
            linked = dict(conn.execute("select id, todo_id from deliveries").fetchall())
        assert set(acked) <= set(rows), "every acknowledged delivery is stored"
        assert set(rows.values()) == {"processed"}, "nothing is left half-processed"
        counts = dict(todo_by_delivery)
        assert set(counts) == set(rows) and set(counts.values()) == {1}, "exactly one todo per delivery"
        assert all(linked[d] for d in rows)
    finally:
        stop(restarted.proc)
