"""The delivery writer process (issue 11, ``SWITCHBOARD_DELIVERY_WRITER=process``): a real
``serve`` app over real HTTP, the write transactions in a real child process. Deliveries are
stored by the child and acknowledged after its commit; a killed child fails what it had (503,
the provider retries), serve writes deliveries itself until a new child is up, and nothing
acknowledged is lost."""

from __future__ import annotations

import json
import logging
import os
import signal
import sqlite3
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx2
import pytest

from switchboard.config import Settings
from switchboard.errors import ConfigError
from switchboard.web.writer_child import ProcessWriter
from tests.conftest import CASES, World, github_headers, serve_in_thread, wait_for

if TYPE_CHECKING:
    from switchboard.hub import Hub


def _bodies(n: int, tag: str) -> list[bytes]:
    base = json.loads((CASES / "github" / "issues.opened.json").read_bytes())
    out = []
    for i in range(n):
        base["issue"]["number"] = i + 1
        base["issue"]["title"] = f"{tag} {i}"
        out.append(json.dumps(base).encode())
    return out


def _post(url: str, world: World, body: bytes, delivery: str) -> httpx2.Response:
    return httpx2.post(f"{url}/hooks/{world.source_id}", content=body, timeout=60,
                       headers=github_headers(body, world.secret, delivery=delivery))


def _stored(world: World) -> set[str]:
    conn = sqlite3.connect(world.settings.home / "switchboard.db")
    try:
        return {row[0] for row in conn.execute("SELECT id FROM deliveries")}
    finally:
        conn.close()


def test_settings_from_the_environment_choose_the_writer_process() -> None:
    assert Settings.from_env({}).delivery_writer == "process"
    assert Settings.from_env({"SWITCHBOARD_DELIVERY_WRITER": "thread"}).delivery_writer == "thread"
    assert Settings().delivery_writer == "thread"  # built in code (tests, embedding): the thread
    with pytest.raises(ValueError, match="delivery_writer must be one of process, thread"):
        Settings(delivery_writer="fork")
    with pytest.raises(ConfigError) as refused:
        Settings.from_env({"SWITCHBOARD_DELIVERY_WRITER": "fork"})
    assert "SWITCHBOARD_DELIVERY_WRITER must be one of process, thread" in str(refused.value)


def test_deliveries_are_stored_by_the_child_and_acknowledged_after_its_commit(world: World) -> None:
    settings = world.settings.with_overrides(delivery_writer="process")
    for url, hub in serve_in_thread(settings):
        writer = hub.delivery_writer
        assert isinstance(writer, ProcessWriter)
        assert writer.pid is not None and writer.pid != os.getpid() and writer.healthy()
        checks = httpx2.get(f"{url}/api/v1/ready", timeout=10).json()["checks"]
        assert checks["delivery_writer"] == "ok"
        bodies = _bodies(24, "child")
        answers: list[httpx2.Response] = []
        lock = threading.Lock()

        def send(i: int) -> None:
            resp = _post(url, world, bodies[i], f"child-{i}")
            with lock:
                answers.append(resp)

        threads = [threading.Thread(target=send, args=(i,)) for i in range(len(bodies))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert sorted(r.status_code for r in answers) == [202] * 24
        ids = {r.json()["delivery_id"] for r in answers}
        assert ids <= _stored(world) and len(ids) == 24  # each acknowledged one is committed
        # A repeat is answered from the child's conflict lookup: 200 with the first id.
        again = _post(url, world, bodies[0], "child-0")
        assert again.status_code == 200 and again.json()["duplicate"] is True
        assert again.json()["delivery_id"] in ids
        # The stored deliveries were handed to processing (the serving process's dispatcher).
        wait_for(lambda: _processed(world) == 24, timeout=30)


def test_received_at_crosses_the_pipe_exactly(world: World) -> None:
    """Issue 11: ``received_at`` goes to the child as microseconds since the epoch (pickling
    ``timezone.utc`` was most of a message's pickle on the event loop); it comes back the same
    aware UTC datetime, to the microsecond, and is stored as the receiver stamped it."""
    import pickle
    import random
    from datetime import datetime, timedelta, timezone

    from switchboard.web.writer_main import from_pipe, to_pipe

    pick = random.Random(5)
    moments = [datetime(1969, 12, 31, 23, 59, 59, 999999, tzinfo=timezone.utc),
               datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=timezone.utc)]
    moments += [datetime(1970, 1, 1, tzinfo=timezone.utc) + timedelta(microseconds=pick.randrange(253_000_000_000_000_000))
                for _ in range(2000)]
    for at in moments:
        row = {"id": "dlv_x", "received_at": at}
        sent = to_pipe(row)
        assert type(sent["received_at"]) is int and row["received_at"] is at  # the receiver's row untouched
        back = from_pipe(pickle.loads(pickle.dumps(sent)))["received_at"]
        assert back == at and back.tzinfo is timezone.utc
    other = datetime(2026, 12, 5, 20, 0, tzinfo=timezone(timedelta(hours=1)))
    assert to_pipe({"received_at": other})["received_at"] is other  # sent as it is

    settings = world.settings.with_overrides(delivery_writer="process")
    for url, hub in serve_in_thread(settings):
        assert isinstance(hub.delivery_writer, ProcessWriter) and hub.delivery_writer.healthy()
        before = datetime.now(timezone.utc)
        resp = _post(url, world, _bodies(1, "stamp")[0], "stamp-0")
        after = datetime.now(timezone.utc)
        assert resp.status_code == 202
        from switchboard.models import Delivery

        with hub.db.read() as s:
            stored = s.get(Delivery, resp.json()["delivery_id"])
            assert stored is not None
            received = stored.received_at
    received = received if received.tzinfo else received.replace(tzinfo=timezone.utc)
    assert before <= received <= after


