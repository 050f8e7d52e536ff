"""Where processing runs: an in-process worker thread, or rq jobs on Redis (DESIGN.md §3)."""

from __future__ import annotations

import logging
import queue as stdqueue
import threading
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from switchboard.hub import Hub

log = logging.getLogger(__name__)
RQ_QUEUE = "switchboard"


class Dispatcher(Protocol):
    """Hands a stored delivery to processing."""

    def submit(self, delivery_id: str) -> None:
        """Schedule processing; must not raise for a transient failure (the sweeper retries)."""
        ...

    def close(self) -> None:
        """Stop workers."""
        ...


class InlineDispatcher:
    """Embedded mode: one daemon thread processes deliveries in arrival order."""

    def __init__(self, hub: Hub) -> None:
        self.hub = hub
        self._queue: stdqueue.Queue[str | None] = stdqueue.Queue()
        self._thread = threading.Thread(target=self._run, name="switchboard-inline-worker", daemon=True)
        self._thread.start()

    def submit(self, delivery_id: str) -> None:
        """Queue a delivery for the worker thread."""
        self._queue.put(delivery_id)

    def _run(self) -> None:
        from switchboard.queue.jobs import process_delivery, record_failure

        while True:
            delivery_id = self._queue.get()
            if delivery_id is None:
                return
            try:
                process_delivery(self.hub, delivery_id)
            except Exception as exc:  # noqa: BLE001 - the delivery stays 'received'; the sweeper retries it
                log.warning("processing failed for delivery %s (%s); it will be retried", delivery_id,
                            type(exc).__name__)
                try:
                    record_failure(self.hub, delivery_id, exc)
                except Exception:  # noqa: BLE001 - the database itself is down; the sweeper retries
                    log.warning("could not record the failure of delivery %s", delivery_id)

    def close(self) -> None:
        """Finish queued work, then stop the thread."""
        self._queue.put(None)
        self._thread.join(timeout=10)


class RqDispatcher:
    """Scaled mode: each delivery becomes an rq job on queue ``switchboard`` with retries."""

    def __init__(self, redis_url: str) -> None:
        import redis
        from rq import Queue

        self._redis = redis.Redis.from_url(redis_url)
        self._queue = Queue(RQ_QUEUE, connection=self._redis)

    def submit(self, delivery_id: str) -> None:
        """Enqueue ``rq_process_delivery``; a Redis error leaves the delivery to the sweeper."""
        from rq import Retry

        try:
            self._queue.enqueue("switchboard.queue.jobs.rq_process_delivery", delivery_id,
                                retry=Retry(max=3, interval=[1, 5, 30]), job_timeout=300,
                                failure_ttl=7 * 86400)
        except Exception as exc:  # noqa: BLE001 - stored and acked already; the sweeper re-runs it
            log.warning("could not enqueue delivery %s (%s); the sweeper will", delivery_id, type(exc).__name__)

    def close(self) -> None:
        """Close the Redis connection."""
        self._redis.close()
