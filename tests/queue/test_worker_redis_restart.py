"""``switchboard worker`` outlives a Redis restart (issue 11's rq path; found by a review): rq
2.12's own reconnect handler raised again from its heartbeat, the worker quit, and processing
stopped until someone started workers again. Real redis-server, real worker process."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from switchboard.config import Settings
from switchboard.models import Delivery
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
from tests.services import RestartableRedis


def _count_processed(hub: object) -> int:
    from sqlalchemy import func, select

    with hub.db.read() as s:  # type: ignore[attr-defined]
        return int(s.execute(select(func.count()).select_from(Delivery).where(Delivery.status == "processed"))
                   .scalar_one())


@pytest.fixture
def restartable_redis(tmp_path: Path) -> Iterator[RestartableRedis]:
    server = RestartableRedis(tmp_path)
    server.start()
    try:
        yield server
    finally:
        if server.proc is not None and server.proc.poll() is None:
            server.kill()


ISSUE = (CASES / "github" / "issues.opened.json").read_bytes()


def _issue(number: int) -> bytes:
    """The real issues.opened payload with another issue number (a distinct body: not a duplicate)."""
    return ISSUE if number == 1 else ISSUE.replace(b'"number": 1,', f'"number": {number},'.encode(), 1)


def _post(live: LiveApp, number: int) -> str:
    """Post ``_issue(number)`` signed; its delivery id (202)."""
    body = _issue(number)
    resp = live.post_hook(body, github_headers(body, live.world.secret))
    assert resp.status_code == 202, resp.text
    return str(resp.json()["delivery_id"])


def _processed(live: LiveApp, delivery_id: str) -> bool:
    with live.hub.db.read() as s:
        return s.get(Delivery, delivery_id).status == "processed"


def _wait_processed(live: LiveApp, worker: subprocess.Popen[bytes], log_path: Path, delivery_id: str) -> None:
    """Until the delivery is processed, failing with the worker's log if the worker exits first."""
    wait_for(lambda: _processed(live, delivery_id) or worker.poll() is not None, timeout=60)
    assert worker.poll() is None, log_path.read_text()[-3000:]
    assert _processed(live, delivery_id), log_path.read_text()[-3000:]


@contextmanager
def _served_with_worker(redis_server: RestartableRedis, tmp_path: Path,
                        argv: list[str]) -> Iterator[tuple[LiveApp, subprocess.Popen[bytes], Path]]:
    """A configured instance on ``redis_server``, served in a thread, with ``argv`` (a worker)
    running against it; yields ``(live app, worker process, worker log)``. The worker is killed
    at the end if the test left it running."""
    settings = Settings(home=tmp_path / "hub", redis_url=redis_server.url, sweep_interval_seconds=600)
    world = configure(settings)
    log_path = tmp_path / "worker.log"
    with log_path.open("w") as log:
        worker = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                                  env=cli_env(settings.home, SWITCHBOARD_REDIS_URL=redis_server.url))
    try:
        for url, hub in serve_in_thread(settings):
            yield LiveApp(url, hub, world), worker, log_path
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()


def _stop(worker: subprocess.Popen[bytes], log_path: Path, timeout: float = 30) -> None:
    """SIGTERM (a warm shutdown) ends the worker with exit 0."""
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(timeout=timeout) == 0, log_path.read_text()[-3000:]


def test_a_worker_goes_on_processing_after_redis_restarts(restartable_redis: RestartableRedis,
                                                          tmp_path: Path) -> None:
    argv = [switchboard_exe(), "worker"]
    with _served_with_worker(restartable_redis, tmp_path, argv) as (live, worker, log):
        _wait_processed(live, worker, log, _post(live, 1))
        # A burst keeps the worker inside jobs (and rq's bookkeeping around them) when Redis goes.
        sender = threading.Thread(target=lambda: [live.post_hook(b, github_headers(b, live.world.secret))
                                                  for b in map(_issue, range(100, 700))], daemon=True)
        sender.start()
        wait_for(lambda: _count_processed(live.hub) >= 30, timeout=60)
        restartable_redis.kill()
        time.sleep(1.0)
        restartable_redis.start()
        sender.join(timeout=120)
        time.sleep(3.0)
        assert _issue(2) != ISSUE
        _wait_processed(live, worker, log, _post(live, 2))


