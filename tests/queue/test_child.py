"""Embedded mode's processing process (issue 11, ``SWITCHBOARD_PROCESSING=process``): a real
``serve`` app over real HTTP with a real child process; nothing acknowledged is lost when the
child is killed, and what it publishes (metrics, feed bell) reaches the serving process."""

from __future__ import annotations

import asyncio
import json
import multiprocessing as mp
import os
import signal
import sqlite3
from typing import Any

import httpx2
import pytest
import sqlalchemy as sa

from switchboard import metrics
from switchboard.config import Settings
from switchboard.errors import ConfigError
from switchboard.hub import Hub
from switchboard.models.stamps import read_stamp
from switchboard.queue.child import ProcessDispatcher, child_main
from switchboard.queue.dispatcher import InlineDispatcher
from switchboard.sealing.columns import BODY_MAGIC
from switchboard.web.ingest import DeliveryWriter
from tests.conftest import CASES, World, github_headers, serve_in_thread, wait_for
from tests.web.test_delivery_writer import _row


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
        wait_for(lambda: metrics.PROCESSING_SECONDS._sum.get() > processed_before, timeout=20)
        wait_for(lambda: rings, timeout=20)


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
        wait_for(lambda: not dispatcher.healthy(), timeout=20)
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


def _kinds(message: tuple[Any, ...]) -> list[str]:
    return [m[0] for m in message[1]] if message[0] == "batch" else [message[0]]


def test_a_delivery_processed_alone_after_a_failed_batch_sends_its_wake_at_once(world: World) -> None:
    # Regression (review of b925b82): the child held every message until its whole batch was
    # processed, so after a failed batch the wake of a delivery committed alone waited for the
    # rest of the batch, each one alone (and any lock one of them waits out).
    hub = Hub(world.settings, role="cli")
    writer = DeliveryWriter(hub, lambda ids: None)
    try:
        with hub.db.read() as s:
            stamp = read_stamp(s.connection())
        rows = [dict(_row(hub, world.source_id, world.project_id, n), raw_body=body, body_bytes=len(body),
                     headers={k.lower(): v for k, v in github_headers(body, world.secret, delivery=f"alone-{n}").items()})
                for n, body in enumerate(_bodies(3))]

        async def store() -> list[tuple[str, str | None]]:
            return [await writer.store(r, stamp) for r in rows]

        assert [o for o, _ in asyncio.run(store())] == ["stored"] * 3
    finally:
        writer.close()
    with hub.db.write() as s:  # a body no key opens: the batch fails, then this one alone
        s.execute(sa.text("UPDATE deliveries SET raw_body = :b WHERE id = :i"),
                  {"b": BODY_MAGIC + b"\x05nokey" + bytes(40), "i": rows[1]["id"]})
    hub.close()
    ctx = mp.get_context("spawn")
    to_child_r, to_child_w = ctx.Pipe(duplex=False)
    from_child_r, from_child_w = ctx.Pipe(duplex=False)
    process = ctx.Process(target=child_main, args=(Hub, world.settings, to_child_r, from_child_w))
    process.start()
    from_child_w.close()
    to_child_r.close()
    try:
        received: list[tuple[Any, ...]] = []
        while not received or "ready" not in _kinds(received[-1]):
            assert from_child_r.poll(30)
            received.append(from_child_r.recv())
        to_child_w.send([r["id"] for r in rows])
        to_child_w.send(None)
        received = []
        while True:
            try:
                received.append(from_child_r.recv())
            except EOFError:
                break
    finally:
        process.join(30)
    wakes = [_kinds(m).count("wake") for m in received if "wake" in _kinds(m)]
    assert wakes == [1, 1]  # each in its own message, sent after its own commit


class _ReportingHub(Hub):
    """A hub that writes its role and whether it checkpoints to ``hub-roles.jsonl`` in the
    instance folder (``serve`` hands this class to the child it spawns)."""

    def __init__(self, settings: Settings, clock: Any = None, role: str = "serve") -> None:
        super().__init__(settings, clock, role)
        with open(settings.home / "hub-roles.jsonl", "a") as out:
            out.write(json.dumps({"role": role, "pid": os.getpid(),
                                  "checkpointer": self.db.checkpointer is not None}) + "\n")


def test_one_checkpointer_per_database_file(world: World) -> None:
    # Issue 11: serve and its processing child both checkpointed the same SQLite file, each
    # with locked passes of its own; serve's is the one (DESIGN.md §8, ARCHITECTURE.md).
    hub = _ReportingHub(world.settings.with_overrides(processing="process"), role="serve")
    try:
        assert isinstance(hub.dispatcher, ProcessDispatcher)
        assert hub.dispatcher.wait_ready(30)
        child = hub.dispatcher.pid
        written = (world.settings.home / "hub-roles.jsonl").read_text().splitlines()
        lines = sorted((json.loads(line) for line in written), key=lambda line: line["role"] != "serve")
    finally:
        hub.close()
    assert lines == [{"role": "serve", "pid": os.getpid(), "checkpointer": True},
                     {"role": "processing", "pid": child, "checkpointer": False}]
