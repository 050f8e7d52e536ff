"""Attached agent sessions and the durable events of their streams (DESIGN.md §6.5, §6.5a).

The agent stream (``/api/v1/agent/stream``) is fed from :class:`~switchboard.models.AgentEvent`
rows, never from memory: an event is written in a transaction (:func:`emit`), the broker then
says "look" to the stream that holds the target session, and the stream reads the rows after
its position (:func:`read_after`). So a stream resumed with ``Last-Event-ID`` gets exactly the
events it missed (no gap, no duplicate), across a hub restart and across processes, and an
event can target one adapter session (the permission relay binds verdicts to the session that
relayed the prompt).

Sessions (:class:`~switchboard.models.AgentSession`) are keyed by the id the client gives at
attach. A row is live while ``seen_at`` is within :data:`LIVE_SECONDS` (streams refresh it on
each heartbeat). Wakes go to the least recently woken live session of the first eligible agent
that has one: a rotation per agent, and a re-ring reaches whichever session is live now
(issue 18 item 1).
"""

from __future__ import annotations

import json
import re
from dataclasses import replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, NamedTuple

from sqlalchemy import bindparam, delete, func, insert, or_, select, update
from sqlmodel import Session

from switchboard.clock import Clock
from switchboard.errors import InvalidArgument
from switchboard.feed.events import settled
from switchboard.models import AgentEvent, AgentSession, fixed_limit
from switchboard.prepared import Prepared

if TYPE_CHECKING:
    from switchboard.notify.wakes import Wake

LIVE_SECONDS = 45  # three missed 15 s heartbeats
EVENT_KEEP_SECONDS = 24 * 3600
STALE_SESSION_SECONDS = 3600
HIDDEN_KINDS = ("doorbell_ring", "doorbell_ack")  # bookkeeping rows, never streamed
SESSION_ID = re.compile(r"^[A-Za-z0-9_.:-]{1,80}$")


def check_session_id(value: str) -> str:
    """Validate a client-given session id.

    Raises:
        InvalidArgument: not 1-80 characters of ``[A-Za-z0-9_.:-]``.
    """
    if not SESSION_ID.match(value):
        raise InvalidArgument("the session id must be 1-80 characters of A-Z a-z 0-9 _ . : -")
    return value


def attach(session: Session, clock: Clock, agent_id: str, session_id: str, stream_id: str) -> None:
    """Record that ``stream_id`` now holds ``session_id`` (replacing any earlier stream of it).

    Raises:
        InvalidArgument: the session id belongs to another agent (the same answer as a bad id:
            no existence oracle).
    """
    now = clock.now()
    row = session.get(AgentSession, session_id)
    if row is None:
        session.add(
            AgentSession(id=session_id, agent_id=agent_id, attached_at=now, seen_at=now, stream_id=stream_id)
        )
    elif row.agent_id != agent_id:
        raise InvalidArgument("the session id must be 1-80 characters of A-Z a-z 0-9 _ . : -")
    else:
        row.stream_id, row.seen_at = stream_id, now
    session.flush()


def touch(session: Session, clock: Clock, session_id: str, stream_id: str) -> bool:
    """Refresh ``seen_at`` for a stream's heartbeat; False when another stream holds the session."""
    moved = session.execute(
        update(AgentSession)
        .where(AgentSession.id == session_id, AgentSession.stream_id == stream_id)
        .values(seen_at=clock.now())
        .execution_options(synchronize_session=False)
    )
    return bool(moved.rowcount)  # type: ignore[attr-defined]


def detach(session: Session, session_id: str, stream_id: str) -> None:
    """Forget the session when ``stream_id`` still holds it (a replaced stream leaves it alone)."""
    session.execute(
        delete(AgentSession).where(AgentSession.id == session_id, AgentSession.stream_id == stream_id)
    )


def live_sessions(session: Session, clock: Clock, agent_id: str) -> list[AgentSession]:
    """The agent's live sessions, least recently woken first."""
    cutoff = clock.now() - timedelta(seconds=LIVE_SECONDS)
    rows = (
        session.execute(
            select(AgentSession).where(AgentSession.agent_id == agent_id, AgentSession.seen_at > cutoff)
        )
        .scalars()
        .all()
    )
    epoch = datetime.min.replace(tzinfo=clock.now().tzinfo)
    return sorted(rows, key=lambda r: (r.last_woken_at or epoch, r.attached_at, r.id))


class Target(NamedTuple):
    """The session a wake goes to."""

    agent_id: str
    id: str


def pick(session: Session, clock: Clock, agent_ids: list[str]) -> Target | None:
    """The session a wake goes to: the least recently woken live session of the first agent in
    ``agent_ids`` (best candidate first) that has one; ``None`` when none is attached."""
    return Picker(session, clock).pick(agent_ids)