def _processed(world: World) -> int:
    conn = sqlite3.connect(world.settings.home / "switchboard.db")
    try:
        return int(conn.execute("SELECT count(*) FROM deliveries WHERE status = 'processed'").fetchone()[0])
    finally:
        conn.close()


def test_a_killed_child_fails_what_it_had_serve_writes_meanwhile_and_nothing_acknowledged_is_lost(
        world: World) -> None:
    settings = world.settings.with_overrides(delivery_writer="process")
    for url, hub in serve_in_thread(settings):
        writer = hub.delivery_writer
        assert isinstance(writer, ProcessWriter)
        first = writer.pid
        assert first is not None
        # Hold SQLite's write lock so the child's transaction waits inside BEGIN IMMEDIATE.
        blocker = sqlite3.connect(world.settings.home / "switchboard.db", isolation_level=None)
        blocker.execute("BEGIN IMMEDIATE")
        body = _bodies(1, "in-flight")[0]
        result: list[httpx2.Response] = []
        sender = threading.Thread(target=lambda: result.append(_post(url, world, body, "in-flight")))
        sender.start()
        try:
            wait_for(lambda: bool(writer._pending), timeout=10)  # sent to the child, not answered
            os.kill(first, signal.SIGKILL)
            sender.join(timeout=30)
        finally:
            blocker.execute("ROLLBACK")
            blocker.close()
        # The request the child had is refused with a retryable 503, never acknowledged.
        assert result and result[0].status_code == 503
        assert result[0].json()["code"] == "dependency_unavailable"
        wait_for(lambda: not writer.healthy(), timeout=10)
        assert "ok (its process is restarting" in httpx2.get(f"{url}/api/v1/ready", timeout=10).json()[
            "checks"]["delivery_writer"]
        # While no child runs, serve stores deliveries itself.
        meanwhile = [_post(url, world, b, f"meanwhile-{i}") for i, b in enumerate(_bodies(5, "meanwhile"))]
        assert [r.status_code for r in meanwhile] == [202] * 5
        # A new child takes over; the retried delivery and new ones are stored by it.
        wait_for(lambda: writer.restarts == 1 and writer.healthy() and writer.pid != first, timeout=30)
        retried = _post(url, world, body, "in-flight")
        assert retried.status_code == 202
        later = [_post(url, world, b, f"later-{i}") for i, b in enumerate(_bodies(5, "later"))]
        assert [r.status_code for r in later] == [202] * 5
        acknowledged = {r.json()["delivery_id"] for r in [*meanwhile, retried, *later]}
        assert acknowledged <= _stored(world)
        assert len(_stored(world)) == 11


def _supervisor_log() -> tuple[logging.Logger, logging.Handler, list[logging.LogRecord]]:
    records: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = records.append  # type: ignore[method-assign]
    logger = logging.getLogger("switchboard.queue.child")
    logger.addHandler(handler)
    return logger, handler, records


