"""Where processing runs: an in-process worker thread, or rq jobs on Redis (DESIGN.md §3).

The dispatcher does not know the job: the hub (:mod:`switchboard.hub`) composes it with
:mod:`switchboard.queue.jobs`, and rq jobs name :data:`RQ_JOB` by its import path.
"""

from __future__ import annotations

import itertools
import logging
import queue as stdqueue
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, Protocol, TypeVar

log = logging.getLogger(__name__)
RQ_QUEUE = "switchboard"
RQ_JOB = "switchboard.worker.rq_process_deliveries"
"""The rq job's import path: a list of delivery ids in, processed by the worker process's hub in
one transaction (``switchboard.worker.rq_process_delivery``, one id, still runs jobs queued by
an earlier version)."""
RQ_BATCH = 16
"""Delivery ids per rq job at most: one job per hand-off (the ids of every writer commit since
the previous one, :data:`RQ_LINGER_SECONDS`), cut into pieces this size so several workers share
a burst (issue 11)."""
RQ_LINGER_SECONDS = 0.02
"""Under load, the rq hand-off waits until this long after the previous one started before it
takes what is waiting (a lone delivery after a quiet spell goes at once), so a job gathers
several writer commits: rq's own bookkeeping costs a worker about 3.7 ms of CPU per job
whatever it holds (a no-op job in a ``SimpleWorker``, in process), against about 1 ms of
processing per delivery. After a hand-off of fewer than :data:`RQ_BUSY_IDS` ids the wait is half
as long. Measured with ``bench/wake.py --rq --workers 2`` (issue 11):

- one job per writer commit (about 9 deliveries at full speed): the workers fell behind the
  acks, full-speed wake p99 172-492 ms;
- a 10 ms wait (2026-12-04/05): 109-210 ms;
- on 2026-12-06, alternated: a 10 ms wait 143-257 ms, 20 ms 132-156 ms (four runs each), the
  workers keeping up (woken 97-99 % of the acked rate against 96-98 %). The 20 ms wait is also
  what lets ``serve`` send rows to its delivery writer sooner
  (:data:`~switchboard.web.writer_child.SEND_EVERY`) without the workers falling behind again;
- but 20 ms after every hand-off added 9 ms to the p50 at 50 deliveries a second (one every
  20 ms, each waiting out part of the previous one's wait): 20-21 against 12-13 ms. Half the
  wait after a small hand-off keeps that rate's deliveries from waiting at all (docs/PERFORMANCE.md)."""
RQ_BUSY_IDS = 4
"""A hand-off of at least this many ids means ids are coming fast: the next waits the whole
:data:`RQ_LINGER_SECONDS`; after a smaller one, half of it."""


class Dispatcher(Protocol):
    """Hands a stored delivery to processing."""

    name: str
    """The job mode: ``inline``, ``process`` or ``rq`` (``/api/v1/health`` says it)."""

    def submit(self, delivery_ids: list[str]) -> None:
        """Schedule processing of stored deliveries (one call per writer commit or sweep: one
        wake-up of the hand-off thread, not one per delivery); must not raise for a transient
        failure (the sweeper retries)."""
        ...

    def close(self) -> None:
        """Stop workers."""
        ...

    def healthy(self) -> bool | None:
        """Whether the processing process is up (``/api/v1/ready``); ``None`` where there is no
        separate process to check."""
        ...

    def wait_ready(self, timeout: float) -> bool:
        """Block until processing can take work (``serve`` waits before it listens), at most
        ``timeout`` seconds; False when it is not ready by then."""
        ...


class InProcess:
    """:meth:`Dispatcher.healthy` and :meth:`Dispatcher.wait_ready` for dispatchers with no
    processing process of their own to wait for or check."""

    def healthy(self) -> bool | None:
        """``None``: nothing to check."""
        return None

    def wait_ready(self, timeout: float) -> bool:
        """Ready at once."""
        return True


