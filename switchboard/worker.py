"""``switchboard worker``: a standard rq worker for delivery processing (DESIGN.md §3).

It runs ``rq.SimpleWorker`` (no fork per job, so the database pool is reused) on queue
``switchboard``; failed jobs are retried by rq (``Retry`` set at enqueue) and, past that, the
sweeper in ``serve`` re-dispatches deliveries still ``received``.
"""

from __future__ import annotations

import threading

from switchboard.config import Settings
from switchboard.db import upgrade
from switchboard.hub import Hub
from switchboard.queue.dispatcher import RQ_QUEUE

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
    """Run the worker until stopped (or until the queue is empty with ``burst``)."""
    import redis
    from rq import Queue, SimpleWorker

    assert settings.redis_url
    upgrade(settings)
    hub = Hub(settings, role="worker")
    hub.settle()
    set_worker_hub(hub)
    conn = redis.Redis.from_url(settings.redis_url)
    worker = SimpleWorker([Queue(RQ_QUEUE, connection=conn)], connection=conn)
    try:
        worker.work(burst=burst, with_scheduler=True)
    finally:
        hub.close()
