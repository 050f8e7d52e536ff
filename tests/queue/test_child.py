"""Embedded mode's processing process (issue 11, ``SWITCHBOARD_PROCESSING=process``): a real
``serve`` app over real HTTP with a real child process; nothing acknowledged is lost when the
child is killed, and what it publishes (metrics, feed bell) reaches the serving process."""

from __future__ import annotations

import json
import os
import signal
import sqlite3

import httpx2
import pytest

from switchboard import metrics
from switchboard.config import Settings
from switchboard.errors import ConfigError
from switchboard.queue.child import ProcessDispatcher
from switchboard.queue.dispatcher import InlineDispatcher
from tests.conftest import CASES, World, github_headers, serve_in_thread, wait_for


def _bodies(n: int, first: int = 0) -> list[bytes]:
    base = json.loads((CASES / "github" / "issues.opened.json").read_bytes())
    out = []
    for i in range(first, first + n):
        base["issue"]["number"] = i + 1
        out.append(json.dumps(base).encode())
    return out


def _states(world: World) -> dict[str, int]:
    conn = sqlite3.connect(world.settings.home / "switchboard.db")
    try:
        return dict(conn.execute("SELECT status, count(*) FROM deliveries GROUP BY status").fetchall())
    finally:
        conn.close()


def _todos(world: World) -> int:
    conn = sqlite3.connect(world.settings.home / "switchboard.db")
    try:
        return int(conn.execute("SELECT count(*) FROM todos").fetchone()[0])
    finally:
        conn.close()


def _post_all(url: str, world: World, bodies: list[bytes], tag: str) -> None:
    for i, body in enumerate(bodies):
        resp = httpx2.post(f"{url}/hooks/{world.source_id}", content=body, timeout=30,
                           headers=github_headers(body, world.secret, delivery=f"{tag}-{i}"))
        assert resp.status_code == 202, resp.text


def test_settings_from_the_environment_choose_the_process() -> None:
    assert Settings.from_env({}).processing == "process"
    assert Settings.from_env({"SWITCHBOARD_PROCESSING": "thread"}).processing == "thread"
    assert Settings().processing == "thread"  # built in code (tests, embedding): the thread
    with pytest.raises(ValueError, match="processing must be one of process, thread"):
        Settings(processing="fork")
    with pytest.raises(ConfigError) as refused:
        Settings.from_env({"SWITCHBOARD_PROCESSING": "fork"})
    assert "SWITCHBOARD_PROCESSING must be one of process, thread" in str(refused.value)


def test_deliveries_are_processed_in_a_child_process(world: World) -> None:
    processed_before = metrics.PROCESSING_SECONDS._sum.get()
    settings = world.settings.with_overrides(processing="process")
    for url, hub in serve_in_thread(settings):
        dispatcher = hub.dispatcher
        assert isinstance(dispatcher, ProcessDispatcher)
        assert dispatcher.pid is not None and dispatcher.pid != os.getpid()
        rings: list[int] = []
        real_ring = dispatcher._ring_bell
        dispatcher._ring_bell = lambda: (rings.append(1), real_ring())  # type: ignore[method-assign]
        _post_all(url, world, _bodies(20), "child")
        wait_for(lambda: _states(world) == {"processed": 20}, timeout=20)
        assert _todos(world) == 20
        # The child's metrics and feed bell arrive in this process.
        wait_for(lambda: metrics.PROCESSING_SECONDS._sum.get() > processed_before, timeout=5)
        wait_for(lambda: rings, timeout=5)


def test_a_killed_child_is_replaced_and_loses_nothing(world: World) -> None:
    settings = world.settings.with_overrides(processing="process")
    for url, hub in serve_in_thread(settings):
        dispatcher = hub.dispatcher
        assert isinstance(dispatcher, ProcessDispatcher)
        first = dispatcher.pid
        assert first is not None
        assert httpx2.get(f"{url}/api/v1/ready", timeout=10).json()["checks"]["processing"] == "ok"
        assert httpx2.get(f"{url}/api/v1/health", timeout=10).json()["jobs"] == "process"
        os.kill(first, signal.SIGKILL)
        wait_for(lambda: not dispatcher.healthy(), timeout=5)
        down = httpx2.get(f"{url}/api/v1/ready", timeout=10)
        assert down.status_code == 503 and down.json()["checks"]["processing"].startswith("down")
        # Acknowledged while no child runs: stored, then processed by the next child.
        _post_all(url, world, _bodies(30), "orphan")
        wait_for(lambda: dispatcher.restarts == 1 and dispatcher.pid != first, timeout=20)
        wait_for(lambda: _states(world) == {"processed": 30}, timeout=30)
        assert _todos(world) == 30
        assert httpx2.get(f"{url}/api/v1/ready", timeout=10).status_code == 200


def test_close_finishes_what_was_queued(world: World) -> None:
    settings = world.settings.with_overrides(processing="process")
    for url, hub in serve_in_thread(settings):
        assert isinstance(hub.dispatcher, ProcessDispatcher)
        _post_all(url, world, _bodies(40), "closing")
        child = hub.dispatcher.pid
    # serve stopped (hub.close): the child processed what it was sent, then exited.
    assert _states(world) == {"processed": 40}
    assert child is not None
    with pytest.raises(ProcessLookupError):
        os.kill(child, 0)


def test_an_injected_clock_keeps_the_thread(world: World) -> None:
    from switchboard.clock import FixedClock, utcnow
    from switchboard.hub import Hub

    hub = Hub(world.settings.with_overrides(processing="process"), clock=FixedClock(utcnow()), role="serve")
    try:
        assert isinstance(hub.dispatcher, InlineDispatcher)
    finally:
        hub.close()
