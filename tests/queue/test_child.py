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
import time
from datetime import UTC, datetime
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


class _PassHub(Hub):
    """A hub that writes a line to ``queue-passes.jsonl`` in the instance folder for each queue
    part of a maintenance pass it runs (``serve`` hands this class to its child)."""

    def _queue_pass(self) -> Any:
        out = super()._queue_pass()
        with open(self.settings.home / "queue-passes.jsonl", "a") as f:
            f.write(json.dumps({"role": self.role, "pid": os.getpid(), "rung": out[1].todos}) + "\n")
        return out


def _passes(world: World) -> list[dict[str, Any]]:
    path = world.settings.home / "queue-passes.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def _new_todo(hub: Hub, world: World, title: str) -> str:
    from switchboard.queue import todos

    with hub.db.write() as s:  # made outside processing: only a maintenance pass rings it
        todo, _ = todos.create(s, hub.clock, project_id=world.project_id, queue="reviews", kind="manual",
                               title=title, payload=None)
        return todo.id


def _ring_count(hub: Hub, todo_id: str) -> int:
    from switchboard.models import Todo

    with hub.db.read() as s:
        todo = s.get(Todo, todo_id)
        assert todo is not None
        return todo.ring_count


def _rang(world: World) -> int:
    return sum(p["rung"] for p in _passes(world))


def _passes_go_to(world: World, pid: int) -> None:
    """Wait for a pass of process ``pid``; then, once serve has seen it, check that only that
    process runs the queue's passes for a second."""
    seen = len(_passes(world))
    wait_for(lambda: any(p["pid"] == pid for p in _passes(world)[seen:]), timeout=30)
    time.sleep(1.0)  # a pass of serve's that began before it heard of the child's ends
    mark = len(_passes(world))
    time.sleep(1.0)
    later = _passes(world)[mark:]
    assert later and {(p["role"], p["pid"]) for p in later} == {("processing", pid)}


def test_the_processing_process_runs_the_queue_pass_and_serve_takes_it_over_while_there_is_none(
        world: World) -> None:
    # Issue 11: in serve, the re-ring pass's write transaction held SQLite's write lock 17-44 ms
    # during a full-speed burst; the processing process runs it between its batches (Hub.reap).
    settings = world.settings.with_overrides(processing="process", reap_interval_seconds=0.2)
    hub = _PassHub(settings, role="serve")
    try:
        dispatcher = hub.dispatcher
        assert isinstance(dispatcher, ProcessDispatcher)
        assert dispatcher.wait_ready(30)
        child = dispatcher.pid
        assert child is not None
        hub.start_sweeper()
        first = _new_todo(hub, world, "made by the CLI")
        wait_for(lambda: _rang(world) == 1, timeout=20)
        assert {(p["role"], p["pid"]) for p in _passes(world)} == {("processing", child)}

        # A child stuck in a batch (here stopped) is still ready: serve takes the pass over
        # until it passes again (review: leases and inbox expiry would have waited for it).
        os.kill(child, signal.SIGSTOP)
        try:
            seen = len(_passes(world))
            wait_for(lambda: any(p["role"] == "serve" for p in _passes(world)[seen:]), timeout=20)
            assert dispatcher.healthy()
        finally:
            os.kill(child, signal.SIGCONT)
        _passes_go_to(world, child)

        # No child: serve runs the whole pass, and gives it to the next child once it is ready.
        os.kill(child, signal.SIGKILL)
        wait_for(lambda: not dispatcher.healthy(), timeout=20)
        seen = len(_passes(world))
        wait_for(lambda: any(p["role"] == "serve" for p in _passes(world)[seen:]), timeout=20)
        wait_for(dispatcher.healthy, timeout=30)
        second_child = dispatcher.pid
        assert second_child not in (None, child)
        _passes_go_to(world, second_child)  # type: ignore[arg-type]
        second = _new_todo(hub, world, "made by the CLI, later")
        wait_for(lambda: _rang(world) == 2, timeout=20)
        assert [(p["role"], p["pid"]) for p in _passes(world) if p["rung"]] == [
            ("processing", child), ("processing", second_child)]
        assert _ring_count(hub, first) == 1 and _ring_count(hub, second) == 1
    finally:
        hub.close()


def test_the_child_rings_and_nudges_for_the_inbox_items_its_pass_expires(world: World) -> None:
    # Review: the child's expiry reaches serve at once (its inbox_wait ring and a nudge of the
    # agent's streams for the verdict events), not on serve's next read of resolutions.
    from datetime import timedelta

    from switchboard.clock import FixedClock
    from switchboard.inbox import items
    from switchboard.models import InboxItem

    hub = Hub(world.settings, clock=FixedClock(datetime.now(UTC) - timedelta(minutes=5)), role="cli")
    try:
        with hub.db.write() as s:
            item = items.post(s, hub.clock, agent_id=world.agent_id, grants={world.project_id: "work"},
                              kind="approval", project=world.project_id, title="deploy?",
                              expires_in_seconds=60)
    finally:
        hub.close()
    ctx = mp.get_context("spawn")
    to_child_r, to_child_w = ctx.Pipe(duplex=False)
    from_child_r, from_child_w = ctx.Pipe(duplex=False)
    settings = world.settings.with_overrides(reap_interval_seconds=0.1)
    process = ctx.Process(target=child_main, args=(Hub, settings, to_child_r, from_child_w))
    process.start()
    from_child_w.close()
    to_child_r.close()
    messages: list[tuple[Any, ...]] = []
    try:
        while ("passed",) not in messages:
            assert from_child_r.poll(30)
            received = from_child_r.recv()
            messages += received[1] if received[0] == "batch" else [received]
        to_child_w.send(None)
    finally:
        process.join(30)
    assert ("inbox", world.agent_id) in messages and ("event", world.agent_id, None) in messages
    assert messages.index(("inbox", world.agent_id)) < messages.index(("passed",))
    check = Hub(world.settings, role="cli")
    try:
        with check.db.read() as s:
            expired = s.get(InboxItem, item["id"])
            assert expired is not None and expired.status != "open" and expired.decision == "deny"
    finally:
        check.close()
