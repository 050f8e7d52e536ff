"""The broker: carries wakes to the agent streams attached to this or another process.

- :class:`AgentStreams` holds this process's attached sessions (one asyncio queue each, fed
  from any thread through ``call_soon_threadsafe``) and unicasts a wake to one session of
  the first eligible agent that has one (DESIGN.md §6.5).
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
import itertools
import json
import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Protocol

from switchboard.notify.wakes import Wake

log = logging.getLogger(__name__)
WAKE_CHANNEL = "switchboard:wakes"
INBOX_CHANNEL = "switchboard:inbox"


@dataclass(eq=False)
class Subscriber:
    """One attached agent session (an open ``/api/v1/agent/stream``)."""

    agent_id: str
    loop: asyncio.AbstractEventLoop
    queue: asyncio.Queue[dict[str, Any]] = field(default_factory=lambda: asyncio.Queue(maxsize=1000))

    def offer(self, message: dict[str, Any]) -> None:
        """Put ``message`` on the session's queue from any thread; drop it when full."""

        def _put() -> None:
            try:
                self.queue.put_nowait(message)
            except asyncio.QueueFull:
                log.warning("agent stream queue full; wake dropped (the todo stays pending)")

        self.loop.call_soon_threadsafe(_put)


class AgentStreams:
    """This process's attached sessions, by agent."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_agent: dict[str, list[Subscriber]] = {}
        self._turn = itertools.count()

    def attach(self, sub: Subscriber) -> None:
        """Register a session."""
        with self._lock:
            self._by_agent.setdefault(sub.agent_id, []).append(sub)

    def detach(self, sub: Subscriber) -> None:
        """Forget a session (its stream closed)."""
        with self._lock:
            subs = self._by_agent.get(sub.agent_id, [])
            if sub in subs:
                subs.remove(sub)
            if not subs:
                self._by_agent.pop(sub.agent_id, None)

    def count(self, agent_id: str | None = None) -> int:
        """How many sessions are attached (for one agent, or all)."""
        with self._lock:
            if agent_id is not None:
                return len(self._by_agent.get(agent_id, []))
            return sum(len(v) for v in self._by_agent.values())

    def deliver(self, wake: Wake) -> bool:
        """Unicast ``wake`` to one session of the first eligible agent attached here.

        Returns:
            True when a session was offered the wake.
        """
        with self._lock:
            for agent_id in wake.agent_ids:
                subs = self._by_agent.get(agent_id)
                if subs:
                    sub = subs[next(self._turn) % len(subs)]
                    break
            else:
                return False
        sub.offer({"event": "wake", "content": wake.content, "meta": wake.meta})
        return True


class InboxWaiters:
    """``inbox_wait`` calls parked in this process, by agent: one ``asyncio.Event`` each.

    :meth:`ring` may be called from any thread; it sets the events on their own loops.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_agent: dict[str, set[tuple[asyncio.AbstractEventLoop, asyncio.Event]]] = {}

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

    def publish_inbox(self, agent_id: str) -> None:
        """Ring the ``inbox_wait`` calls of ``agent_id`` (one of its items resolved), best effort."""
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

    def publish_inbox(self, agent_id: str) -> None:
        """Ring this process's waiters of ``agent_id``."""
        self.waiters.ring(agent_id)

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
        if streams is not None:
            self._pubsub = self._redis.pubsub(ignore_subscribe_messages=True)
            self._pubsub.subscribe(**{WAKE_CHANNEL: self._on_message, INBOX_CHANNEL: self._on_inbox})
            self._thread = self._pubsub.run_in_thread(sleep_time=0.5, daemon=True,
                                                      exception_handler=self._on_error)

    def _on_message(self, message: dict[str, Any]) -> None:
        self._failures = 0
        try:
            wake = Wake.from_dict(json.loads(message["data"]))
        except (ValueError, KeyError, TypeError):
            log.warning("ignored a malformed wake message on %s", WAKE_CHANNEL)
            return
        if self.streams is not None:
            self.streams.deliver(wake)

    def _on_inbox(self, message: dict[str, Any]) -> None:
        self._failures = 0
        data = message.get("data")
        agent_id = data.decode("ascii", "replace") if isinstance(data, bytes) else str(data)
        self.waiters.ring(agent_id)

    def _on_error(self, exc: BaseException, pubsub: Any, thread: Any) -> None:
        # redis-py retries at once after this handler: back off here (0.5 s doubling to 30 s)
        # so a Redis outage costs one log line per attempt, not thousands a second.
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

    def publish_inbox(self, agent_id: str) -> None:
        """Publish an inbox resolution to every ``serve`` process; an error loses only the doorbell
        (``inbox_wait`` also re-reads the ledger every few seconds)."""
        try:
            self._redis.publish(INBOX_CHANNEL, agent_id)
        except Exception as exc:  # noqa: BLE001 - the item is durable (DESIGN.md rule 1)
            log.warning("could not publish an inbox signal (%s)", type(exc).__name__)

    def close(self) -> None:
        """Stop the listener thread."""
        if self._thread is not None:
            self._thread.stop()
        if self._pubsub is not None:
            self._pubsub.close()
        self._redis.close()
