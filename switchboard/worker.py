"""``switchboard worker``: a standard rq worker for delivery processing (DESIGN.md §3).

It runs ``rq.SimpleWorker`` (no fork per job, so the database pool is reused) on queue
``switchboard``; failed jobs are retried by rq (``Retry`` set at enqueue) and, past that, the
sweeper in ``serve`` re-dispatches deliveries still ``received``.
"""

from __future__ import annotations

from switchboard.config import Settings
from switchboard.db import upgrade
from switchboard.hub import Hub, set_worker_hub
from switchboard.queue.dispatcher import RQ_QUEUE


def run_worker(settings: Settings, burst: bool = False) -> None:
    """Run the worker until stopped (or until the queue is empty with ``burst``)."""
    import redis
    from rq import Queue, SimpleWorker

    assert settings.redis_url
    upgrade(settings)
    hub = Hub(settings, role="worker")
    set_worker_hub(hub)
    conn = redis.Redis.from_url(settings.redis_url)
    worker = SimpleWorker([Queue(RQ_QUEUE, connection=conn)], connection=conn)
    try:
        worker.work(burst=burst, with_scheduler=True)
    finally:
        hub.close()
