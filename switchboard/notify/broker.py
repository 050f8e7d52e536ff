"""The broker: carries wakes to the agent streams attached to this or another process.

- :class:`AgentStreams` holds this process's attached streams, one per session id (a new
  stream of a session replaces the old one at once). Events live in the ledger
  (:mod:`switchboard.notify.sessions`); the broker only nudges the stream that holds the
  target session to read them (DESIGN.md §6.5).
- :class:`LocalBroker` (embedded mode) hands wakes straight to the local streams.
- :class:`RedisBroker` (scaled mode) publishes on Redis pub/sub; every ``serve`` process
  listens and offers the wake to its own streams.
- :class:`InboxWaiters` holds the ``inbox_wait`` calls parked in this process (an
  ``asyncio.Event`` each, no thread); ``publish_inbox(agent_id)`` rings them in-process or, over
  Redis (channel ``switchboard:inbox``), in every ``serve`` process (DESIGN.md §6.3).

A wake is a doorbell: losing one loses nothing, the todo stays pending and listable.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
from collections import deque
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Protocol

from switchboard.errors import RateLimited
from switchboard.notify.wakes import Wake

log = logging.getLogger(__name__)
WAKE_CHANNEL = "switchboard:wakes"
INBOX_CHANNEL = "switchboard:inbox"
EVENT_CHANNEL = "switchboard:agent-events"
PUSH_LIMIT = 1000
"""Pushed wakes a stream holds before the oldest is dropped (:meth:`Subscriber.push`)."""


@dataclass(eq=False)
class Subscriber:
    """One attached agent stream (an open ``/api/v1/agent/stream``) holding ``session_id``.

    The stream reads its events from the ledger (:mod:`switchboard.notify.sessions`);
    :meth:`nudge` only says "look", from any thread. :meth:`push` hands it a committed wake
    that names the event before it on the stream (``prev_event_id``): :meth:`take` gives such
    wakes to a stream already at that position without a read of the ledger, and asks for a read
    whenever anything else may lie in between. :meth:`close` ends the stream (it was replaced by
    a newer stream of the same session).
    """

    agent_id: str
    loop: asyncio.AbstractEventLoop
    session_id: str = ""
    stream_id: str = ""
    ready: asyncio.Event = field(default_factory=asyncio.Event)
    closed: bool = False
    _pushed: deque[tuple[int, int, str, str]] = field(default_factory=lambda: deque(maxlen=PUSH_LIMIT))
    _must_read: bool = True  # a fresh stream reads first (a resume, the attach ring)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def nudge(self) -> None:
        """Wake the stream's reader from any thread: it reads the ledger."""
        with self._lock:
            self._must_read = True
        self._wake()

    def push(self, event_id: int, prev_event_id: int, kind: str, data: str) -> None:
        """Hand the stream the committed event ``event_id`` (``kind``, ``data`` as JSON text, as
        the ledger holds it), the event before it on this session's stream being
        ``prev_event_id``; from any thread. At most :data:`PUSH_LIMIT` wait: an older one
        dropped is a gap, which :meth:`take` turns into a read."""
        with self._lock:
            self._pushed.append((event_id, prev_event_id, kind, data))
        self._wake()

    def look(self) -> None:
        """On the stream's own loop: read the ledger on the next pass (a nudge may have been lost)."""
        with self._lock:
            self._must_read = True
        self.ready.set()

    def take(self, position: int) -> tuple[list[tuple[int, str, str]], bool]:
        """On the stream's loop: the pushed events that follow ``position`` with nothing
        between (each one's ``prev_event_id`` at or below the position reached), in order, and
        whether the ledger must be read after them (a nudge came, or a pushed event does not
        follow on). Events at or below the position were sent already and are dropped.

        Returns:
            ``([(event id, kind, JSON data), ...], read)``.
        """
        with self._lock:
            read, self._must_read = self._must_read, False
            pushed = list(self._pushed)
            self._pushed.clear()
        ready: list[tuple[int, str, str]] = []
        for event_id, prev_event_id, kind, data in pushed:
            if event_id <= position:
                continue
            if prev_event_id > position:  # something between: the read finds it, and this one
                return ready, True
            ready.append((event_id, kind, data))
            position = event_id
        return ready, read

    def _wake(self) -> None:
        try:
            self.loop.call_soon_threadsafe(self.ready.set)
        except RuntimeError:  # the loop closed: the stream is gone
            pass

    def close(self) -> None:
        """Ask the stream to end (from any thread)."""
        self.closed = True
        self.nudge()