def _failing_once(real: Any, exc: Exception) -> tuple[Any, list[bool]]:
    """``real``, raising ``exc`` on its first call; the list is non-empty once it has."""
    failed: list[bool] = []

    def call(*args: Any) -> Any:
        if not failed:
            failed.append(True)
            raise exc
        return real(*args)

    return call, failed


def test_a_child_that_cannot_be_started_is_retried_and_serve_stores_meanwhile(world: World) -> None:
    # The same supervisor as the processing process (queue/child.py: supervise): a start that
    # fails (here: out of file descriptors) is logged by class and retried after the backoff.
    settings = world.settings.with_overrides(delivery_writer="process")
    logger, handler, records = _supervisor_log()
    try:
        for url, hub in serve_in_thread(settings):
            _start_fails_once(url, world, hub.delivery_writer)
    finally:
        logger.removeHandler(handler)
    messages = [r.getMessage() for r in records]
    # A child that died young doubles the wait (1 s to 2 s); the failed start waits that long.
    assert any(m.startswith("the delivery writer process exited (code -9); starting another in 2 s")
               for m in messages), messages
    assert "could not start the delivery writer process (OSError); retrying in 2 s" in messages, messages
    assert not any("Too many open files" in m for m in messages)  # the class only, never the text


def _start_fails_once(url: str, world: World, writer: object) -> None:
    assert isinstance(writer, ProcessWriter)
    first = writer.pid
    assert first is not None
    spawn, failed = _failing_once(writer._spawn, OSError(24, "Too many open files"))
    writer._spawn = spawn  # type: ignore[method-assign]
    os.kill(first, signal.SIGKILL)
    wait_for(lambda: bool(failed), timeout=30)
    assert not writer.healthy()
    meanwhile = _post(url, world, _bodies(1, "no child")[0], "no-child")
    assert meanwhile.status_code == 202
    assert writer._fallback is not None  # stored by serve's own writer
    wait_for(lambda: writer.healthy() and writer.pid not in (None, first), timeout=60)
    assert writer.restarts == 1
    after = _post(url, world, _bodies(2, "new child")[1], "new-child")
    assert after.status_code == 202
    assert {meanwhile.json()["delivery_id"], after.json()["delivery_id"]} <= _stored(world)


def test_a_child_whose_pipe_cannot_be_attached_is_killed_and_another_started(world: World) -> None:
    settings = world.settings.with_overrides(delivery_writer="process")
    for _, hub in serve_in_thread(settings):
        _attach_fails_once(hub.delivery_writer)


def _attach_fails_once(writer: object) -> None:
    assert isinstance(writer, ProcessWriter)
    first = writer.pid
    assert first is not None
    spawned: list[Any] = []
    real_spawn = writer._spawn

    def spawn_and_note() -> object:
        sock = real_spawn()
        spawned.append(writer._process)
        return sock

    writer._spawn = spawn_and_note  # type: ignore[method-assign]
    attach, failed = _failing_once(writer._attach, OSError("attach refused"))
    writer._attach = attach  # type: ignore[method-assign]
    os.kill(first, signal.SIGKILL)
    wait_for(lambda: writer.healthy() and len(spawned) == 2, timeout=60)
    half_started, running = spawned
    assert failed and not half_started.is_alive()  # killed when its pipe could not be attached
    assert half_started.exitcode == -signal.SIGKILL
    assert running.is_alive() and writer.pid == running.pid


