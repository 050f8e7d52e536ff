"""Scaled mode on real services: PostgreSQL ledger, rq job on Redis, wake across processes by pub/sub."""

from __future__ import annotations

import json
import queue
import subprocess
import threading
from pathlib import Path

import httpx2
import redis
from httpx2._sse import EventSource
from sqlalchemy import select

from switchboard.config import Settings
from switchboard.models import Delivery, Todo
from tests.conftest import (
    CASES,
    LiveApp,
    cli_env,
    configure,
    github_headers,
    serve_in_thread,
    switchboard_exe,
    wait_for,
)
from tests.services import fresh_postgres_database


def _listen(url: str, token: str, wakes: "queue.Queue[dict]", attached: threading.Event) -> None:
    headers = {"Authorization": f"Bearer {token}"}
    with httpx2.stream("GET", f"{url}/api/v1/agent/stream", headers=headers,
                       timeout=httpx2.Timeout(5.0, read=30.0)) as resp:
        attached.set()
        for event in EventSource(resp):
            if event.event == "wake":
                wakes.put(json.loads(event.data))
                return


def test_delivery_runs_as_rq_job_and_wakes_across_processes(postgres_url: str, redis_url: str,
                                                             tmp_path: Path) -> None:
    redis.Redis.from_url(redis_url).flushdb()
    settings = Settings(home=tmp_path, database_url=fresh_postgres_database(postgres_url), redis_url=redis_url,
                        sweep_interval_seconds=60)
    world = configure(settings)
    for url, hub in serve_in_thread(settings):
        live = LiveApp(url, hub, world)
        wakes: queue.Queue[dict] = queue.Queue()
        attached = threading.Event()
        threading.Thread(target=_listen, args=(url, world.token, wakes, attached), daemon=True).start()
        assert attached.wait(10)
        wait_for(lambda: hub.streams.count(world.agent_id) == 1)

        body = (CASES / "github" / "issues.opened.json").read_bytes()
        resp = live.post_hook(body, github_headers(body, world.secret))
        assert resp.status_code == 202, resp.text
        delivery_id = resp.json()["delivery_id"]
        with hub.db.read() as s:
            assert s.get(Delivery, delivery_id).status == "received"  # waiting for a worker

        env = cli_env(tmp_path, SWITCHBOARD_DATABASE_URL=settings.database_url, SWITCHBOARD_REDIS_URL=redis_url)
        worker = subprocess.run([switchboard_exe(), "worker", "--burst"], env=env, capture_output=True,
                                text=True, timeout=120)
        assert worker.returncode == 0, worker.stderr

        with hub.db.read() as s:
            delivery = s.get(Delivery, delivery_id)
            assert delivery.status == "processed"
            todos = s.execute(select(Todo)).scalars().all()
        assert [t.id for t in todos] == [delivery.todo_id]
        wake = wakes.get(timeout=10)
        assert wake["meta"]["todo_id"] == delivery.todo_id
        assert wake["content"].startswith(f"switchboard: todo {delivery.todo_id} on reviews: Issue #1 opened")


def test_worker_without_redis_url_explains_itself(tmp_path: Path) -> None:
    proc = subprocess.run([switchboard_exe(), "worker", "--burst"], env=cli_env(tmp_path), capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 2 and "SWITCHBOARD_REDIS_URL" in proc.stderr
