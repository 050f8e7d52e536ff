"""``/api/v1/health``, ``/api/v1/ready`` and the request id (issue 14)."""

from __future__ import annotations

import shutil
import sqlite3
import subprocess
from pathlib import Path

import httpx2

from switchboard.config import Settings
from switchboard.schema import head_revision
from tests.conftest import LiveApp, configure, free_port, serve_in_thread
from tests.services import _wait_for_redis


def test_health_answers_and_ready_checks_database_and_migrations(live: LiveApp) -> None:
    health = httpx2.get(f"{live.url}/api/v1/health", timeout=10)
    assert health.status_code == 200 and health.json()["status"] == "ok"
    assert health.json() == {"status": "ok", "database": "sqlite", "jobs": "inline"}
    head = httpx2.head(f"{live.url}/api/v1/health", timeout=10)
    assert head.status_code == 200 and head.content == b""
    ready = httpx2.get(f"{live.url}/api/v1/ready", timeout=10)
    assert ready.status_code == 200
    assert ready.json() == {"status": "ready", "checks": {"database": "ok", "migrations": "ok",
                                                          "redis": "not configured",
                                                          "processing": "not configured",
                                                          "delivery_writer": "not configured"}}


def test_ready_is_503_when_the_schema_is_behind(live: LiveApp) -> None:
    db = Path(live.hub.settings.database_url.split("///", 1)[1])
    with sqlite3.connect(db) as conn:
        conn.execute("update alembic_version set version_num = '0005'")
    resp = httpx2.get(f"{live.url}/api/v1/ready", timeout=10)
    assert resp.status_code == 503
    assert resp.headers["content-type"] == "application/problem+json"
    body = resp.json()
    assert body["code"] == "not_ready" and body["checks"]["database"] == "ok"
    assert body["checks"]["migrations"] == f"at 0005, head is {head_revision()}"
    assert httpx2.get(f"{live.url}/api/v1/health", timeout=10).status_code == 200  # alive all the same


def test_ready_is_503_when_configured_redis_goes_away(tmp_path: Path, redis_url: str) -> None:
    del redis_url  # needs redis-server like the session's (skips or fails the same way without it)
    port = free_port()
    proc = subprocess.Popen([shutil.which("redis-server") or "redis-server", "--save", "", "--appendonly", "no",
                             "--port", str(port), "--bind", "127.0.0.1", "--dir", str(tmp_path)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        assert _wait_for_redis(proc, port)
        own = f"redis://127.0.0.1:{port}/0"
        settings = Settings(home=tmp_path / "instance", redis_url=own)
        configure(settings)
        for url, _hub in serve_in_thread(settings):
            assert httpx2.get(f"{url}/api/v1/ready", timeout=30).json()["checks"]["redis"] == "ok"
            proc.terminate()
            proc.wait(timeout=10)
            resp = httpx2.get(f"{url}/api/v1/ready", timeout=30)
            assert resp.status_code == 503
            body = resp.json()
            assert body["checks"]["redis"].startswith("unreachable") and body["checks"]["database"] == "ok"
            assert own not in resp.text
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_every_response_carries_a_request_id_and_keeps_a_sane_given_one(live: LiveApp) -> None:
    mine = httpx2.get(f"{live.url}/api/v1/health", headers={"X-Request-ID": "lb-1234.abc"}, timeout=10)
    assert mine.headers["x-request-id"] == "lb-1234.abc"
    made = httpx2.get(f"{live.url}/api/v1/health", headers={"X-Request-ID": "<script>" * 3}, timeout=10)
    assert made.headers["x-request-id"].startswith("req_") and len(made.headers["x-request-id"]) == 20
    hook = httpx2.post(f"{live.url}/hooks/{live.world.source_id}", content=b"{}", timeout=10)
    assert hook.status_code == 401 and hook.headers["x-request-id"].startswith("req_")


def test_the_root_sends_a_browser_to_the_web_ui_and_gives_clients_a_map(live: LiveApp) -> None:
    # Found by a new user: opening the hub in a browser showed JSON with no way to the UI.
    browser = httpx2.get(f"{live.url}/", timeout=10, headers={
        "Accept": "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"})
    assert browser.status_code == 302 and browser.headers["location"] == "/ui/"
    client = httpx2.get(f"{live.url}/", timeout=10)
    assert client.status_code == 200 and client.json()["ui"] == "/ui/"


def test_health_answers_other_methods_as_before_it_left_flask(live: LiveApp) -> None:
    # Issue 11 moved /api/v1/health onto the event loop; a review found POST answered 404 there
    # (it fell through to the Flask mount). Other methods are 405 problems, as on /ready.
    for method in ("POST", "PUT", "PATCH", "DELETE"):
        resp = httpx2.request(method, f"{live.url}/api/v1/health", timeout=10)
        assert resp.status_code == 405, method
        assert resp.json()["code"] == "method_not_allowed" and "GET" in resp.headers["allow"]
        assert httpx2.request(method, f"{live.url}/api/v1/ready", timeout=10).status_code == 405
    options = httpx2.request("OPTIONS", f"{live.url}/api/v1/health", timeout=10)
    assert options.status_code == 200 and "GET" in options.headers["allow"]