class AgentStreams:
    """This process's attached streams, by session id (one stream per session: a new one replaces
    the old at once, issue 18 item 2)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_session: dict[str, Subscriber] = {}
        self._reserved: dict[str, int] = {}

    def reserve(self, agent_id: str, limit: int) -> bool:
        """Hold a place for a stream of ``agent_id`` about to attach (its session is opened in
        the database first); ``False`` when ``limit`` streams of the agent are attached or held
        here. A place is given back by :meth:`attach` (``reserved=True``) or :meth:`unreserve`.
        (Counting only attached streams let nine streams opened at the same moment all pass a
        limit of eight: a new-user run.)"""
        with self._lock:
            if self._places_taken(agent_id) >= limit:
                return False
            self._reserved[agent_id] = self._reserved.get(agent_id, 0) + 1
            return True

    def unreserve(self, agent_id: str) -> None:
        """Give back a place held by :meth:`reserve` (the stream will not attach)."""
        with self._lock:
            self._release(agent_id)

    def _places_taken(self, agent_id: str) -> int:
        """Streams of ``agent_id`` attached or reserved here (call under the lock)."""
        attached = sum(1 for s in self._by_session.values() if s.agent_id == agent_id)
        return attached + self._reserved.get(agent_id, 0)

    def _release(self, agent_id: str) -> None:
        left = self._reserved.get(agent_id, 0) - 1
        if left > 0:
            self._reserved[agent_id] = left
        else:
            self._reserved.pop(agent_id, None)

    def attach(self, sub: Subscriber, reserved: bool = False, limit: int | None = None) -> Subscriber | None:
        """Register a stream (taking the place it reserved, if ``reserved``); return the stream it
        replaced (already told to close), if any.

        Raises:
            RateLimited: not ``reserved``, the session is no longer held here (the stream it was
                to replace ended meanwhile) and ``limit`` streams of the agent are attached or
                reserved: a replacement that took no place would make one too many (a review).
        """
        with self._lock:
            if reserved:
                self._release(sub.agent_id)
            elif limit is not None and sub.session_id not in self._by_session \
                    and self._places_taken(sub.agent_id) >= limit:
                raise RateLimited(f"this agent already has {limit} open streams; close one first")
            old = self._by_session.get(sub.session_id)
            self._by_session[sub.session_id] = sub
        if old is not None and old is not sub:
            old.close()
            return old
        return None

    def detach(self, sub: Subscriber) -> None:
        """Forget a stream (it closed) unless a newer one holds its session."""
        with self._lock:
            if self._by_session.get(sub.session_id) is sub:
                del self._by_session[sub.session_id]

    def holds(self, session_id: str) -> bool:
        """True when a stream here holds ``session_id``."""
        with self._lock:
            return session_id in self._by_session

    def count(self, agent_id: str | None = None) -> int:
        """How many streams are attached here (for one agent, or all)."""
        with self._lock:
            return sum(1 for s in self._by_session.values() if agent_id is None or s.agent_id == agent_id)

    def sessions(self, agent_id: str) -> list[str]:
        """The session ids of ``agent_id`` attached here."""
        with self._lock:
            return [sid for sid, s in self._by_session.items() if s.agent_id == agent_id]

    def nudge(self, agent_id: str, session_id: str | None) -> bool:
        """Tell the stream of ``session_id`` (or every stream of the agent for ``None``) that an
        event waits in the ledger. Returns True when a stream here was nudged."""
        with self._lock:
            if session_id is not None:
                targets = [s for s in (self._by_session.get(session_id),) if s is not None and s.agent_id == agent_id]
            else:
                targets = [s for s in self._by_session.values() if s.agent_id == agent_id]
        for sub in targets:
            sub.nudge()
        return bool(targets)

    def deliver(self, wake: Wake) -> bool:
        """Nudge the stream a routed ``wake`` was written for (see :func:`wakes.route`); a wake
        that names the event before it (``prev_event_id``) is pushed to it instead
        (:meth:`Subscriber.push`). Returns True when a stream here holds its session."""
        if wake.agent_id is None:
            return False
        if wake.prev_event_id is None or wake.event_id is None or wake.session_id is None \
                or wake.event_text is None:
            return self.nudge(wake.agent_id, wake.session_id)
        with self._lock:
            sub = self._by_session.get(wake.session_id)
        if sub is None or sub.agent_id != wake.agent_id:
            return False
        # The ledger row's own text, made where it was written (sessions.link).
        sub.push(wake.event_id, wake.prev_event_id, "wake", wake.event_text)
        return True


class InboxWaiters:
    """``inbox_wait`` calls parked in this process, by agent: one ``asyncio.Event`` each.

    :meth:`ring` may be called from any thread; it sets the events on their own loops.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_agent: dict[str, set[tuple[asyncio.AbstractEventLoop, asyncio.Event]]] = {}
        self.closing = False
        """Set by :meth:`close`: the process is stopping; every wait answers now."""

    def close(self) -> None:
        """The process is stopping: ring every waiter, and every wait (parked or to come) answers
        with what has resolved, ``timed_out`` when nothing has, instead of holding the shutdown
        for up to its 60 s (README, "Operations", Stopping)."""
        with self._lock:
            self.closing = True
            agents = list(self._by_agent)
        for agent_id in agents:
            self.ring(agent_id)

    def register(self, agent_id: str) -> tuple[asyncio.AbstractEventLoop, asyncio.Event]:
        """Park a waiter for ``agent_id`` on the running loop; pair with :meth:`unregister`."""
        waiter = (asyncio.get_running_loop(), asyncio.Event())
        with self._lock:
            self._by_agent.setdefault(agent_id, set()).add(waiter)
        return waiter

    def unregister(self, agent_id: str, waiter: tuple[asyncio.AbstractEventLoop, asyncio.Event]) -> None:
        """Forget a waiter (it returned)."""
        with self._lock:
            waiters = self._by_agent.get(agent_id)
            if waiters is not None:
                waiters.discard(waiter)
                if not waiters:
                    self._by_agent.pop(agent_id, None)

    def ring(self, agent_id: str) -> int:
        """Wake every waiter of ``agent_id`` here; returns how many were rung."""
        with self._lock:
            waiters = list(self._by_agent.get(agent_id, ()))
        for loop, event in waiters:
            try:
                loop.call_soon_threadsafe(event.set)
            except RuntimeError:  # the loop closed: its waiter is gone
                pass
        return len(waiters)

    def count(self) -> int:
        """How many waiters are parked."""
        with self._lock:
            return sum(len(v) for v in self._by_agent.values())