FLAKY_WORKER = """
import sys
import redis, rq
from rq.worker import WorkerStatus
from switchboard.config import Settings
from switchboard.worker import run_worker

failed = []

if sys.argv[1] == "dequeue":
    original = rq.SimpleWorker.dequeue_job_and_maintain_ttl

    def dequeue_then_lose_redis(self, *args, **kwargs):
        # What a review saw: the dequeue worked, then rq's heartbeat right after it met a Redis
        # that had just gone away, and rq 2.12 quit ("found an unhandled exception, quitting").
        result = original(self, *args, **kwargs)
        if result is not None and not failed:
            failed.append(1)
            raise redis.ConnectionError("Connection reset by peer (Redis restarted)")
        return result

    rq.SimpleWorker.dequeue_job_and_maintain_ttl = dequeue_then_lose_redis
else:  # "busy": rq quits in the middle of a job (its state stays busy)
    original = rq.SimpleWorker.execute_job

    def lose_redis_in_a_job(self, job, queue):
        if not failed:
            failed.append(1)
            self.set_state(WorkerStatus.BUSY)
            raise redis.ConnectionError("Connection reset by peer (Redis restarted)")
        return original(self, job, queue)

    rq.SimpleWorker.execute_job = lose_redis_in_a_job
run_worker(Settings.from_env())
"""


@contextmanager
def _after_rq_quit(mode: str, redis_server: RestartableRedis,
                   tmp_path: Path) -> Iterator[tuple[LiveApp, subprocess.Popen[bytes], Path]]:
    """A flaky worker (``mode``: rq quits after a dequeue or in the middle of a job) whose rq has
    quit on a "lost" Redis on the first delivery; yields once ``run_worker`` waits to start again."""
    argv = [sys.executable, "-c", FLAKY_WORKER, mode]
    with _served_with_worker(redis_server, tmp_path, argv) as (live, worker, log):
        live.post_hook(ISSUE, github_headers(ISSUE, live.world.secret))  # its job meets the "lost" Redis
        wait_for(lambda: "starts in" in log.read_text() or worker.poll() is not None, timeout=60)
        assert worker.poll() is None and "starts in" in log.read_text(), log.read_text()[-3000:]
        yield live, worker, log


def test_a_worker_whose_rq_quits_on_a_redis_error_starts_again(restartable_redis: RestartableRedis,
                                                               tmp_path: Path) -> None:
    with _after_rq_quit("dequeue", restartable_redis, tmp_path) as (live, worker, log):
        assert worker.poll() is None, log.read_text()[-3000:]
        _wait_processed(live, worker, log, _post(live, 2))
        assert "worker: rq stopped on an error; a new rq worker starts in 1 s" in log.read_text()
        _stop(worker, log)  # a warm shutdown still ends it


def test_a_worker_waits_out_a_redis_that_stays_away(restartable_redis: RestartableRedis,
                                                   tmp_path: Path) -> None:
    # Review: building the new rq worker talks to Redis; with Redis still away one second after
    # rq quit, that raised out of run_worker and the worker exited after all.
    with _after_rq_quit("dequeue", restartable_redis, tmp_path) as (live, worker, log):
        restartable_redis.kill()  # away before the new rq worker is built, for 4 s
        time.sleep(4.0)
        assert worker.poll() is None, log.read_text()[-3000:]
        restartable_redis.start()
        _wait_processed(live, worker, log, _post(live, 2))
        _stop(worker, log)


@pytest.mark.parametrize("mode", ["busy", "dequeue"])
def test_a_stop_during_the_wait_after_rq_quit_mid_job_ends_the_worker(restartable_redis: RestartableRedis,
                                                                      tmp_path: Path, mode: str) -> None:
    # Review: rq quit in the middle of a job, its state still busy, so a SIGTERM during the wait
    # only set a flag of that rq worker; a new one started and ran on. (Quit while idle, rq's
    # handler raises instead: that ends the wait too.)
    with _after_rq_quit(mode, restartable_redis, tmp_path) as (_live, worker, log):
        _stop(worker, log, timeout=20)