def emit(
    session: Session, clock: Clock, agent_id: str, session_id: str | None, kind: str, data: dict[str, Any]
) -> int:
    """Write one stream event (in the caller's transaction) and return its id.

    Args:
        agent_id: whose stream carries it.
        session_id: the one session it is for, or ``None`` for any session of the agent.
        kind: the SSE event name (``wake``, ``doorbell``, ...).
        data: the JSON payload.
    """
    now = clock.now()
    # One INSERT ... RETURNING id (no unit of work, nothing else flushed: issue 11).
    found = _INSERT_EVENT.run(
        session, {"agent_id": agent_id, "session_id": session_id, "kind": kind, "data": data, "created_at": now})
    if session_id is not None:
        _WOKEN.run(session, {"b_session": session_id, "b_now": now})
    return int(found[0]["id"])


_EVENTS = AgentEvent.__table__  # type: ignore[attr-defined]
# Prepared (compiled once, run on the DBAPI cursor): one wake per delivery in processing's
# write transaction (issue 11).
_INSERT_EVENT = Prepared(
    insert(_EVENTS).values({name: bindparam(name, type_=_EVENTS.c[name].type)
                            for name in ("agent_id", "session_id", "kind", "data", "created_at")})
    .returning(_EVENTS.c.id), [_EVENTS.c.id])
_PREVIOUS = Prepared(
    select(_EVENTS.c.id)
    .where(_EVENTS.c.agent_id == bindparam("b_agent"), _EVENTS.c.id < bindparam("b_before"),
           _EVENTS.c.id > bindparam("b_floor"),
           *(_EVENTS.c.kind != kind for kind in HIDDEN_KINDS),
           or_(_EVENTS.c.session_id.is_(None), _EVENTS.c.session_id == bindparam("b_session")))
    .order_by(_EVENTS.c.id.desc()).limit(fixed_limit(1)), [_EVENTS.c.id])
"""The event before ``b_before`` on the stream of session ``b_session``: :func:`read_after`'s
filter (``HIDDEN_KINDS`` as fixed values, not an expanding list), newest first, looking back
no further than ``b_floor``."""
LINK_WINDOW = 1000
"""How far below a wake's id :func:`link` looks for the event before it (ids are shared by all
agents): the read walks the agent's index entries in that range, so a session with no event
for a long while costs at most that many under the write lock, not the agent's whole history
(a review measured 157 ms for 200,000 events of the agent on another session); its wake then
goes as a nudge."""
_SESSIONS = AgentSession.__table__  # type: ignore[attr-defined]
_CHUNK = 32
"""Agent ids per live-session read at most (as ``queue.batch.CHUNK``)."""
_LIVE_COLUMNS = (_SESSIONS.c.agent_id, _SESSIONS.c.id, _SESSIONS.c.last_woken_at, _SESSIONS.c.attached_at)
_LIVE_SESSIONS = Prepared(
    select(*_LIVE_COLUMNS).where(_SESSIONS.c.agent_id.in_(bindparam("b_agents", expanding=True)),
                                 _SESSIONS.c.seen_at > bindparam("cutoff", type_=_SESSIONS.c.seen_at.type)),
    _LIVE_COLUMNS, "b_agents")
"""The live sessions of a batch's wake recipients (:class:`Picker`): prepared, as SQLAlchemy's
per-execution work was most of a one-delivery batch's wake routing (issue 11)."""
_WOKEN = Prepared(
    update(_SESSIONS)
    .where(_SESSIONS.c.id == bindparam("b_session"))
    .values(last_woken_at=bindparam("b_now", type_=_SESSIONS.c.last_woken_at.type))
)


class Picker:
    """:func:`pick` for many wakes in one transaction (a processing batch): each agent's live
    sessions are read once, and a session is moved to the back as soon as it is picked, so the
    batch's wakes go round the sessions least recently woken first, as one :func:`pick` per wake
    would (issue 11: that read was a third of processing)."""

    def __init__(self, session: Session, clock: Clock) -> None:
        self.session, self.clock = session, clock
        self.live: dict[str, list[list[Any]]] = {}

    def pick(self, agent_ids: list[str]) -> Target | None:
        """The session the next wake goes to, or ``None``."""
        missing = [a for a in agent_ids if a not in self.live]
        if missing:
            cutoff = self.clock.now() - timedelta(seconds=LIVE_SECONDS)
            epoch = datetime.min.replace(tzinfo=cutoff.tzinfo)
            for agent_id in missing:
                self.live[agent_id] = []
            # In chunks: one compiled statement per list length, so the lengths stay a bounded set.
            for start in range(0, len(missing), _CHUNK):
                for row in _LIVE_SESSIONS.run(self.session, {"b_agents": missing[start:start + _CHUNK],
                                                             "cutoff": cutoff}):
                    self.live[row["agent_id"]].append([row["last_woken_at"] or epoch, row["attached_at"], row["id"]])
            for entries in self.live.values():
                entries.sort()
        for agent_id in agent_ids:
            entries = self.live[agent_id]
            if entries:
                first = entries.pop(0)
                first[0] = self.clock.now()
                entries.append(first)
                return Target(agent_id, first[2])
        return None