BATCH = 8
"""Deliveries processed per write transaction at most (embedded mode)."""


T = TypeVar("T")


def drain(queue: Any, first: T, limit: int) -> tuple[list[T], bool]:
    """``first`` and whatever else ``queue`` holds now, up to ``limit`` items in all.

    Returns:
        ``(batch, stop)``: ``stop`` is True when a ``None`` (the stop signal) was taken; it is
        not part of the batch.
    """
    batch = [first]
    while len(batch) < limit:
        try:
            more = queue.get_nowait()
        except stdqueue.Empty:
            break
        if more is None:
            return batch, True
        batch.append(more)
    return batch, False


class InlineDispatcher(InProcess):
    """Embedded mode: one daemon thread processes deliveries in arrival order, taking every
    waiting delivery (up to :data:`BATCH`, so the receiver's writer never waits long for the lock)
    into one write transaction (issue 11).

    Args:
        process: Processes a list of delivery ids (in one transaction, each alone when that
            fails: :func:`switchboard.queue.jobs.process_all`); must not raise.
    """

    name = "inline"
    """The job mode ``/api/v1/health`` names."""

    def __init__(self, process: Callable[[list[str]], object]) -> None:
        self._process = process
        self._queue: stdqueue.Queue[str | None] = stdqueue.Queue()
        self._thread = threading.Thread(target=self._run, name="switchboard-inline-worker", daemon=True)
        self._thread.start()

    def submit(self, delivery_ids: list[str]) -> None:
        """Queue deliveries for the worker thread."""
        for delivery_id in delivery_ids:
            self._queue.put(delivery_id)

    def _run(self) -> None:
        while True:
            first = self._queue.get()
            if first is None:
                return
            batch, stop = drain(self._queue, first, BATCH)
            self._process(batch)
            if stop:
                return

    def close(self) -> None:
        """Finish queued work, then stop the thread."""
        self._queue.put(None)
        self._thread.join(timeout=10)


ENQUEUE_LOG_SECONDS = 10.0
"""While Redis refuses the hand-off, one warning per this many seconds (with the count)."""


class HandOffPace:
    """When the next rq hand-off may go: :data:`RQ_LINGER_SECONDS` after the previous one
    started, half that after one of fewer than :data:`RQ_BUSY_IDS` ids; at once after a quiet
    spell. Times are ``time.monotonic()`` seconds; the constants are read when a hand-off goes
    (:meth:`went`), so a test may change them before."""

    def __init__(self) -> None:
        self._last = -float("inf")
        self._linger = 0.0

    def wait(self, now: float) -> float:
        """Seconds from ``now`` until a hand-off may go (0.0: it may go now)."""
        return max(0.0, self._last + self._linger - now)

    def went(self, count: int, now: float) -> None:
        """A hand-off of ``count`` ids started at ``now``."""
        self._last = now
        self._linger = RQ_LINGER_SECONDS if count >= RQ_BUSY_IDS else RQ_LINGER_SECONDS / 2


class EnqueueOutage:
    """The log of an enqueue outage, shared by the hand-offs of one process: one line when it
    starts, then one every :data:`ENQUEUE_LOG_SECONDS` with the count of ids not enqueued since
    (a hand-off every 10 ms logged hundreds of lines a second while Redis was down), and one
    when enqueueing works again."""

    def __init__(self) -> None:
        self.logged: float | None = None
        """``time.monotonic()`` of the last line; ``None``: no outage."""
        self.unsent = 0
        """Ids not enqueued since the last line."""

    def left_to_sweeper(self, count: int, reason: str) -> None:
        """``count`` ids were not enqueued (``reason``: the error's class, or why not tried)."""
        self.unsent += count
        now = time.monotonic()
        if self.logged is None or now - self.logged >= ENQUEUE_LOG_SECONDS:
            log.warning("could not enqueue %d deliveries (%s); they stay received and the sweeper hands "
                        "them over again", self.unsent, reason)
            self.logged, self.unsent = now, 0

    def enqueued(self) -> None:
        """A hand-off went through: the outage, if any, is over."""
        if self.logged is not None:
            log.warning("enqueueing works again (%d more deliveries were left to the sweeper meanwhile)",
                        self.unsent)
            self.logged, self.unsent = None, 0