class Broker(Protocol):
    """Publishes wakes after the transaction that made them commits."""

    def publish_wake(self, wake: Wake) -> None:
        """Send ``wake`` towards an attached session, best effort."""
        ...

    def publish_wakes(self, wakes: Sequence[Wake]) -> None:
        """:meth:`publish_wake` each of ``wakes``, in order (a processed batch's, a maintenance
        pass's): one Redis round trip for all of them in scaled mode."""
        ...

    def publish_inbox(self, agent_id: str) -> None:
        """Ring the ``inbox_wait`` calls of ``agent_id`` (one of its items resolved), best effort."""
        ...

    def publish_event(self, agent_id: str, session_id: str | None) -> None:
        """Say "look" to the stream of ``session_id`` (any stream of the agent for ``None``) after
        an :class:`~switchboard.models.AgentEvent` for it committed, best effort."""
        ...

    def close(self) -> None:
        """Stop background listeners."""
        ...


class LocalBroker:
    """Embedded mode: wakes go straight to this process's streams."""

    def __init__(self, streams: AgentStreams, waiters: InboxWaiters | None = None) -> None:
        self.streams = streams
        self.waiters = waiters or InboxWaiters()

    def publish_wake(self, wake: Wake) -> None:
        """Offer the wake to a local session."""
        self.streams.deliver(wake)

    def publish_wakes(self, wakes: Sequence[Wake]) -> None:
        """Offer each wake to a local session, in order."""
        for wake in wakes:
            self.streams.deliver(wake)

    def publish_inbox(self, agent_id: str) -> None:
        """Ring this process's waiters of ``agent_id``."""
        self.waiters.ring(agent_id)

    def publish_event(self, agent_id: str, session_id: str | None) -> None:
        """Nudge the local stream of the session."""
        self.streams.nudge(agent_id, session_id)

    def close(self) -> None:
        """Nothing to stop."""


