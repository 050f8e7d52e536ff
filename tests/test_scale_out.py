"""Scale-out on PostgreSQL + Redis (DESIGN.md §3): two ``serve`` processes and two ``worker``
processes; 2,000 distinct signed deliveries (and 200 repeats) posted concurrently across both
servers make exactly 2,000 todos, and a channel stream attached to one server is woken for
todos made by either worker."""

from __future__ import annotations

import json
import queue
import subprocess
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx2
import pytest
import redis
import sqlalchemy as sa
from httpx2._sse import EventSource

from tests.conftest import (
    CASES,
    cli,
    cli_env,
    cli_github_world,
    free_port,
    github_headers,
    start_serve,
    stop,
    switchboard_exe,
    wait_for,
)
from tests.services import fresh_postgres_database

DISTINCT = 2000
REPEATS = 200


def _listen(url: str, token: str, wakes: "queue.Queue[str]", ready: threading.Event, stop_at: threading.Event) -> None:
    try:
        with httpx2.stream("GET", f"{url}/api/v1/agent/stream", headers={"Authorization": f"Bearer {token}"},
                           timeout=httpx2.Timeout(5.0, read=60.0)) as resp:
            ready.set()
            for event in EventSource(resp):
                if event.event == "wake":
                    wakes.put(json.loads(event.data)["meta"]["todo_id"])
                if stop_at.is_set():
                    return
    except httpx2.RemoteProtocolError:
        if not stop_at.is_set():  # the servers stopping at the end of the test ends the stream
            raise


@pytest.mark.timeout(1500)
def test_two_servers_two_workers_exactly_once_and_wakes_cross_processes(postgres_url: str, redis_url: str,
                                                                       tmp_path: Path) -> None:
    redis.Redis.from_url(redis_url).flushdb()
    database_url = fresh_postgres_database(postgres_url)
    env = cli_env(tmp_path / "instance", SWITCHBOARD_DATABASE_URL=database_url, SWITCHBOARD_REDIS_URL=redis_url)
    source = cli_github_world(env, owner=None)
    cli(env, "agent", "add", "claude1", "--human", "alice")
    cli(env, "grant", "claude1", "acme", "--role", "work")
    token = cli(env, "token", "vend", "claude1")["token"]

    servers = [start_serve(env, free_port(), tmp_path / f"serve{i}.log") for i in range(2)]
    workers = [subprocess.Popen([switchboard_exe(), "worker"], env=env, stdout=subprocess.DEVNULL,
                                stderr=open(tmp_path / f"worker{i}.log", "wb")) for i in range(2)]
    stop_listening = threading.Event()
    try:
        wakes: queue.Queue[str] = queue.Queue()
        ready = threading.Event()
        threading.Thread(target=_listen, args=(servers[0].url, token, wakes, ready, stop_listening),
                         daemon=True).start()
        assert ready.wait(10)

        base = json.loads((CASES / "github" / "issues.opened.json").read_bytes())
        plan = []
        for i in range(DISTINCT):
            base["issue"]["number"] = i + 1
            plan.append((i, json.dumps(base).encode()))
        plan += plan[:REPEATS]
        statuses: list[int] = []
        lock = threading.Lock()

        http = httpx2.Client(timeout=60, limits=httpx2.Limits(max_connections=32))

        def post(item: tuple[int, bytes]) -> None:
            i, body = item
            server = servers[i % 2] if len(statuses) % 3 else servers[(i + 1) % 2]
            url = f"{server.url}/hooks/{source['id']}"
            resp = http.post(url, content=body, headers=github_headers(body, source["secret"], delivery=f"scale-{i}"))
            with lock:
                statuses.append(resp.status_code)

        with ThreadPoolExecutor(max_workers=16) as pool:
            list(pool.map(post, plan))
        http.close()
        assert len(statuses) == DISTINCT + REPEATS and set(statuses) <= {200, 202}
        assert statuses.count(202) == DISTINCT

        engine = sa.create_engine(database_url)
        try:
            def all_processed() -> bool:
                with engine.connect() as conn:
                    return conn.execute(sa.text(
                        "select count(*) from deliveries where status = 'processed'")).scalar_one() == DISTINCT
            wait_for(all_processed, timeout=240, interval=0.5)
            with engine.connect() as conn:
                todos = conn.execute(sa.text("select count(*), count(distinct delivery_id) from todos")).one()
                todo_ids = set(conn.execute(sa.text("select id from todos")).scalars())
        finally:
            engine.dispose()
        assert tuple(todos) == (DISTINCT, DISTINCT)

        seen: set[str] = set()

        def woken() -> bool:
            while not wakes.empty():
                seen.add(wakes.get())
            return seen >= todo_ids

        wait_for(woken, timeout=60, interval=0.2)
        # Both workers did part of the work, so wakes crossed from both worker processes.
        from rq import Worker

        conn = redis.Redis.from_url(redis_url)
        counts = [w.successful_job_count for w in Worker.all(connection=conn)]
        assert len(counts) == 2 and all(c > 0 for c in counts), counts
    finally:
        stop_listening.set()
        for w in workers:
            stop(w)
        for s in servers:
            stop(s.proc)
