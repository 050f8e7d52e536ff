"""Channel wakes: a best-effort doorbell for a pending todo (DESIGN.md §6.5).

A wake is rendered from our own fields only: the todo id, queue and the one-line title that
passed the channel-break check at intake. ``meta`` is ``{todo_id, project, queue, kind,
provider}``: snake_case keys, values kept to a small charset, because Claude Code drops other
keys silently, and never ``source``, which Claude Code itself sets on the ``<channel>`` tag to
the ``.mcp.json`` server name (DESIGN.md §6.5; ``notes/mcp-and-channels.md``). The content goes
into the model's context unescaped: invisible and bidi characters are dropped from it
(``cases/channel-break.jsonl``, the RLO case), and it names the tool to call.

Every wake is an :class:`~switchboard.models.AgentEvent` for one session
(:mod:`switchboard.notify.sessions`), written in the transaction that rang it, so a stream that
reconnects with ``Last-Event-ID`` gets the wakes it missed. Re-rings are coalesced: one wake
per session per pass, naming how many todos wait and the oldest, and none to a session woken
within the last :data:`RING_BASE_SECONDS` (issue 10 item 5).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, fields, replace
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import bindparam, func, literal_column, or_, select, update
from sqlalchemy.orm import load_only
from sqlalchemy.orm.attributes import set_committed_value
from sqlmodel import Session

from switchboard.clock import Clock
from switchboard.models import (
    AgentSession,
    Grant,
    Project,
    Source,
    Todo,
    fixed_limit,
    in_state,
    still_in_state,
)
from switchboard.models.work import MAX_RINGS
from switchboard.notify import sessions
from switchboard.prepared import Prepared
from switchboard.text import readable

_META_VALUE = re.compile(r"[^A-Za-z0-9_.:/#@+=-]")
META_KEYS = ("todo_id", "project", "queue", "kind", "provider")


def visible_text(text: str) -> str:
    """``text`` as one line without invisible or bidi characters (:func:`switchboard.text.readable`)."""
    return readable(text)


@dataclass(frozen=True)
class Wake:
    """A wake for one todo (``waiting`` > 1: the oldest of that many), with the agents that may
    take it (best candidate first) and, once routed, the agent, session and event it went to."""

    todo_id: str
    project: str
    queue: str
    kind: str
    provider: str
    title: str
    agent_ids: list[str] = field(default_factory=list)
    waiting: int = 1
    agent_id: str | None = None
    session_id: str | None = None
    event_id: int | None = None
    prev_event_id: int | None = None
    """The id of the event just before this one on its session's stream (what
    :func:`~switchboard.notify.sessions.read_after` would return before it; 0 for none), when
    the transaction that wrote it knew it (:func:`~switchboard.notify.sessions.link`, SQLite
    only); ``None`` otherwise. With it a stream at that position can send the wake without
    reading the ledger again (:meth:`~switchboard.notify.broker.Subscriber.take`)."""
    event_text: str | None = None
    """With :attr:`prev_event_id`: the event's data as the stream sends it from the ledger
    (:func:`~switchboard.notify.sessions.event_text`), made where the row was written, so a pushed wake is
    byte for byte the row even when the serving process would render the wake differently (a
    rolling upgrade, another Python's Unicode tables)."""

    @property
    def content(self) -> str:
        """One line naming the tool to call, e.g. ``switchboard: todo td_42 on reviews: PR #482
        opened in acme/api (call todo_claim todo_id=td_42)``."""
        title = visible_text(self.title)
        if self.waiting > 1:
            return (f"switchboard: {self.waiting} todos waiting; oldest todo {self.todo_id} on {self.queue}: "
                    f"{title} (call todo_claim todo_id={self.todo_id}, or todo_list for the rest)")
        return f"switchboard: todo {self.todo_id} on {self.queue}: {title} (call todo_claim todo_id={self.todo_id})"

    @property
    def meta(self) -> dict[str, str]:
        """``{todo_id, project, queue, kind, provider}`` with values in ``[A-Za-z0-9_.:/#@+=-]``."""
        raw = {"todo_id": self.todo_id, "project": self.project, "queue": self.queue, "kind": self.kind,
               "provider": self.provider}
        return {k: _META_VALUE.sub("_", v)[:100] for k, v in raw.items()}

    def event_data(self) -> dict[str, Any]:
        """The stream event's payload: ``{content, meta}``."""
        return {"content": self.content, "meta": self.meta}

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (Redis pub/sub, the processing process's pipe): every field by name,
        ``agent_ids`` a copy.

        Not ``dataclasses.asdict``: its deep copy of every field cost 33 µs a wake against 2.5 µs
        here, about 3 % of an rq worker's CPU per delivery (issue 11)."""
        data = {name: getattr(self, name) for name in _WAKE_FIELDS}
        data["agent_ids"] = list(self.agent_ids)
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Wake:
        """Inverse of :meth:`to_dict` (unknown keys ignored)."""
        known = {k: data[k] for k in cls.__dataclass_fields__ if k in data}
        known.setdefault("provider", data.get("source", "api"))
        return cls(**known)


_WAKE_FIELDS = tuple(f.name for f in fields(Wake))
"""The fields of :class:`Wake`, in order (:meth:`Wake.to_dict`)."""


def recipients(session: Session, project_id: str, assigned: str | None = None) -> tuple[str, list[str]]:
    """The project's name and the agents a wake for it goes to: those with ``work`` on it, oldest
    grant first, or only ``assigned`` while it still has ``work`` (its grant can be revoked)."""
    query = select(Grant.agent_id).where(Grant.project_id == project_id, Grant.role == "work")
    if assigned:
        query = query.where(Grant.agent_id == assigned)
    agents = list(session.execute(query.order_by(Grant.created_at)).scalars().all())
    return session.execute(select(Project.name).where(Project.id == project_id)).scalar_one(), agents


def wake_for(session: Session, todo: Todo, cache: dict[Any, Any] | None = None) -> Wake:
    """Build the (unrouted) wake for a pending todo: to its assigned agent, else every agent with
    ``work`` (:func:`recipients`). ``provider`` is the kind of the todo's source, or ``api`` for
    todos made through the API/CLI.

    ``cache``: a dict kept for one transaction (a :func:`due_rings` pass) holding the recipients
    per project and assignee and the provider per source, so many todos of one project cost
    their reads once."""
    cache = {} if cache is None else cache
    key = ("recipients", todo.project_id, todo.assigned_agent_id)
    if key not in cache:
        cache[key] = recipients(session, todo.project_id, todo.assigned_agent_id)
    project, agents = cache[key]
    provider = None
    if todo.source_id:
        key = ("provider", todo.source_id)
        if key not in cache:
            cache[key] = session.execute(select(Source.provider).where(Source.id == todo.source_id)
                                         ).scalar_one_or_none()
        provider = cache[key]
    return Wake(todo.id, project, todo.queue, todo.kind, provider or "api", todo.title, list(agents))


def route(session: Session, clock: Clock, wake: Wake,
          target: AgentSession | sessions.Target | None = None) -> Wake:
    """Send ``wake`` to ``target`` (or to :func:`sessions.pick` of its agents): write its stream
    event and return it routed. Unrouted (no live session) it is returned as is: the todo waits
    for a pull or for the next attach (DESIGN.md rule 1)."""
    target = target or sessions.pick(session, clock, wake.agent_ids)
    if target is None:
        return wake
    event_id = sessions.emit(session, clock, target.agent_id, target.id, "wake", wake.event_data())
    return replace(wake, agent_id=target.agent_id, session_id=target.id, event_id=event_id)


_TODOS = Todo.__table__  # type: ignore[attr-defined]


def _ring_claim() -> Prepared:
    """``UPDATE todos SET rung_at = :b_now, ring_count = ring_count + 1 WHERE id IN (:b_ids) AND
    state = 'pending' AND ring_count < 8 AND (rung_at IS NULL OR <due again>) RETURNING id``:
    claims for this pass those of a pass's candidates still due a ring, in one statement.

    ``<due again>`` is :func:`_ring_candidates`'s backoff with one cutoff per bucket
    (``b_cut_<seconds>``, each ``b_now`` minus that wait): a todo another pass rang meanwhile has
    ``rung_at`` at that pass's time, inside its backoff, so it is claimed once whichever pass
    comes first, as the per-todo conditional update on ``rung_at`` did. The primary key finds
    each row (``tests/queue/test_lease_plans.py``)."""
    due_again = or_(*(_TODOS.c.ring_count.between(low, high)
                      & (_TODOS.c.rung_at <= bindparam(f"b_cut_{seconds}", type_=_TODOS.c.rung_at.type))
                      for seconds, low, high in _BUCKETS))
    return Prepared(
        update(_TODOS)
        .where(_TODOS.c.id.in_(bindparam("b_ids", expanding=True)),
               still_in_state(_TODOS.c.state, "pending"),
               _TODOS.c.ring_count < literal_column(str(MAX_RINGS)),
               or_(_TODOS.c.rung_at.is_(None), due_again))
        .values(rung_at=bindparam("b_now", type_=_TODOS.c.rung_at.type), ring_count=_TODOS.c.ring_count + 1)
        .returning(*_CLAIMED), _CLAIMED, "b_ids")


_CLAIMED = [_TODOS.c.id, _TODOS.c.project_id, _TODOS.c.assigned_agent_id, _TODOS.c.ring_count]
"""What :data:`_RING_CLAIM` returns of each todo it claimed: its recipients as they are now
(candidates read before the write transaction may be stale: reassigned meanwhile), and its ring
count after the claim (1 for a first ring: ``ring_count`` is 0 exactly when ``rung_at`` is
NULL, every reset sets both and every ring adds one to the count)."""


_WAKE_COLUMNS = (Todo.id, Todo.project_id, Todo.queue, Todo.kind, Todo.title, Todo.source_id,
                 Todo.assigned_agent_id, Todo.rung_at, Todo.ring_count, Todo.created_at)
"""What :func:`due_rings` reads of a todo (and :func:`wake_for` of it)."""

RING_BASE_SECONDS = 30
RING_CAP_SECONDS = 900


def ring_after_seconds(rings: int) -> int:
    """Seconds after the ``rings``-th wake before the next re-ring: 30, 60, 120, ... at most 900."""
    return min(RING_BASE_SECONDS * 2 ** max(rings - 1, 0), RING_CAP_SECONDS)


def ring(session: Session, clock: Clock, todo: Todo) -> Wake:
    """Record a wake for ``todo`` now (in the caller's transaction) and return it for publishing."""
    todo.rung_at, todo.ring_count = clock.now(), todo.ring_count + 1
    session.flush()
    return route(session, clock, wake_for(session, todo))


class RingPass(list[Wake]):
    """The wakes of one :func:`due_rings` pass; ``todos`` counts the todos it rang (a todo is
    rung whether or not a session was attached to hear it: the ring count says so)."""

    todos: int = 0


def _backoff_buckets() -> list[tuple[int, int, int]]:
    """``(seconds, lowest ring_count, highest ring_count)`` for each wait of
    :func:`ring_after_seconds` below :data:`MAX_RINGS` rings: (30, 0, 1), (60, 2, 2), ..."""
    buckets: list[tuple[int, int, int]] = []
    for count in range(MAX_RINGS):
        seconds = ring_after_seconds(count)
        if buckets and buckets[-1][0] == seconds:
            buckets[-1] = (seconds, buckets[-1][1], count)
        else:
            buckets.append((seconds, count, count))
    return buckets


_BUCKETS = _backoff_buckets()
_RING_CLAIM = _ring_claim()
_CLAIM_CHUNK = 50
"""Todo ids per :data:`_RING_CLAIM` (a pass has up to 200 candidates; :func:`ring_claim_params`
pads a shorter list to this length)."""


def ring_claim_params(ids: list[str], now: datetime) -> dict[str, Any]:
    """:data:`_RING_CLAIM`'s parameters for ``ids`` (1 to :data:`_CLAIM_CHUNK`) at ``now``. The
    list is padded to :data:`_CLAIM_CHUNK` with its last id (a row is updated and returned once
    however often its id is listed): one SQL text, not one per length, so the pass does not fill
    psycopg's cache of prepared statements (100 a connection) and push out the claims' and
    completes' (a review)."""
    ids = list(ids) + [ids[-1]] * (_CLAIM_CHUNK - len(ids)) if ids else ids
    params: dict[str, Any] = {"b_ids": ids, "b_now": now}
    for seconds, _, _ in _BUCKETS:
        params[f"b_cut_{seconds}"] = now - timedelta(seconds=seconds)
    return params


def _to_ring() -> Any:
    """``state = 'pending' AND ring_count < 8``: the predicate of ``ix_todos_ring`` (migration
    0019), in SQL literals. A partial index serves only a WHERE that repeats its predicate, and
    PostgreSQL's generic plans (psycopg prepares a statement after five runs) cannot match a
    bound parameter against it; SQLite compares the bound value, so either works there."""
    return in_state(Todo.state, "pending") & (Todo.ring_count < literal_column(str(MAX_RINGS)))


def _ring_candidates(query: Any, now: datetime, limit: int) -> list[Any]:
    """Two queries, ``query`` narrowed to the pending todos due a ring: those never rung (made
    or reassigned elsewhere, "rung on the next pass"), then those whose backoff has passed,
    oldest ring first; each at most ``limit`` rows.

    The backoff is in the SQL, one ``rung_at`` cutoff per ``ring_count`` range: a window of
    the oldest rung todos that skipped those still waiting let 200 todos in their backoff hide
    every due one behind them; and the never-rung come first on both databases (PostgreSQL
    sorts NULLs last). Both ride ``ix_todos_ring``: ``rung_at IS NULL``, then a range up to the
    shortest wait's cutoff. The index holds only the pending todos rung fewer than
    :data:`MAX_RINGS` times (migration 0019, :func:`_to_ring`): the todos rung out no longer
    sit, oldest first, in front of every read (40,000 of them: 3.8 ms per idle check on SQLite).
    """
    pending = query.where(_to_ring())
    never = pending.where(Todo.rung_at.is_(None))  # type: ignore[union-attr]
    waited = or_(*(Todo.ring_count.between(low, high) & (Todo.rung_at <= now - timedelta(seconds=seconds))
                   for seconds, low, high in _BUCKETS))
    again = (pending.where(Todo.rung_at <= now - timedelta(seconds=RING_BASE_SECONDS))  # type: ignore[operator]
             .where(waited).order_by(Todo.rung_at))
    return [never.limit(fixed_limit(limit)), again.limit(fixed_limit(limit))]


def rings_due(session: Session, clock: Clock) -> bool:
    """Whether :func:`due_rings` would ring anything (at most two reads of one row's
    ``ring_count``, from ``ix_todos_ring`` alone, in any session: every candidate is due). The
    maintenance pass asks first, in a read, so that a pass with nothing to ring takes no write
    lock (issue 11)."""
    now = clock.now()
    return any(session.execute(query).first() is not None  # the index alone (ix_todos_ring)
               for query in _ring_candidates(select(Todo.ring_count), now, 1))


def ring_candidates(session: Session, clock: Clock, limit: int = 200) -> list[Todo]:
    """The pending todos due a ring now, at most ``limit``: those never rung first, then those
    whose backoff has passed, oldest ring first (:func:`_ring_candidates`). Only the columns a
    wake names: the payload (JSON, kilobytes) and result are not read (issue 11). Any session,
    a read one too: :func:`due_rings` claims each candidate again in its write transaction, so
    the maintenance pass reads them before it takes SQLite's write lock."""
    never, again = _ring_candidates(select(Todo).options(load_only(*_WAKE_COLUMNS)), clock.now(), limit)
    candidates = list(session.execute(never).scalars())
    if len(candidates) < limit:  # the never-rung did not fill the pass: those due again
        candidates += list(session.execute(again).scalars())[:limit - len(candidates)]
    return candidates


def due_rings(session: Session, clock: Clock, limit: int = 200, candidates: list[Todo] | None = None) -> RingPass:
    """Coalesced wakes for pending todos never rung (made by another process) or due a re-ring.

    Each due todo is claimed by a conditional update (the backoff re-checked in it), so many
    processes may call this at once and each todo is counted once. A todo is re-rung at most
    :data:`MAX_RINGS` times. The due todos are grouped by the session they would go to; each
    session gets one wake naming how many wait and the oldest, unless it holds only re-rings and
    was woken within :data:`RING_BASE_SECONDS` (no bursts: issue 10 item 5).

    Args:
        candidates: :func:`ring_candidates` read before this write transaction (detached rows
            are fine); ``None`` reads them here.
    """
    now = clock.now()
    cutoff = now - timedelta(seconds=RING_BASE_SECONDS)
    if candidates is None:
        candidates = ring_candidates(session, clock, limit)
    groups: dict[str, tuple[AgentSession, list[tuple[Todo, Wake, bool]]]] = {}
    live: dict[str, AgentSession | None] = {}
    cache: dict[Any, Any] = {}
    wakes = RingPass()
    # One claiming UPDATE per 50 candidates, and the recipients cached per project: the pass
    # runs in the maintenance write transaction, and with a backlog of pending todos its 200
    # ORM updates and 600 reads held SQLite's one write lock 150-300 ms every 2 s, stalling
    # every acknowledgement meanwhile (issue 11: ack p99 236 ms after a 45,000 burst); with one
    # prepared UPDATE per todo still 37-93 ms, and each pass stalled processing's batch and
    # the deliveries' acks behind it (a 60 s burst at 15 % of the bare route: every batch over
    # 30 ms after the first 30 s overlapped a pass).
    ids = [todo.id for todo in candidates]
    claimed: dict[str, dict[str, Any]] = {}
    for start in range(0, len(ids), _CLAIM_CHUNK):
        claimed.update((row["id"], row) for row in _RING_CLAIM.run(
            session, ring_claim_params(ids[start:start + _CLAIM_CHUNK], now)))
    for todo in candidates:  # each one due (the backoff is in the SQL)
        row = claimed.get(todo.id)
        if row is None:  # rung meanwhile by another pass, or no longer pending
            continue
        # As the row is now (a breaker: a todo reassigned between the read of the candidates
        # and this transaction was rung to its old assignee, and its new one's first ring was
        # spent): without marking the row changed for the session.
        set_committed_value(todo, "project_id", row["project_id"])
        set_committed_value(todo, "assigned_agent_id", row["assigned_agent_id"])
        first = row["ring_count"] == 1
        wakes.todos += 1
        wake = wake_for(session, todo, cache)
        target = None
        for agent_id in wake.agent_ids:
            if agent_id not in live:
                found = sessions.live_sessions(session, clock, agent_id)
                live[agent_id] = found[0] if found else None
            if live[agent_id] is not None:
                target = live[agent_id]
                break
        if target is not None:
            groups.setdefault(target.id, (target, []))[1].append((todo, wake, first))
    for target, items in groups.values():
        recent = target.last_woken_at is not None and target.last_woken_at > cutoff
        if recent and not any(first for _, _, first in items):
            continue
        todo, wake, _ = min(items, key=lambda i: (i[0].created_at, i[0].id))
        wakes.append(route(session, clock, replace(wake, waiting=len(items)), target))
    return wakes


def _eligible_parts(agent_id: str) -> tuple[Any, Any]:
    """The pending todos ``agent_id`` may take: those assigned to it, and the unassigned ones of
    the projects where it has ``work`` (each half read through its own index by :func:`waiting_for`)."""
    work = select(Grant.project_id).where(Grant.agent_id == agent_id, Grant.role == "work")
    pending = in_state(Todo.state, "pending")
    return (pending & (Todo.assigned_agent_id == agent_id),
            pending & Todo.assigned_agent_id.is_(None) & Todo.project_id.in_(work))  # type: ignore[union-attr,attr-defined]


def _eligible(agent_id: str) -> Any:
    return or_(*_eligible_parts(agent_id))


def waiting_for(session: Session, agent_id: str, cap: int = 1000) -> tuple[Todo | None, int]:
    """The oldest pending todo the agent may take (assigned to it, or unassigned in a project
    where it has ``work``) and how many there are (counted up to ``cap``).

    Two reads, each through its own index (issue 11): the todos assigned to the agent through
    ``ix_todos_assigned`` (migration 0021), the unassigned ones of its projects through
    ``ix_todos_claim_any``. As one ``OR``, SQLite and PostgreSQL read every pending todo of every
    project for each stream attach (17 ms with 20,000 pending in a project the agent cannot see).
    """
    parts = _eligible_parts(agent_id)
    firsts = [session.execute(select(Todo.created_at, Todo.id).where(part).order_by(Todo.created_at, Todo.id)
                              .limit(fixed_limit(1))).first() for part in parts]
    found = [first for first in firsts if first is not None]
    if not found:
        return None, 0
    oldest = session.get(Todo, min(found)[1])
    count = sum(session.execute(select(func.count()).select_from(
        select(Todo.id).where(part).limit(fixed_limit(cap)).subquery())).scalar_one() for part in parts)
    return oldest, min(int(count), cap)


def _mark_rung(agent_id: str, now: datetime) -> Any:
    """``UPDATE todos`` of the never-rung todos ``agent_id`` may take: rung now, once. Through
    ``ix_todos_ring`` (:func:`_to_ring`; a never-rung todo has ``ring_count = 0``): without the
    index's predicate repeated, PostgreSQL read the whole table in the write transaction of
    every stream attach (20,000 todos: 4.6 against 0.6 ms)."""
    return (update(Todo).where(_eligible(agent_id), _to_ring(), Todo.rung_at.is_(None))  # type: ignore[union-attr]
            .values(rung_at=now, ring_count=Todo.ring_count + 1)
            .execution_options(synchronize_session=False))


def attach_ring(session: Session, clock: Clock, agent_id: str, session_id: str) -> Wake | None:
    """On attach, one wake to the new session for the todos already waiting (issue 18 item 3):
    the oldest, and how many. Budgeted: none when the session was woken within
    :data:`RING_BASE_SECONDS` (a stream re-opened by the same adapter), none when nothing waits."""
    target = session.get(AgentSession, session_id)
    if target is None or target.agent_id != agent_id:
        return None
    if target.last_woken_at is not None and target.last_woken_at > clock.now() - timedelta(seconds=RING_BASE_SECONDS):
        return None
    oldest, count = waiting_for(session, agent_id)
    if oldest is None:
        return None
    # The wake names them all: the reaper must not ring them again as new (one statement).
    session.execute(_mark_rung(agent_id, clock.now()))
    session.refresh(oldest)
    return route(session, clock, replace(wake_for(session, oldest), waiting=count), target)
