"""``switchboard worker`` outlives a Redis restart (issue 11's rq path; found by a review): rq
2.12's own reconnect handler raised again from its heartbeat, the worker quit, and processing
stopped until someone started workers again. Real redis-server, real worker process."""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from switchboard.config import Settings
from switchboard.models import Delivery
from tests.conftest import CASES, LiveApp, cli_env, configure, github_headers, serve_in_thread, switchboard_exe, wait_for
from tests.services import _free_port, _unavailable, _wait_for_redis


def _count_processed(hub: object) -> int:
    from sqlalchemy import func, select

    with hub.db.read() as s:  # type: ignore[attr-defined]
        return int(s.execute(select(func.count()).select_from(Delivery).where(Delivery.status == "processed"))
                   .scalar_one())


class RestartableRedis:
    """A redis-server on a fixed port that can be killed and started again."""

    def __init__(self, root: Path) -> None:
        server = shutil.which("redis-server")
        if server is None:
            _unavailable("redis-server not found on PATH")
        self.server, self.root, self.port = server, root, _free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [self.server, "--save", "", "--appendonly", "no", "--port", str(self.port), "--bind", "127.0.0.1",
             "--dir", str(self.root)], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        assert _wait_for_redis(self.proc, self.port), "redis-server did not start"

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait(timeout=10)


@pytest.fixture
def restartable_redis(tmp_path: Path) -> Iterator[RestartableRedis]:
    server = RestartableRedis(tmp_path)
    server.start()
    try:
        yield server
    finally:
        if server.proc is not None and server.proc.poll() is None:
            server.kill()


def test_a_worker_goes_on_processing_after_redis_restarts(restartable_redis: RestartableRedis,
                                                          tmp_path: Path) -> None:
    settings = Settings(home=tmp_path / "hub", redis_url=restartable_redis.url, sweep_interval_seconds=600)
    world = configure(settings)
    log = (tmp_path / "worker.log").open("w")
    worker = subprocess.Popen([switchboard_exe(), "worker"], stdout=log, stderr=subprocess.STDOUT,
                              env=cli_env(settings.home, SWITCHBOARD_REDIS_URL=restartable_redis.url))
    try:
        for url, hub in serve_in_thread(settings):
            live = LiveApp(url, hub, world)
            body = (CASES / "github" / "issues.opened.json").read_bytes()
            first = live.post_hook(body, github_headers(body, world.secret)).json()["delivery_id"]

            def processed(delivery_id: str) -> bool:
                with hub.db.read() as s:
                    return s.get(Delivery, delivery_id).status == "processed"

            wait_for(lambda: processed(first), timeout=60)
            # A burst keeps the worker inside jobs (and rq's bookkeeping around them) when Redis goes.
            bodies = [body.replace(b'"number": 1,', f'"number": {100 + i},'.encode(), 1) for i in range(600)]
            sender = threading.Thread(target=lambda: [live.post_hook(b, github_headers(b, world.secret))
                                                      for b in bodies], daemon=True)
            sender.start()
            wait_for(lambda: _count_processed(hub) >= 30, timeout=60)
            restartable_redis.kill()
            time.sleep(1.0)
            restartable_redis.start()
            sender.join(timeout=120)
            time.sleep(3.0)
            second_body = body.replace(b'"number": 1,', b'"number": 2,', 1)
            assert second_body != body
            resp = live.post_hook(second_body, github_headers(second_body, world.secret))
            assert resp.status_code == 202, resp.text
            second = resp.json()["delivery_id"]
            wait_for(lambda: processed(second) or worker.poll() is not None, timeout=60)
            assert worker.poll() is None, (tmp_path / "worker.log").read_text()[-3000:]
            assert processed(second)
    finally:
        worker.terminate()
        try:
            worker.wait(timeout=20)
        except subprocess.TimeoutExpired:
            worker.kill()
        log.close()


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