def test_close_lets_the_child_finish_what_was_sent(world: World) -> None:
    settings = world.settings.with_overrides(delivery_writer="process")
    for url, hub in serve_in_thread(settings):
        writer = hub.delivery_writer
        assert isinstance(writer, ProcessWriter)
        child = writer.pid
        responses = [_post(url, world, b, f"close-{i}") for i, b in enumerate(_bodies(3, "close"))]
        assert [r.status_code for r in responses] == [202] * 3
    # serve stopped (its lifespan closed the writer): the child exited, its rows are committed,
    # and the hub was closed after it (an await in the lifespan's cancelled scope had cut the
    # shutdown short before hub.close, leaving the sweeper running).
    assert hub._stop.is_set()
    assert child is not None
    wait_for(lambda: not _alive(child), timeout=15)
    assert {r.json()["delivery_id"] for r in responses} <= _stored(world)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie (not yet reaped) is gone for our purposes
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_with_redis_the_child_enqueues_the_rq_jobs_of_what_it_stored(world: World, redis_url: str) -> None:
    import redis
    from rq import Queue

    from switchboard.queue.dispatcher import RQ_JOB, RQ_QUEUE

    conn = redis.Redis.from_url(redis_url)
    conn.flushdb()
    settings = world.settings.with_overrides(delivery_writer="process", redis_url=redis_url)
    for url, hub in serve_in_thread(settings):
        writer = hub.delivery_writer
        assert isinstance(writer, ProcessWriter)
        handed: list[list[str]] = []
        real_submit = hub.dispatcher.submit
        hub.dispatcher.submit = lambda ids: (handed.append(list(ids)), real_submit(ids))  # type: ignore[method-assign]
        answers = [_post(url, world, b, f"rq-{i}") for i, b in enumerate(_bodies(20, "rq"))]
        assert [r.status_code for r in answers] == [202] * 20
        ids = sorted(r.json()["delivery_id"] for r in answers)
        queue = Queue(RQ_QUEUE, connection=conn)

        def enqueued() -> list[str]:
            return sorted(i for job in queue.get_jobs() if job.func_name == RQ_JOB for i in job.args[0])

        wait_for(lambda: enqueued() == ids, timeout=10)
        # Enqueued by the child, each once, and not by serve's own hand-off thread.
        assert not [i for batch in handed for i in batch if i in ids]


@contextmanager
def _writer_in_this_process(world: World, on_stored: Callable[[list[str]], None]
                            ) -> Iterator[tuple[Hub, ProcessWriter, int]]:
    """A :class:`ProcessWriter` on ``world`` (not started: :func:`_started` on the test's loop),
    its hub and the current sources stamp; both closed at the end."""
    from switchboard.hub import Hub
    from switchboard.models.stamps import read_stamp

    hub = Hub(world.settings, role="cli")
    writer = ProcessWriter(hub, on_stored)
    try:
        with hub.db.read() as s:
            stamp = read_stamp(s.connection())
        yield hub, writer, stamp
    finally:
        writer.close()
        hub.close()


async def _started(writer: ProcessWriter) -> None:
    """Start ``writer``'s child from the running loop and wait until it is ready."""
    import anyio

    writer.start()
    assert await anyio.to_thread.run_sync(writer.wait_ready, 30)


def test_a_row_not_yet_sent_when_the_pipe_closes_is_stored_by_serve_not_refused(world: World) -> None:
    import asyncio

    from switchboard.errors import DependencyUnavailable
    from switchboard.web.writer_child import _Pending
    from tests.web.test_delivery_writer import _row

    handed: list[str] = []
    with _writer_in_this_process(world, handed.extend) as (hub, writer, stamp):
        row = _row(hub, world.source_id, world.project_id, 1)

        async def scenario() -> tuple[str, str | None]:
            await _started(writer)
            # The child is busy (a row sent to it and not answered): a lone row waits for the
            # end of this pass.
            busy = _Pending(asyncio.get_running_loop().create_future(), "dlv_busy", False,
                            asyncio.get_running_loop().time(), writer._link)
            writer._pending[-1] = busy
            stored = asyncio.ensure_future(writer.store(row, stamp))
            await asyncio.sleep(0)
            assert writer._out and writer._link is not None and writer._link.transport is not None
            writer._link.transport.abort()  # the pipe closes before the flush
            outcome = await asyncio.wait_for(stored, 30)
            # What the closed pipe's child had is answered 503 (never by the thread writer).
            [failed] = await asyncio.wait_for(asyncio.gather(busy.future, return_exceptions=True), 30)
            assert isinstance(failed, DependencyUnavailable)
            return outcome

        assert asyncio.run(scenario()) == ("stored", row["id"])
    assert row["id"] in _stored(world) and handed == [row["id"]]