REDIS_TIMEOUT_SECONDS = 5.0
"""A hand-off's limit on connecting to Redis and on each answer, unless it sets its own
(:data:`HANDOFF_TIMEOUT_SECONDS`): no one waits for a hand-off thread, but without a limit a
Redis that stops answering held it, and the sweeper's ``oldest_wait``, for the operating
system's minutes."""


class RqEnqueue:
    """The rq jobs of a hand-off: each delivery an rq job on queue ``switchboard`` with
    retries, :data:`RQ_BATCH` ids a job, one Redis pipeline a hand-off (issue 11).

    Args:
        redis_url: the Redis the rq workers read.
        timeout: seconds to connect and to wait for each of Redis's answers (``None``:
            :data:`REDIS_TIMEOUT_SECONDS`).
        outage: the outage log to share with another hand-off (a new one when ``None``).
    """

    def __init__(self, redis_url: str, timeout: float | None = None, outage: EnqueueOutage | None = None) -> None:
        import redis
        from rq import Queue

        timeout = REDIS_TIMEOUT_SECONDS if timeout is None else timeout
        self._redis = redis.Redis.from_url(redis_url, socket_connect_timeout=timeout, socket_timeout=timeout)
        self._queue = Queue(RQ_QUEUE, connection=self._redis)
        self.outage = outage or EnqueueOutage()

    def oldest_wait(self) -> float | None:
        """Seconds the oldest job in the rq queue has waited for a worker (0.0 when none waits;
        ``None`` when Redis does not answer)."""
        try:
            ids = self._queue.get_job_ids(0, 1)
            if not ids:
                return 0.0
            job = self._queue.fetch_job(ids[0])
            enqueued = job.enqueued_at if job is not None else None
            if enqueued is None:
                return 0.0
            if enqueued.tzinfo is None:
                enqueued = enqueued.replace(tzinfo=UTC)
            return max(0.0, (datetime.now(UTC) - enqueued).total_seconds())
        except Exception:  # noqa: BLE001 - unknown: the caller acts as if nothing waited
            return None

    def enqueue(self, delivery_ids: list[str]) -> bool:
        """Enqueue one :data:`RQ_JOB` job per :data:`RQ_BATCH` ids in one pipeline. Returns False
        when that failed, whatever the error (a refusal, a timeout, an error reply): logged in
        :attr:`outage`; they stay ``received`` and the sweeper hands them over again. (After a
        timeout Redis may have run the pipeline all the same: a delivery processed already is
        skipped by the job the sweep makes again.)"""
        from rq import Retry

        try:
            datas = [_job_data(self._queue, delivery_ids[i:i + RQ_BATCH], Retry)
                     for i in range(0, len(delivery_ids), RQ_BATCH)]
            with self._redis.pipeline() as pipe:
                self._queue.enqueue_many(datas, pipeline=pipe)
                pipe.execute()
        except Exception as exc:  # noqa: BLE001 - stored and acked already; the sweeper re-runs them
            self.outage.left_to_sweeper(len(delivery_ids), type(exc).__name__)
            return False
        self.outage.enqueued()
        return True

    def close(self) -> None:
        """Close the Redis connection."""
        self._redis.close()


