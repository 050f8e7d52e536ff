"""The composition root: settings, database, clock, broker and dispatcher for one process."""

from __future__ import annotations

import gc
import logging
import threading
from collections import Counter
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from switchboard.clock import Clock, SystemClock
from switchboard.config import Settings
from switchboard.db import Database
from switchboard.errors import DependencyUnavailable
from switchboard.notify.broker import AgentStreams, Broker, InboxWaiters, LocalBroker, RedisBroker
from switchboard.queue.dispatcher import Dispatcher, InlineDispatcher, InProcess, RqDispatcher
from switchboard.refusals import RefusalTally
from switchboard.retention import RetentionSchedule, maintain

if TYPE_CHECKING:
    from switchboard.web.ingest import DeliveryWriter, SourceCache
    from switchboard.web.writer_child import ProcessWriter

log = logging.getLogger(__name__)


class Hub:
    """Everything a request or job needs, built once per process from settings.

    Args:
        settings: the process settings.
        clock: injected clock (default: the system clock).
        role: ``serve`` (attached streams, sweeper, and in embedded mode the processing child
            process or inline worker thread, see ``Settings.processing``) or ``worker``
            (rq worker process: publishes wakes, holds no streams) or ``processing`` (the
            processing child process of embedded ``serve``: a worker that leaves the SQLite
            checkpoints to ``serve``) or ``cli``.
    """

    def __init__(self, settings: Settings, clock: Clock | None = None, role: str = "serve") -> None:
        self.settings = settings
        self.clock: Clock = clock or SystemClock()
        self.db = Database(settings)
        install_inbox_effects()
        from switchboard.intake import vault

        vault.load_key_ring(settings)  # create or read the key ring now, not on the first delivery
        vault.attach(self.db, lambda: vault.load_key_ring(settings))  # delivery bodies are sealed at rest
        self.role = role
        self.streams = AgentStreams()
        self.inbox_waiters = InboxWaiters()
        self._inbox_seen: int | None = None  # newest resolution already rung (see reap)
        self._events_seen: int | None = None  # newest agent event already nudged (see reap)
        self.counters: Counter[str] = Counter()
        self.refusals, self.retention = RefusalTally(), RetentionSchedule()  # issue 14: source show, prune
        self._stop = threading.Event()
        self._sweeper: threading.Thread | None = None
        if settings.redis_url:
            self.broker: Broker = RedisBroker(settings.redis_url, self.streams if role == "serve" else None,
                                              self.inbox_waiters)
        else:
            self.broker = LocalBroker(self.streams, self.inbox_waiters)
        if role == "serve":
            from switchboard.queue import jobs  # not at import: the CLI builds a hub per command

            if settings.redis_url:
                self.dispatcher: Dispatcher = RqDispatcher(settings.redis_url)
            elif settings.processing == "process" and clock is None:
                # Embedded mode: processing in a child process with its own interpreter lock
                # (issue 11); an injected clock cannot cross processes, so tests keep the thread.
                from switchboard.feed.bell import BELL
                from switchboard.queue.child import ProcessDispatcher

                self.dispatcher = ProcessDispatcher(
                    type(self), settings, self.broker, BELL.ring,
                    on_restart=lambda: jobs.sweep(self, self.clock.now(), everything=True))
            else:
                self.dispatcher = InlineDispatcher(lambda ids: jobs.process_all(self, ids))
        else:
            self.dispatcher = _NoDispatch()
        self._source_cache: object | None = None
        self._delivery_writer: object | None = None
        if role == "serve" and settings.delivery_writer == "process" and clock is None:
            # The write transactions in a child process with its own interpreter lock (issue 11);
            # started now, so serve can wait for it before it listens. An injected clock cannot
            # cross processes: tests that inject one keep the thread.
            from switchboard.web.writer_child import ProcessWriter

            self._delivery_writer = ProcessWriter(self, self.dispatcher.submit)
        self.warm_up: threading.Thread | None = None
        """Builds the intake rules (about a second) so the first delivery does not wait for them."""
        if role in ("serve", "worker", "processing"):
            if role != "processing":  # one checkpointer per database file: serve's (issue 11)
                self.db.start_checkpointer()  # SQLite: checkpoints outside the writers' COMMITs
            from switchboard.intake.screening import warm_up

            self.warm_up = threading.Thread(target=warm_up, name="switchboard-intake-warm-up", daemon=True)
            self.warm_up.start()

    def settle(self) -> None:
        """Once start-up is done (blocking): wait for :attr:`warm_up`, then move every object
        built so far (models, compiled statements, the intake rules) to the garbage collector's
        permanent generation (``gc.freeze``).

        A full collection otherwise walks them all: in the processing process that was a 74 ms
        pause, inside a write transaction or not, every 1,600 deliveries or so, and 6 % of its
        CPU (issue 11). Objects made later are collected as usual; ``serve``, its processing
        process and ``switchboard worker`` call this once.
        """
        if self.warm_up is not None:
            self.warm_up.join()
        gc.collect()
        gc.freeze()

    @property
    def source_cache(self) -> SourceCache:
        """The receiver's cache of sources and secrets (:mod:`switchboard.web.ingest`)."""
        if self._source_cache is None:
            from switchboard.web.ingest import SourceCache

            self._source_cache = SourceCache(self)
        return self._source_cache  # type: ignore[return-value]

    @property
    def delivery_writer(self) -> DeliveryWriter | ProcessWriter:
        """The grouped delivery writer: a child process's, started with the hub
        (``Settings.delivery_writer``), or a thread started on the first delivery."""
        if self._delivery_writer is None:
            with _worker_lock:
                if self._delivery_writer is None:
                    from switchboard.web.ingest import DeliveryWriter

                    self._delivery_writer = DeliveryWriter(self, self.dispatcher.submit)
        return self._delivery_writer  # type: ignore[return-value]

    def delivery_writer_state(self) -> str | None:
        """The delivery writer process: ``"ok"``, ``"restarting"`` (serve writes meanwhile) or
        ``"stalled"`` (a row unanswered past :data:`switchboard.web.writer_child.ANSWER_SECONDS`
        and no answer since); ``None`` without one (a thread writes)."""
        writer = self._delivery_writer
        if getattr(writer, "healthy", None) is None:
            return None
        return "stalled" if writer.stalled else "ok" if writer.healthy() else "restarting"  # type: ignore[union-attr]

    def start_sweeper(self) -> None:
        """Start the maintenance thread: the delivery sweeper and the lease reaper.

        Both are safe to run in many processes at once (conditional updates), so every
        ``serve`` process runs one.
        """
        if self._sweeper is not None:
            return
        started = self.clock.now()

        def loop() -> None:
            import time

            from switchboard.queue import jobs

            # At start, anything still 'received' from before this process started may be left
            # over from a crash: take it now. Not what this process stored since (the thread may
            # start late): its writer handed those over already, and a second hand-off is a
            # second job. (Another live server's fresh deliveries may be dispatched twice;
            # processing only takes a delivery that is still 'received', so that costs little.)
            try:
                jobs.sweep(self, started, everything=True)
            except DependencyUnavailable as exc:  # the periodic sweep takes them once the database is back
                log.warning("start-up sweep skipped (%s)", exc.message)
            except Exception:  # noqa: BLE001
                log.exception("start-up sweep failed")
            next_sweep = time.monotonic() + self.settings.sweep_interval_seconds
            outage = 0  # maintenance passes failed in a row on an unavailable database
            while True:
                now = time.monotonic()
                try:
                    self.reap()
                    if self._source_cache is not None:
                        self._source_cache.check()  # type: ignore[attr-defined]
                    maintain(self, now)
                    if now >= next_sweep:
                        grace = timedelta(seconds=self.settings.sweep_grace_seconds)
                        jobs.sweep(self, self.clock.now() - grace, redispatch=self._should_redispatch())
                        next_sweep = now + self.settings.sweep_interval_seconds
                except DependencyUnavailable as exc:  # an outage: a line when it starts, no traceback a pass
                    outage += 1
                    if outage == 1 or outage % 30 == 0:
                        log.warning("maintenance pass skipped (%s); retrying every %s s", exc.message,
                                    self.settings.reap_interval_seconds)
                except Exception:  # noqa: BLE001 - keep going; a fault is logged with its traceback
                    log.exception("maintenance pass failed")
                else:
                    outage = 0
                if self._stop.wait(self.settings.reap_interval_seconds):
                    return

        self._sweeper = threading.Thread(target=loop, name="switchboard-maintenance", daemon=True)
        self._sweeper.start()

    def _should_redispatch(self) -> bool:
        """Whether the periodic sweep hands deliveries still ``received`` over again. Not while the
        oldest rq job has waited longer than the sweep's grace period (no worker running, or the
        workers that far behind): the deliveries are most likely in the queued jobs, and each pass
        enqueued the oldest 1,000 once more (a review counted 440 extra jobs in two minutes without
        workers). With workers keeping up, a queue that merely holds fresh jobs does not hold the
        sweep back. A delivery whose job Redis lost is handed over once the backlog is gone."""
        if isinstance(self.dispatcher, RqDispatcher):
            waited = self.dispatcher.oldest_wait()
            if waited is not None and waited > self.settings.sweep_grace_seconds:
                log.info("sweep: the oldest rq job has waited %.0f s for a worker; not handing deliveries "
                         "over again", waited)
                return False
        return True

    def reap(self) -> dict[str, int]:
        """One maintenance pass: expired leases and due retries back to the queue, then wakes
        for pending todos never rung (made by the CLI or another process), re-queued, or due a
        re-ring (DESIGN.md §6.5); inbox items past their expiry decided by ``on_expiry``, and
        ``inbox_wait`` rung for resolutions made in another process without Redis (the CLI).

        Returns:
            Counts: ``expired`` (leases), ``dead_lettered``, ``retried``, ``rung`` (todos),
            ``wakes`` (sent, coalesced), ``inbox_expired`` (items decided on expiry).
        """
        from switchboard.inbox.items import expire_due, expiry_due
        from switchboard.models import Todo
        from switchboard.notify import sessions
        from switchboard.notify.wakes import RingPass, due_rings, ring_candidates, rings_due
        from switchboard.queue.leases import reap, reap_due

        # Asked first in a read, which SQLite's writers do not wait for: a pass with nothing to
        # do held the one write lock 2-11 ms every 2 s under ingest load (its statements share
        # serve's interpreter lock with the event loop), stalling every acknowledgement (issue 11).
        # The todos due a ring are read there too (up to 200 rows): the write transaction only
        # claims them again.
        with self.db.read() as s:
            rings = rings_due(s, self.clock)
            due = (rings or reap_due(s, self.clock) or expiry_due(s, self.clock)
                   or sessions.prune_due(s, self.clock))
            candidates = ring_candidates(s, self.clock) if rings else []
        counts = {"expired": 0, "dead_lettered": 0, "retried": 0}
        wakes, expired_for = RingPass(), []
        if due:
            with self.db.write() as s:
                counts, requeued = reap(s, self.clock)
                for todo_id in requeued:  # re-queued work rings afresh
                    todo = s.get(Todo, todo_id)
                    if todo is not None:
                        todo.rung_at, todo.ring_count = None, 0
                # Re-queued todos are due now: read the candidates again, in this transaction.
                wakes = due_rings(s, self.clock, candidates=None if requeued else candidates)
                expired_for = expire_due(s, self.clock)
                sessions.prune(s, self.clock)
        self.broker.publish_wakes(wakes)
        for agent_id in sorted(set(expired_for) | set(self._resolved_elsewhere())):
            self.broker.publish_inbox(agent_id)
        if self.role == "serve":
            for agent_id, session_id in self._events_elsewhere():
                self.streams.nudge(agent_id, session_id)
        counts["rung"] = wakes.todos  # todos rung (coalesced into len(wakes) wakes)
        counts["wakes"] = len(wakes)
        counts["inbox_expired"] = len(expired_for)  # "expired" is the leases' (it was overwritten)
        from switchboard.inbox import alerts

        alerts.send_due(self)
        return counts

    def after_decision(self, agent_id: str) -> None:
        """After a human resolved an item of ``agent_id``: ring its ``inbox_wait`` and tell its
        streams to look (a permission verdict is an event for the relaying session only, written
        with the decision; DESIGN.md §6.5a). Best effort: the ledger keeps both."""
        self.broker.publish_inbox(agent_id)
        self.broker.publish_event(agent_id, None)

    def _events_elsewhere(self) -> set[tuple[str, str | None]]:
        """Streams with agent events written since the last pass (by the CLI's ``doctor``, or
        another process without Redis): one indexed read; a nudge for an event already
        streamed reads nothing."""
        from sqlalchemy import func, select

        from switchboard.models import AgentEvent, fixed_limit

        with self.db.read() as s:
            if self._events_seen is None:
                self._events_seen = int(s.execute(select(func.max(AgentEvent.id))).scalar() or 0)
                return set()
            rows = s.execute(select(AgentEvent.id, AgentEvent.agent_id, AgentEvent.session_id)
                             .where(AgentEvent.id > self._events_seen).order_by(AgentEvent.id)
                             .limit(fixed_limit(1000))).all()
        if rows:
            self._events_seen = int(rows[-1][0])
        return {(r[1], r[2]) for r in rows}

    def _resolved_elsewhere(self) -> list[str]:
        """Agents with items resolved since the last pass (one indexed read on
        ``resolved_event_id``); rings are harmless when the resolver rang already."""
        from sqlalchemy import func, select

        from switchboard.feed.events import settled
        from switchboard.models import InboxItem

        with self.db.read() as s:
            if self._inbox_seen is None:
                self._inbox_seen = int(s.execute(select(func.max(InboxItem.resolved_event_id)).where(
                    settled(InboxItem.resolved_event_id, s))).scalar() or 0)
                return []
            rows = s.execute(select(InboxItem.agent_id, InboxItem.resolved_event_id)
                             .where(InboxItem.resolved_event_id > self._inbox_seen,
                                    settled(InboxItem.resolved_event_id, s))).all()
        if rows:
            self._inbox_seen = max(int(r[1]) for r in rows)
        return [r[0] for r in rows]

    def close(self) -> None:
        """Stop background threads and close connections."""
        self._stop.set()
        if self._delivery_writer is not None:
            self._delivery_writer.close()  # type: ignore[attr-defined]
        _flush_refusals(self)
        self.dispatcher.close()
        self.broker.close()
        self.db.dispose()