def test_rows_go_to_the_child_at_once_when_it_is_idle_and_in_groups_while_it_is_busy(world: World) -> None:
    """A row waits for the end of the event loop's pass only while the child has rows in flight,
    and then only until SEND_EVERY rows wait (issue 11)."""
    import asyncio

    from switchboard.web.writer_child import SEND_EVERY
    from tests.web.test_delivery_writer import _row

    assert SEND_EVERY > 1
    with _writer_in_this_process(world, lambda ids: None) as (hub, writer, stamp):
        rows = [_row(hub, world.source_id, world.project_id, i) for i in range(SEND_EVERY + 2)]

        async def scenario() -> list[tuple[str, str | None]]:
            await _started(writer)
            first = asyncio.ensure_future(writer.store(rows[0], stamp))
            await asyncio.sleep(0)  # store() ran up to its await
            # The child was idle: sent at once, not at the end of this pass.
            assert writer._out == [] and writer._in_flight == 1
            more = [asyncio.ensure_future(writer.store(row, stamp)) for row in rows[1:]]
            await asyncio.sleep(0)  # the others ran up to their awaits, in this same pass
            # Busy: SEND_EVERY rows went together, the last one waits for the end of the pass.
            assert [item[1]["id"] for item in writer._out] == [rows[-1]["id"]]
            assert writer._in_flight == 1 + SEND_EVERY
            return list(await asyncio.wait_for(asyncio.gather(first, *more), 30))

        assert asyncio.run(scenario()) == [("stored", row["id"]) for row in rows]
        assert writer._in_flight == 0
    assert {row["id"] for row in rows} <= set(_stored(world))


def test_a_row_sent_at_once_to_an_idle_child_whose_pipe_is_closing_is_stored_by_serve(world: World) -> None:
    """The idle rule flushes inside ``store``: a pipe that closed before the loop noticed sends
    the row to serve's own thread writer, as the end-of-pass flush does (a review's probe)."""
    import asyncio

    from tests.web.test_delivery_writer import _row

    with _writer_in_this_process(world, lambda ids: None) as (hub, writer, stamp):
        row = _row(hub, world.source_id, world.project_id, 1)

        async def scenario() -> tuple[str, str | None]:
            await _started(writer)
            assert writer._in_flight == 0 and writer._link is not None and writer._link.transport is not None
            writer._link.transport.abort()  # closing; connection_lost has not run yet
            # Awaited here, not through wait_for: a task of its own would start only after
            # connection_lost, and store would then go to the thread writer without reaching
            # _flush's closing-pipe branch, which is what this test is about (review).
            async with asyncio.timeout(30):
                return await writer.store(row, stamp)  # sent at once: the child is idle

        assert asyncio.run(scenario()) == ("stored", row["id"])
        assert writer._fallback is not None and writer._in_flight == 0  # serve's thread wrote it
    assert row["id"] in _stored(world)


def _run_script(text: str, world: World, tmp_path: Path, timeout: float) -> subprocess.CompletedProcess[str]:
    """Run ``text`` as a script with this checkout first on the path and the instance's home
    as its argument; a hang fails the test at ``timeout`` seconds."""
    script = tmp_path / "script.py"
    script.write_text(text)
    root = str(Path(__file__).resolve().parents[2])
    return subprocess.run([sys.executable, str(script), str(world.settings.home)], capture_output=True, text=True,
                          timeout=timeout, check=False, cwd=str(tmp_path),
                          env={**os.environ, "PYTHONPATH": root + os.pathsep + os.environ.get("PYTHONPATH", "")})


EXIT_SCRIPT = """
import asyncio, sys
import anyio
from switchboard.config import Settings
from switchboard.hub import Hub
from switchboard.web.writer_child import ProcessWriter

async def main(writer):
    writer.start()
    assert await anyio.to_thread.run_sync(writer.wait_ready, 30)
    print(writer.pid, flush=True)

if __name__ == "__main__":  # the spawned child imports this file again
    hub = Hub(Settings(home=sys.argv[1]), role="cli")
    writer = ProcessWriter(hub, lambda ids: None)
    asyncio.run(main(writer))  # ends without closing the writer: as a force-quit serve, or a failed start-up
"""


def test_the_process_exits_when_it_ends_without_closing_the_writer(world: World, tmp_path: Path) -> None:
    proc = _run_script(EXIT_SCRIPT, world, tmp_path, timeout=90)
    # The child ignores SIGTERM (it reaches the whole process group); multiprocessing's exit hook
    # would wait for it forever. Ours hangs up the pipe first, and the child stops.
    assert proc.returncode == 0, proc.stderr[-2000:]
    child = int(proc.stdout.split()[0])
    assert not _alive(child)