def link(session: Session, wakes: list[Wake]) -> list[Wake]:
    """``wakes`` with :attr:`~switchboard.notify.wakes.Wake.prev_event_id` and
    :attr:`~switchboard.notify.wakes.Wake.event_text` set on each routed one: the id of the
    event before it on its session's stream (0 for none), read in the caller's write
    transaction after its last event is written (one indexed read per wake, backwards, at most
    :data:`LINK_WINDOW` ids down; not found there, both stay ``None`` and the wake goes as a
    nudge), and the event's data as the stream sends it (:func:`event_text`). SQLite only: its
    one writer makes every id below that commit settled and final, so no event can later appear
    between the two; on PostgreSQL ids are not given in commit order, and ``wakes`` are returned
    unchanged (their streams read the ledger, :func:`read_after`).

    Issue 11: a stream that reads the ledger after each nudge waits for a worker thread and
    the event loop twice per batch (a third of the delivery-to-wake time at full speed).
    """
    if not wakes or session.get_bind().dialect.name != "sqlite":
        return wakes
    out = []
    for wake in wakes:
        if wake.event_id is None or wake.agent_id is None or wake.session_id is None:
            out.append(wake)
            continue
        floor = max(wake.event_id - LINK_WINDOW, 0)
        found = _PREVIOUS.run(session, {"b_agent": wake.agent_id, "b_session": wake.session_id,
                                        "b_before": wake.event_id, "b_floor": floor})
        # Not found within the window: unknown (the stream reads); 0 only when no id lies below.
        previous = int(found[0]["id"]) if found else (0 if wake.event_id <= LINK_WINDOW else None)
        text = event_text(wake.event_data()) if previous is not None else None
        out.append(replace(wake, prev_event_id=previous, event_text=text))
    return out


def newest_id(session: Session, agent_id: str) -> int:
    """The id of the agent's newest settled event (0 when none): a fresh stream starts after it."""
    return int(
        session.execute(
            select(func.max(AgentEvent.id)).where(
                AgentEvent.agent_id == agent_id, settled(AgentEvent.id, session)
            )
        ).scalar()
        or 0
    )


def event_text(data: dict[str, Any] | None) -> str:
    """An agent event's ``data`` as its stream sends it (the SSE ``data`` line): one rendering
    for an event read from the ledger (``agent_api._read``) and for a wake pushed from where
    its row was written (:func:`link`), so a pushed wake is byte for byte the row."""
    return json.dumps(data or {})


def read_after(
    session: Session, agent_id: str, session_id: str, after: int, limit: int = 100
) -> list[AgentEvent]:
    """Events for ``session_id`` (or for any session of the agent) with id above ``after``,
    oldest first; never another agent's (DESIGN.md §6.5a). Only settled ids (no transaction
    that could still commit a smaller one is open: :func:`switchboard.feed.events.settled`), so
    a position never passes an event committed late: no gap, on PostgreSQL too."""
    return list(
        session.execute(
            select(AgentEvent)
            .where(
                AgentEvent.agent_id == agent_id,
                AgentEvent.id > after,  # type: ignore[operator]
                settled(AgentEvent.id, session),
                AgentEvent.kind.not_in(HIDDEN_KINDS),  # type: ignore[attr-defined]
                or_(AgentEvent.session_id.is_(None), AgentEvent.session_id == session_id),
            )  # type: ignore[union-attr]
            .order_by(AgentEvent.id)
            .limit(limit)
        )
        .scalars()
        .all()
    )


def prune(session: Session, clock: Clock) -> int:
    """Drop events older than :data:`EVENT_KEEP_SECONDS` and sessions unseen for an hour."""
    events, stale = _prunable(clock)
    gone = session.execute(delete(AgentEvent).where(events))
    session.execute(delete(AgentSession).where(stale))
    return int(gone.rowcount or 0)  # type: ignore[attr-defined]


def _prunable(clock: Clock) -> tuple[Any, Any]:
    now = clock.now()
    return (AgentEvent.created_at < now - timedelta(seconds=EVENT_KEEP_SECONDS),  # type: ignore[operator]
            AgentSession.seen_at < now - timedelta(seconds=STALE_SESSION_SECONDS))  # type: ignore[operator]


def prune_due(session: Session, clock: Clock) -> bool:
    """Whether :func:`prune` has anything to drop (two reads of one row at most, in any session;
    the maintenance pass asks first, in a read: issue 11)."""
    events, stale = _prunable(clock)
    return (session.execute(select(AgentEvent.id).where(events).limit(fixed_limit(1))).first() is not None
            or session.execute(select(AgentSession.id).where(stale).limit(fixed_limit(1))).first() is not None)
