"""``switchboard worker``: a standard rq worker for delivery processing (DESIGN.md §3).

It runs ``rq.SimpleWorker`` (no fork per job, so the database pool is reused) on queue
``switchboard``; failed jobs are retried by rq (``Retry`` set at enqueue) and, past that, the
sweeper in ``serve`` re-dispatches deliveries still ``received``.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from switchboard.config import Settings
from switchboard.db import upgrade
from switchboard.hub import Hub
from switchboard.queue.dispatcher import RQ_QUEUE

log = logging.getLogger(__name__)

RECONNECT_SECONDS = 1.0
"""Wait before a worker that lost Redis starts again (doubled while Redis stays away)."""
MAX_RECONNECT_SECONDS = 30.0

_worker_hub: Hub | None = None
_worker_lock = threading.Lock()


def worker_hub() -> Hub:
    """The hub of an rq worker process, built from the environment on first use."""
    global _worker_hub
    with _worker_lock:
        if _worker_hub is None:
            _worker_hub = Hub(Settings.from_env(), role="worker")
        return _worker_hub


def set_worker_hub(hub: Hub) -> None:
    """Install the worker hub (``run_worker`` does this before starting rq)."""
    global _worker_hub
    _worker_hub = hub


def rq_process_delivery(delivery_id: str) -> str | None:
    """The rq job (:data:`~switchboard.queue.dispatcher.RQ_JOB`): process one delivery with this
    worker process's hub; a failure is recorded on the row, then re-raised for rq's retries.

    Returns:
        The delivery's new status (``None`` when it was no longer ``received``).
    """
    from switchboard.queue.jobs import process_delivery, record_failure

    hub = worker_hub()
    try:
        return process_delivery(hub, delivery_id)
    except Exception as exc:
        record_failure(hub, delivery_id, exc)
        raise


def rq_process_deliveries(delivery_ids: list[str]) -> None:
    """The rq job (:data:`~switchboard.queue.dispatcher.RQ_JOB`): process a list of deliveries in
    one transaction with this worker process's hub, each alone when that fails
    (:func:`~switchboard.queue.jobs.process_all`, which records a delivery's own failure on its
    row). The job then raises so rq retries it (deliveries already processed are skipped:
    processing takes only what is still ``received``).

    Raises:
        RuntimeError: naming how many deliveries failed (their error classes are on their rows).
    """
    from switchboard.queue.jobs import process_all

    failed = process_all(worker_hub(), list(delivery_ids))
    if failed:
        raise RuntimeError(f"{failed} of {len(delivery_ids)} deliveries failed processing; rq retries the job")


def run_worker(settings: Settings, burst: bool = False) -> None:
    """Run the worker until stopped (or until the queue is empty with ``burst``).

    A worker that loses Redis while running starts again on a new rq worker (waiting
    :data:`RECONNECT_SECONDS`, doubling up to :data:`MAX_RECONNECT_SECONDS` while Redis stays
    away), rather than exiting: rq 2.12 retries a failed dequeue itself, but a connection error
    anywhere else (its heartbeat right after a dequeue, its job bookkeeping, its teardown) ends
    ``Worker.work`` ("found an unhandled exception, quitting"), and processing stopped until
    someone started workers again (issue 11's rq path, found by a review). A job cut short
    that way leaves its deliveries ``received``: the sweeper hands them over again.

    Raises:
        redis.ConnectionError: Redis does not answer at start (the CLI turns it into
            ``dependency_unavailable``), or it is lost during a ``burst`` run.
    """
    import redis
    from rq import Queue, SimpleWorker
    from rq.exceptions import StopRequested

    assert settings.redis_url
    from switchboard.instance import hold_running_lock

    hold_running_lock(settings)  # before it migrates: `migrate --to` refuses while it runs (instance.py)
    upgrade(settings)
    conn = redis.Redis.from_url(settings.redis_url)
    conn.ping()  # a wrong SWITCHBOARD_REDIS_URL is an error now, not a retry loop
    hub = Hub(settings, role="worker")
    hub.settle()
    set_worker_hub(hub)
    level = settings.log_level  # rq's own default is INFO: one line per job

    stop = threading.Event()  # a stop request (SIGTERM, Ctrl-C) reached any rq worker of this loop

    class Worker(SimpleWorker):
        """rq's worker, remembering a stop request: rq raises ``StopRequested`` for one that comes
        while idle without noting it, so ``work`` ends the same way as on an error; and one that
        comes during the wait below reaches the old worker's handler."""

        def request_stop(self, signum: Any, frame: Any) -> None:
            stop.set()
            super().request_stop(signum, frame)

    delay = RECONNECT_SECONDS
    try:
        while True:
            started = time.monotonic()
            try:
                worker = Worker([Queue(RQ_QUEUE, connection=conn)], connection=conn)  # talks to Redis
                worker.work(burst=burst, with_scheduler=True, logging_level=level)
                if burst or stop.is_set():
                    return
                reason = "rq stopped on an error"
            except StopRequested:  # a stop outside rq's own loop (building a worker, its bootstrap)
                return
            except redis.RedisError as exc:
                if stop.is_set():  # asked to stop; Redis only failed rq's goodbye (register_death)
                    log.warning("worker: stopped (Redis: %s)", type(exc).__name__)
                    return
                if burst:
                    raise
                reason = f"lost Redis ({type(exc).__name__})"
            if time.monotonic() - started > MAX_RECONNECT_SECONDS:
                delay = RECONNECT_SECONDS  # it ran a while: this is a new outage
            log.warning("worker: %s; a new rq worker starts in %.0f s", reason, delay)
            try:
                if stop.wait(delay):
                    return
            except StopRequested:  # the old worker's handler, when rq had quit while idle
                return
            delay = min(delay * 2, MAX_RECONNECT_SECONDS)
    finally:
        hub.close()
