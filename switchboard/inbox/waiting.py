"""``inbox_wait``: block until one of the caller's items resolves, holding no thread (DESIGN.md §6.3).

The waiter registers an ``asyncio.Event`` with the hub's :class:`~switchboard.notify.broker.InboxWaiters`
*before* its first read of the ledger (so a resolution between the read and the wait is not
lost), then parks on it. A resolution rings it through ``broker.publish_inbox``; the ledger is
also re-read every :data:`RECHECK_SECONDS` in case a doorbell was lost. Database reads run in
worker threads for milliseconds; the wait itself is on the event loop.
"""

from __future__ import annotations

import functools
import time
from typing import TYPE_CHECKING, Any

import anyio

from switchboard.feed.events import refuse_ahead
from switchboard.inbox import items as inbox
from switchboard.notify import cursors

if TYPE_CHECKING:
    from switchboard.hub import Hub

DEFAULT_SECONDS = 30
MAX_SECONDS = 60
RECHECK_SECONDS = 2.0


def poll(hub: Hub, agent_id: str, since: int | None, *, vetted: bool = False) -> dict[str, Any]:
    """The agent's items resolved after ``since``, or after its stored ``inbox`` cursor.

    Without ``since`` the cursor advances past what is returned, in the same transaction
    (each resolution is returned once); with it the read is stateless.

    Returns:
        ``{resolved: [item view, ...], next_since}``; ``next_since`` is the last resolution's
        feed position, or the starting position when nothing resolved.

    Args:
        vetted: ``since`` was checked against :func:`switchboard.feed.events.refuse_ahead`
            already (by an earlier poll of the same :func:`wait`).

    Raises:
        InvalidArgument: ``since`` past every feed id given (:func:`switchboard.feed.events.refuse_ahead`).
    """
    if since is not None:
        with hub.db.read() as s:
            if not vetted:
                refuse_ahead(s, since)
            rows = inbox.resolved_after(s, agent_id, since)
            return {"resolved": [inbox.view(i) for i in rows],
                    "next_since": int(rows[-1].resolved_event_id or 0) if rows else since}
    with hub.db.write() as s:
        old = cursors.position(s, agent_id, cursors.INBOX)
        rows = inbox.resolved_after(s, agent_id, old or 0)
        if rows and not cursors.advance(s, agent_id, cursors.INBOX, "", old, int(rows[-1].resolved_event_id or 0)):
            rows = []  # another call of this agent returned them first
        return {"resolved": [inbox.view(i) for i in rows],
                "next_since": int(rows[-1].resolved_event_id or 0) if rows else (old or 0)}


async def wait(hub: Hub, agent_id: str, wait_seconds: float = DEFAULT_SECONDS,
               since: int | None = None) -> dict[str, Any]:
    """Return as soon as one of the agent's items resolves, or after ``wait_seconds``.

    Args:
        wait_seconds: 0 .. :data:`MAX_SECONDS`; 0 polls once.
        since: as for :func:`poll`.

    Returns:
        :func:`poll`'s result plus ``timed_out`` (True when nothing resolved in time, or when
        ``serve`` is stopping: :meth:`InboxWaiters.close`; the agent calls again elsewhere).
    """
    deadline = time.monotonic() + wait_seconds
    waiter = hub.inbox_waiters.register(agent_id)
    vetted = False  # ``since`` is checked once, by the first poll
    try:
        while True:
            waiter[1].clear()
            result = await anyio.to_thread.run_sync(functools.partial(poll, hub, agent_id, since, vetted=vetted))
            vetted = True
            remaining = deadline - time.monotonic()
            if result["resolved"] or remaining <= 0 or hub.inbox_waiters.closing:
                result["timed_out"] = not result["resolved"]
                return result
            with anyio.move_on_after(min(remaining, RECHECK_SECONDS)):
                await waiter[1].wait()
    finally:
        hub.inbox_waiters.unregister(agent_id, waiter)