PROCESSING_EXIT_SCRIPT = """
import sys
from switchboard.config import Settings
from switchboard.hub import Hub

if __name__ == "__main__":  # the spawned child imports this file again
    hub = Hub(Settings(home=sys.argv[1], processing="process"), role="serve")
    assert hub.dispatcher.wait_ready(60)
    print(hub.dispatcher.pid, flush=True)
    # ends without hub.close(): the processing child is still waiting on its pipe
"""


def test_the_process_exits_when_it_ends_without_closing_the_processing_child(world: World, tmp_path: Path) -> None:
    # The same class of fault for embedded mode's processing process (queue/child.py).
    proc = _run_script(PROCESSING_EXIT_SCRIPT, world, tmp_path, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert not _alive(int(proc.stdout.split()[0]))


def _with_a_3_s_deadline(world: World, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[str, ProcessWriter]]:
    """A served app whose writer child fails rows after 3 s (checked every 0.2 s): its URL and writer."""
    from switchboard.web import writer_child

    monkeypatch.setattr(writer_child, "ANSWER_SECONDS", 3.0)
    monkeypatch.setattr(writer_child, "WATCH_SECONDS", 0.2)
    for url, hub in serve_in_thread(world.settings.with_overrides(delivery_writer="process")):
        writer = hub.delivery_writer
        assert isinstance(writer, ProcessWriter) and writer.pid is not None
        yield url, writer


def test_a_stalled_child_fails_its_rows_after_the_deadline_and_ready_says_so(
        world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    """A break run: with the child stopped (SIGSTOP) every hook request hung with no deadline
    (a client gave up at 30 s) and `/ready` answered 200 with `delivery_writer: ok`."""
    for url, writer in _with_a_3_s_deadline(world, monkeypatch):
        first = _post(url, world, _bodies(1, "before")[0], "before")
        assert first.status_code == 202
        os.kill(writer.pid, signal.SIGSTOP)
        try:
            body = _bodies(1, "stalled")[0]
            stalled = _post(url, world, body, "stalled")
            assert stalled.status_code == 503, stalled.text
            assert stalled.json()["code"] == "dependency_unavailable"
            assert stalled.json()["detail"] == "the delivery writer did not answer in 3 s; retry the delivery"
            ready = httpx2.get(f"{url}/api/v1/ready", timeout=10)
            assert ready.status_code == 503
            assert ready.json()["checks"]["delivery_writer"] == (
                "stalled (its process has not answered in time; deliveries get 503)")
        finally:
            os.kill(writer.pid, signal.SIGCONT)
        # The child goes on: the row it had is committed late, so the provider's retry is a
        # duplicate with its id; new deliveries are acknowledged and /ready is ready again.
        retried = _post(url, world, body, "stalled")
        assert retried.status_code in (200, 202) and retried.json()["delivery_id"] in _stored(world)
        later = _post(url, world, _bodies(1, "later")[0], "later")
        assert later.status_code == 202
        assert httpx2.get(f"{url}/api/v1/ready", timeout=10).json()["checks"]["delivery_writer"] == "ok"
        assert {first.json()["delivery_id"], later.json()["delivery_id"]} <= _stored(world)


def test_a_stalled_child_that_is_killed_leaves_ready_ready_once_another_is_up(
        world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    """A review: the stall was cleared only by the stalled child's own answer, so after a stall
    and a kill (an operator, the OOM killer) the new child was up and `/ready` still said
    `stalled` (503) for good: a load balancer would never send deliveries again."""
    for url, writer in _with_a_3_s_deadline(world, monkeypatch):
        first = writer.pid
        os.kill(first, signal.SIGSTOP)
        assert _post(url, world, _bodies(1, "stalled")[0], "stalled").status_code == 503
        assert httpx2.get(f"{url}/api/v1/ready", timeout=10).status_code == 503
        os.kill(first, signal.SIGKILL)
        wait_for(lambda: writer.healthy() and writer.pid != first, timeout=30)
        ready = httpx2.get(f"{url}/api/v1/ready", timeout=10)
        assert ready.status_code == 200 and ready.json()["checks"]["delivery_writer"] == "ok", ready.text
        later = _post(url, world, _bodies(1, "later")[0], "later")
        assert later.status_code == 202 and later.json()["delivery_id"] in _stored(world)