class RqDispatcher(RqEnqueue, InProcess):
    """Scaled mode: each delivery becomes an rq job on queue ``switchboard`` with retries.

    ``submit`` only queues the id in memory; a hand-off thread takes every waiting id and
    enqueues them as jobs of up to :data:`RQ_BATCH` ids each with ``Queue.enqueue_many`` in one
    Redis pipeline (one round trip per hand-off, and one rq job per 16 deliveries instead of
    one per delivery: issue 11), at most one hand-off per :data:`RQ_LINGER_SECONDS` under load
    (half that after a small one, :data:`RQ_BUSY_IDS`),
    so neither the event loop nor the delivery writer waits on Redis, and a worker processes a
    job's deliveries in one transaction. An id lost with the
    process (or refused by Redis) is still ``received`` in the database: the sweeper re-sends it.
    The delivery writer process hands off without a thread (:class:`PacedHandOff`).
    """

    MAX_BATCH = 500
    name = "rq"
    """The job mode ``/api/v1/health`` names."""

    def __init__(self, redis_url: str, timeout: float | None = None, outage: EnqueueOutage | None = None) -> None:
        super().__init__(redis_url, timeout, outage)
        self._ids: stdqueue.SimpleQueue[list[str] | None] = stdqueue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="switchboard-rq-handoff", daemon=True)
        self._thread.start()

    def submit(self, delivery_ids: list[str]) -> None:
        """Queue deliveries for the hand-off thread (no I/O)."""
        if delivery_ids:
            self._ids.put(list(delivery_ids))

    def _run(self) -> None:
        pace = HandOffPace()
        while True:
            first = self._ids.get()
            if first is None:
                return
            wait = pace.wait(time.monotonic())
            if wait > 0:  # the previous hand-off was just now: gather more into fewer jobs
                time.sleep(wait)
            lists, stop = drain(self._ids, first, self.MAX_BATCH)
            # Once each: the writer's hand-off and a sweep can name the same delivery.
            ids = list(dict.fromkeys(i for batch in lists for i in batch))
            pace.went(len(ids), time.monotonic())
            self.enqueue(ids)
            if stop:
                return

    def close(self) -> None:
        """Send what is queued, then close the Redis connection."""
        self._ids.put(None)
        self._thread.join(timeout=10)
        super().close()


HANDOFF_TIMEOUT_SECONDS = 0.25
""":class:`PacedHandOff`'s limit, on the writer's thread, on connecting to Redis and on each
answer: the delivery writer waits for its hand-off, so a Redis that stops answering (a network
partition, not a refusal, which fails at once) or answers slowly holds the writes this long,
once, not for the operating system's minutes. A hand-off of 500 ids to a local Redis takes a
few milliseconds."""
HANDOFF_SLOW_SECONDS = 0.005
"""A hand-off on the writer's thread that takes longer than this (a slow or distant Redis, or
one that fails) moves the hand-off to a thread until one there takes no longer; about 1 ms
to a local Redis."""


class _HandOffThread(RqDispatcher):
    """:class:`PacedHandOff`'s hand-off thread, for while Redis fails or is slow: :attr:`fast`
    is set when a hand-off there went through within :data:`HANDOFF_SLOW_SECONDS`."""

    def __init__(self, redis_url: str, outage: EnqueueOutage) -> None:
        self.fast = threading.Event()
        super().__init__(redis_url, outage=outage)

    def enqueue(self, delivery_ids: list[str]) -> bool:
        """As :meth:`RqEnqueue.enqueue`; sets :attr:`fast` when Redis took them quickly."""
        began = time.monotonic()
        done = super().enqueue(delivery_ids)
        if done and time.monotonic() - began <= HANDOFF_SLOW_SECONDS:
            self.fast.set()
        return done


