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


def rq_process_deliveries(delivery_ids: list[str]) -> list[str | None]:
    """The rq job (:data:`~switchboard.queue.dispatcher.RQ_JOB`): process a list of deliveries in
    one transaction with this worker process's hub. When the batch fails, each delivery is
    processed alone; a delivery that fails alone has its failure recorded on its row, and the
    job then raises so rq retries it (deliveries already processed are skipped: processing
    takes only what is still ``received``).

    Returns:
        Each delivery's new status (``None`` when it was no longer ``received``).

    Raises:
        RuntimeError: naming how many deliveries failed (their error classes are on their rows).
    """
    from switchboard.queue.jobs import process_batch, process_delivery, record_failure

    hub = worker_hub()
    try:
        return process_batch(hub, list(delivery_ids))
    except Exception:  # noqa: BLE001 - nothing of the batch committed: one at a time finds the bad one
        pass
    statuses: list[str | None] = []
    failed = 0
    for delivery_id in delivery_ids:
        try:
            statuses.append(process_delivery(hub, delivery_id))
        except Exception as exc:  # noqa: BLE001 - recorded on the row; the job is retried below
            record_failure(hub, delivery_id, exc)
            statuses.append(None)
            failed += 1
    if failed:
        raise RuntimeError(f"{failed} of {len(delivery_ids)} deliveries failed processing; rq retries the job")
    return statuses


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