def _flush_refusals(hub: Hub) -> None:
    from switchboard.refusals import flush

    if not hub.refusals:
        return
    try:
        with hub.db.write() as s:
            flush(s, hub.refusals, hub.clock.now())
    except Exception:  # noqa: BLE001 - shutting down; counts are best effort
        log.warning("could not save refusal counts at shutdown")


def install_inbox_effects() -> None:
    """Wire the inbox kinds whose decision reaches up (:mod:`switchboard.inbox.effects`): a
    permission verdict to the relaying session, a friendship from an approved friend request.

    The modules are imported when an item of the kind is resolved, not here: every CLI
    command builds a hub, and most never resolve an item (about 45 ms of imports saved).
    """
    from switchboard.inbox import effects

    def permission_verdict(session: Any, clock: Any, item: Any) -> None:
        from switchboard.inbox.permissions import verdict_event

        verdict_event(session, clock, item)

    def friend_decided(session: Any, clock: Any, item: Any) -> None:
        from switchboard.friends.requests import on_item_resolved

        on_item_resolved(session, clock, item)

    effects.register("permission", on_decided=permission_verdict)
    effects.register("friend", after_resolved=friend_decided)


class _NoDispatch(InProcess):
    name = "none"

    def submit(self, delivery_ids: list[str]) -> None:
        raise RuntimeError("this process does not dispatch deliveries")

    def close(self) -> None:
        pass


_worker_lock = threading.Lock()