class PacedHandOff:
    """The delivery writer process's rq hand-off, run on that process's one thread: the rule of
    :class:`RqDispatcher` (:class:`HandOffPace`, :data:`RQ_BATCH` ids a job) without its
    hand-off thread.

    The writer calls :meth:`add` with what each commit stored, after answering ``serve``, then
    :meth:`run_due`, and waits for its next rows at most :meth:`wait` seconds. So the hand-off
    runs while the writer would be waiting anyway, and the writer's transactions never wait for
    the interpreter lock behind it. Measured with ``bench/ingest.py``'s ack path (issue 11): with
    the thread, the writer's transactions took turns with the hand-off's Python (rq's job
    objects, redis-py's pipeline: about 36 µs of CPU a delivery under load) and the ack path
    ran at a median 59 % of the bare route, against 65.5 % without it (sixteen runs each,
    alternated; docs/PERFORMANCE.md).

    That holds only while Redis answers fast. A hand-off that fails (a refusal, or no answer
    within :data:`HANDOFF_TIMEOUT_SECONDS`) or takes longer than :data:`HANDOFF_SLOW_SECONDS`
    moves the hand-off to a thread, as with :class:`RqDispatcher` (failures logged as one
    outage, ids not enqueued left ``received`` for the sweeper), until a hand-off there takes no
    longer; then it is back on the writer's thread. So a Redis that stops answering, or answers
    slowly, holds the writes once, for at most about the timeout.
    """

    MAX_BATCH = RqDispatcher.MAX_BATCH
    """Ids a hand-off takes at most; more wait for the next."""

    def __init__(self, redis_url: str) -> None:
        self._url = redis_url
        self._rq = RqEnqueue(redis_url, timeout=HANDOFF_TIMEOUT_SECONDS)
        self._ids: dict[str, None] = {}  # in order, once each
        self._pace = HandOffPace()
        self._thread: _HandOffThread | None = None  # made at the first slow or failed hand-off, then kept
        self._on_thread = False

    @property
    def on_thread(self) -> bool:
        """Whether the ids go to the hand-off thread now (Redis failed or was slow)."""
        return self._on_thread

    def add(self, delivery_ids: list[str]) -> None:
        """Ids the writer stored and answered; handed off by :meth:`run_due` (no I/O here), or
        by the hand-off thread while Redis fails or is slow."""
        thread = self._thread
        if self._on_thread and thread is not None:
            if not thread.fast.is_set():
                thread.submit(delivery_ids)
                return
            self._on_thread = False  # Redis answers quickly again: back on the writer's thread
        for delivery_id in delivery_ids:
            self._ids[delivery_id] = None

    def wait(self) -> float | None:
        """Seconds until what waits is due (0.0: now); ``None`` when nothing waits."""
        if not self._ids:
            return None
        return self._pace.wait(time.monotonic())

    def run_due(self) -> None:
        """Hand off what waits if it is due (:class:`HandOffPace`); else nothing."""
        if self._ids and self._pace.wait(time.monotonic()) == 0:
            self._hand_off()

    def _hand_off(self) -> None:
        ids = list(itertools.islice(self._ids, self.MAX_BATCH))
        for delivery_id in ids:
            del self._ids[delivery_id]
        began = time.monotonic()
        self._pace.went(len(ids), began)
        if self._rq.enqueue(ids) and time.monotonic() - began <= HANDOFF_SLOW_SECONDS:
            return
        if self._thread is None:
            self._thread = _HandOffThread(self._url, self._rq.outage)
        self._thread.fast.clear()
        self._on_thread = True
        rest, self._ids = list(self._ids), {}
        self._thread.submit(rest)

    def close(self) -> None:
        """Hand off what waits, however soon after the previous hand-off, then close Redis."""
        try:
            while self._ids:
                self._hand_off()
        finally:
            if self._thread is not None:
                self._thread.close()  # sends what it holds first
            self._rq.close()


def _job_data(queue: object, delivery_ids: list[str], retry_cls: type) -> object:
    """The rq ``EnqueueData`` for a list of deliveries: retries 1 s, 5 s, 30 s; 300 s timeout;
    failures kept 7 days."""
    return queue.prepare_data(  # type: ignore[attr-defined]
        RQ_JOB, (list(delivery_ids),), timeout=300,
        failure_ttl=7 * 86400, retry=retry_cls(max=3, interval=[1, 5, 30]))