class RedisBroker:
    """Scaled mode: wakes cross processes on Redis pub/sub (channel ``switchboard:wakes``).

    Args:
        redis_url: the Redis server.
        streams: this process's sessions, or ``None`` in a worker (publish only).
        waiters: this process's parked ``inbox_wait`` calls (rung from ``switchboard:inbox``).
    """

    def __init__(self, redis_url: str, streams: AgentStreams | None, waiters: InboxWaiters | None = None) -> None:
        import redis

        self._redis = redis.Redis.from_url(redis_url)
        self.streams = streams
        self.waiters = waiters or InboxWaiters()
        self._pubsub: Any = None
        self._thread: threading.Thread | None = None
        self._failures = 0
        self._closing = False
        if streams is not None:
            self._pubsub = self._redis.pubsub(ignore_subscribe_messages=True)
            self._pubsub.subscribe(**{WAKE_CHANNEL: self._on_message, INBOX_CHANNEL: self._on_inbox,
                                       EVENT_CHANNEL: self._on_event})
            self._thread = self._pubsub.run_in_thread(sleep_time=0.5, daemon=True,
                                                      exception_handler=self._on_error)

    def _on_message(self, message: dict[str, Any]) -> None:
        with self._handling(WAKE_CHANNEL):
            try:
                data = json.loads(message["data"])
                if not isinstance(data, dict):
                    raise TypeError("a wake is a JSON object")
                wake = Wake.from_dict(data)
            except (ValueError, KeyError, TypeError):
                log.warning("ignored a malformed wake message on %s", WAKE_CHANNEL)
                return
            if self.streams is not None:
                self.streams.deliver(wake)

    def _on_event(self, message: dict[str, Any]) -> None:
        with self._handling(EVENT_CHANNEL):
            try:
                data = json.loads(message["data"])
                agent_id, session_id = str(data["agent_id"]), data.get("session_id")
            except (ValueError, KeyError, TypeError):
                log.warning("ignored a malformed message on %s", EVENT_CHANNEL)
                return
            if self.streams is not None:
                self.streams.nudge(agent_id, None if session_id is None else str(session_id))

    def _on_inbox(self, message: dict[str, Any]) -> None:
        with self._handling(INBOX_CHANNEL):
            data = message.get("data")
            agent_id = data.decode("ascii", "replace") if isinstance(data, bytes) else str(data)
            self.waiters.ring(agent_id)

    @contextmanager
    def _handling(self, channel: str) -> Iterator[None]:
        """Around one message's handling: a message arrived, so Redis is back; an error in the
        handling is logged with its traceback here and the listener goes on. (Escaping to redis-py,
        it reached :meth:`_on_error` and read "lost Redis", with no traceback and a 0.5 s stall;
        found by a review.)"""
        self._failures = 0
        try:
            yield
        except Exception:  # noqa: BLE001 - one message's failure must not stop the listener
            log.exception("could not handle a message on %s", channel)

    def _on_error(self, exc: BaseException, pubsub: Any, thread: Any) -> None:
        # Only Redis's own errors get here (each message's handling catches its own). redis-py
        # retries at once after this handler: back off here (0.5 s doubling to 30 s) so a Redis
        # outage costs one log line per attempt, not thousands a second.
        if self._closing:
            return  # close() shut the connection under the listener: not a lost Redis
        self._failures += 1
        delay = min(0.5 * 2 ** (self._failures - 1), 30.0)
        if self._failures == 1 or self._failures % 10 == 0:
            log.warning("wake listener lost Redis (%s); retrying in %.1fs", type(exc).__name__, delay)
        time.sleep(delay)

    def publish_wake(self, wake: Wake) -> None:
        """Publish to every ``serve`` process; a Redis error loses only the doorbell."""
        try:
            self._redis.publish(WAKE_CHANNEL, json.dumps(wake.to_dict()))
        except Exception as exc:  # noqa: BLE001 - a lost wake loses nothing (DESIGN.md rule 1)
            log.warning("could not publish a wake (%s); the todo stays pending", type(exc).__name__)

    def publish_wakes(self, wakes: Sequence[Wake]) -> None:
        """Publish each wake, in order, in one pipeline (one round trip: issue 11, a worker spent
        about an eighth of its time on one PUBLISH per wake); an error loses only the doorbells."""
        if not wakes:
            return
        try:
            with self._redis.pipeline(transaction=False) as pipe:
                for wake in wakes:
                    pipe.publish(WAKE_CHANNEL, json.dumps(wake.to_dict()))
                pipe.execute()
        except Exception as exc:  # noqa: BLE001 - a lost wake loses nothing (DESIGN.md rule 1)
            log.warning("could not publish %d wakes (%s); the todos stay pending", len(wakes), type(exc).__name__)

    def publish_event(self, agent_id: str, session_id: str | None) -> None:
        """Publish a stream nudge to every ``serve`` process (the event is in the ledger)."""
        try:
            self._redis.publish(EVENT_CHANNEL, json.dumps({"agent_id": agent_id, "session_id": session_id}))
        except Exception as exc:  # noqa: BLE001 - the event is durable; the stream finds it on its next read
            log.warning("could not publish a stream nudge (%s)", type(exc).__name__)

    def publish_inbox(self, agent_id: str) -> None:
        """Publish an inbox resolution to every ``serve`` process; an error loses only the doorbell
        (``inbox_wait`` also re-reads the ledger every few seconds)."""
        try:
            self._redis.publish(INBOX_CHANNEL, agent_id)
        except Exception as exc:  # noqa: BLE001 - the item is durable (DESIGN.md rule 1)
            log.warning("could not publish an inbox signal (%s)", type(exc).__name__)

    def close(self) -> None:
        """Stop the listener thread (waiting up to a second for it), then close the connections.

        The listener is waited for first: closing the pub/sub connection under it raced with its
        read (``ValueError`` in the listener, or ``AttributeError`` out of ``PubSub.close`` that
        broke the app's shutdown when a hub closed right after it started)."""
        self._closing = True
        if self._thread is not None:
            self._thread.stop()
            if self._thread is not threading.current_thread():
                self._thread.join(timeout=1.0)
        if self._pubsub is not None:
            try:
                self._pubsub.close()
            except Exception as exc:  # noqa: BLE001 - closing: the connection is going anyway
                log.debug("closing the wake listener's connection: %s", type(exc).__name__)
        self._redis.close()