def test_a_worker_whose_rq_quits_on_a_redis_error_starts_again(restartable_redis: RestartableRedis,
                                                               tmp_path: Path) -> None:
    settings = Settings(home=tmp_path / "hub", redis_url=restartable_redis.url, sweep_interval_seconds=600)
    world = configure(settings)
    log_path = tmp_path / "worker.log"
    with log_path.open("w") as log:
        worker = subprocess.Popen([sys.executable, "-c", FLAKY_WORKER, "dequeue"], stdout=log,
                                  stderr=subprocess.STDOUT,
                                  env=cli_env(settings.home, SWITCHBOARD_REDIS_URL=restartable_redis.url))
    try:
        for url, hub in serve_in_thread(settings):
            live = LiveApp(url, hub, world)
            body = (CASES / "github" / "issues.opened.json").read_bytes()
            live.post_hook(body, github_headers(body, world.secret))  # its job meets the "lost" Redis
            wait_for(lambda: "starts in" in log_path.read_text() or worker.poll() is not None, timeout=60)
            assert worker.poll() is None, log_path.read_text()[-3000:]
            second = body.replace(b'"number": 1,', b'"number": 2,', 1)
            delivery_id = live.post_hook(second, github_headers(second, world.secret)).json()["delivery_id"]

            def processed() -> bool:
                with hub.db.read() as s:
                    return s.get(Delivery, delivery_id).status == "processed"

            wait_for(lambda: processed() or worker.poll() is not None, timeout=60)
            assert processed(), log_path.read_text()[-3000:]
        assert "worker: rq stopped on an error; a new rq worker starts in 1 s" \
            in log_path.read_text()
        worker.send_signal(signal.SIGTERM)  # a warm shutdown still ends it
        assert worker.wait(timeout=30) == 0, log_path.read_text()[-3000:]
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()


def _flaky_worker(mode: str, settings: Settings, redis_url: str, log_path: Path) -> subprocess.Popen[bytes]:
    with log_path.open("w") as log:
        return subprocess.Popen([sys.executable, "-c", FLAKY_WORKER, mode], stdout=log, stderr=subprocess.STDOUT,
                                env=cli_env(settings.home, SWITCHBOARD_REDIS_URL=redis_url))


def test_a_worker_waits_out_a_redis_that_stays_away(restartable_redis: RestartableRedis, tmp_path: Path) -> None:
    # Review: building the new rq worker talks to Redis; with Redis still away one second after
    # rq quit, that raised out of run_worker and the worker exited after all.
    settings = Settings(home=tmp_path / "hub", redis_url=restartable_redis.url, sweep_interval_seconds=600)
    world = configure(settings)
    log_path = tmp_path / "worker.log"
    worker = _flaky_worker("dequeue", settings, restartable_redis.url, log_path)
    try:
        for url, hub in serve_in_thread(settings):
            live = LiveApp(url, hub, world)
            body = (CASES / "github" / "issues.opened.json").read_bytes()
            live.post_hook(body, github_headers(body, world.secret))
            wait_for(lambda: "starts in" in log_path.read_text() or worker.poll() is not None, timeout=60)
            restartable_redis.kill()  # away before the new rq worker is built, for 4 s
            time.sleep(4.0)
            assert worker.poll() is None, log_path.read_text()[-3000:]
            restartable_redis.start()
            second = body.replace(b'"number": 1,', b'"number": 2,', 1)
            resp = live.post_hook(second, github_headers(second, world.secret))
            assert resp.status_code == 202, resp.text
            delivery_id = resp.json()["delivery_id"]

            def processed() -> bool:
                with hub.db.read() as s:
                    return s.get(Delivery, delivery_id).status == "processed"

            wait_for(lambda: processed() or worker.poll() is not None, timeout=60)
            assert processed(), log_path.read_text()[-3000:]
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(timeout=30) == 0, log_path.read_text()[-3000:]
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()


def test_a_stop_during_the_wait_after_rq_quit_mid_job_ends_the_worker(restartable_redis: RestartableRedis,
                                                                      tmp_path: Path) -> None:
    # Review: rq quit in the middle of a job, its state still busy, so a SIGTERM during the wait
    # only set a flag of that rq worker; a new one started and ran on.
    settings = Settings(home=tmp_path / "hub", redis_url=restartable_redis.url, sweep_interval_seconds=600)
    world = configure(settings)
    log_path = tmp_path / "worker.log"
    worker = _flaky_worker("busy", settings, restartable_redis.url, log_path)
    try:
        for url, hub in serve_in_thread(settings):
            live = LiveApp(url, hub, world)
            body = (CASES / "github" / "issues.opened.json").read_bytes()
            live.post_hook(body, github_headers(body, world.secret))
            wait_for(lambda: "starts in" in log_path.read_text() or worker.poll() is not None, timeout=60)
            worker.send_signal(signal.SIGTERM)
            assert worker.wait(timeout=20) == 0, log_path.read_text()[-3000:]
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
