"""``feed_read``: pages of feed events with an explicit or stored cursor (DESIGN.md §6.3, §6.5a).

With ``since`` the read is stateless: events after that id. Without it, each project has the
agent's stored cursor (one per project, and per kinds filter, so a filtered read never skips
events of other kinds for an unfiltered one); a page that delivered events advances the
cursors of the projects it covered in the same transaction, an empty page moves nothing.
``next_since`` is in every page; ``has_more`` says when the limit cut the page.

``cursor`` / ``next_cursor`` (issue 18 item 4) are the same position as ``since`` /
``next_since`` in the opaque form every list shares (:mod:`switchboard.paging`): a read with a
cursor is stateless like one with ``since``. A feed is a tail, so ``next_cursor`` is in every
page, empty ones included: it is where to read from next.
"""

from __future__ import annotations

import hashlib
from typing import Any

from sqlmodel import Session

from switchboard import paging
from switchboard.clock import iso
from switchboard.errors import Conflict, InvalidArgument
from switchboard.feed.events import refuse_ahead, tail
from switchboard.models import FeedEvent
from switchboard.notify import cursors
from switchboard.scope import resolve_projects

DEFAULT_LIMIT = 50
MAX_LIMIT = 200
LIST_NAME = "feed"
_KEY = ("int",)


def cursor_of(position: int) -> str:
    """The opaque cursor of feed position ``position`` (an event id)."""
    return paging.encode(LIST_NAME, (position,), _KEY)


def position_of(cursor: str | None, since: int | None) -> int | None:
    """The explicit position of a read: ``since``, or the one ``cursor`` holds, or None.

    Raises:
        InvalidArgument: both given, or a malformed cursor.
    """
    if cursor is None:
        return since
    if since is not None:
        raise InvalidArgument("give since or cursor, not both")
    return int(paging.decode(cursor, LIST_NAME, _KEY)[0])


def stream_name(kinds: list[str] | None) -> str:
    """The cursor stream of a kinds filter: ``feed`` or ``feed:<16 hex of the sorted kinds>``."""
    if not kinds:
        return cursors.FEED
    return "feed:" + hashlib.sha256(",".join(sorted(set(kinds))).encode()).hexdigest()[:16]


def event_view(event: FeedEvent) -> dict[str, Any]:
    """``{id, project_id, kind, subject_id, title, data, at}`` (``data`` is sanitised at intake)."""
    return {"id": event.id, "project_id": event.project_id, "kind": event.kind, "subject_id": event.subject_id,
            "title": event.title, "data": event.data, "at": iso(event.created_at)}


def read(session: Session, agent_id: str, grants: dict[str, str], *, project: str | None = None,
         kinds: list[str] | None = None, since: int | None = None, limit: int = DEFAULT_LIMIT,
         cursor: str | None = None) -> dict[str, Any]:
    """One page of events in projects the agent may read, oldest first.

    Args:
        session: a write session when ``since`` is None (stored cursors advance).
        since: a feed event id (exclusive); None (and no ``cursor``) uses and advances the
            stored cursors.
        limit: 1..200; over it is ``invalid_argument``, never silently cut.
        cursor: ``next_cursor`` of an earlier page; the same as ``since`` (never both).

    Returns:
        ``{events, next_since, next_cursor, has_more}``.

    Raises:
        NotFound: ``project`` is unknown or not readable. InvalidArgument: bad limit, a
            malformed cursor, both ``since`` and ``cursor``, or a position past every feed id
            given (:func:`switchboard.feed.events.refuse_ahead`).
    """
    if not 1 <= limit <= MAX_LIMIT:
        raise InvalidArgument(f"limit must be 1 to {MAX_LIMIT}")
    since = position_of(cursor, since)
    refuse_ahead(session, since)
    out = _read(session, agent_id, grants, project=project, kinds=kinds, since=since, limit=limit)
    out["next_cursor"] = cursor_of(out["next_since"])
    return out


def _read(session: Session, agent_id: str, grants: dict[str, str], *, project: str | None,
          kinds: list[str] | None, since: int | None, limit: int) -> dict[str, Any]:
    project_ids = resolve_projects(session, grants, project, need_work=False)
    if not project_ids:
        return {"events": [], "next_since": since or 0, "has_more": False}
    stream = stream_name(kinds)
    stored: dict[str, int | None] = {}
    if since is None:
        stored = {pid: cursors.position(session, agent_id, stream, pid) for pid in project_ids}
    # One index range per project and kind, merged by id (events.tail, issue 11).
    starts = {pid: since for pid in project_ids} if since is not None else {p: q or 0 for p, q in stored.items()}
    wanted: list[str | None] = sorted(set(kinds)) if kinds else [None]
    rows = tail(session, [(pid, kind, after) for pid, after in starts.items() for kind in wanted], limit + 1)
    page = rows[:limit]
    if not page:
        floor = since if since is not None else max([p or 0 for p in stored.values()], default=0)
        return {"events": [], "next_since": floor, "has_more": False}
    if since is None:
        newest: dict[str, int] = {}
        for event in page:
            newest[event.project_id] = int(event.id or 0)
        for pid, new in newest.items():
            if not cursors.advance(session, agent_id, stream, pid, stored[pid], new):
                raced = Conflict("another read of this agent moved the stored cursor; read again")
                raced.retryable = True
                raise raced
    return {"events": [event_view(e) for e in page], "next_since": int(page[-1].id or 0),
            "has_more": len(rows) > limit}
