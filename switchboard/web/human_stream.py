"""``GET /api/v1/stream``: the human stream of feed nudges (DESIGN.md §3, §6.5a; issue 15).

A native async route like the agent stream: no thread is held while it waits. It authenticates
with the web session cookie (the browser's ``EventSource`` sends it) or a human API token
(``Authorization: Bearer sbh_...``), then sends one SSE event per feed event of the projects the
human owns, re-read on every pass so a new or lost ownership counts at once:

    id: 412
    event: feed
    data: {"id": 412, "kind": "todo.created", "project_id": "prj_..."}

The data is a nudge, never the event's content: the page fetches what to show through the
authenticated UI (``/ui/feed/rows?after=``). Event ids are feed ids; a reconnect with
``Last-Event-ID`` (or ``?since=``) resumes exactly after it, with no gap or duplicate; without
either the stream starts at the newest event (no history replay). One past every feed id this
database has given (kept across a restore) starts there too, after an ``event: restart`` whose
id is the new position (the web UI reloads the page on it). Only settled positions are
read (:func:`switchboard.feed.events.settled`: on PostgreSQL, ids below every open
transaction), so an event committed late behind the stream's position is never skipped. A comment heartbeat goes out
every 15 s (``ping``), never with an id. Each pass waits on :data:`switchboard.feed.bell.BELL`
(rung after commits in this process) or :data:`~switchboard.feed.bell.POLL_SECONDS`.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import TYPE_CHECKING, Any

import anyio
from sqlalchemy import func, select
from sse_starlette.sse import EventSourceResponse, ServerSentEvent
from starlette.requests import Request
from starlette.responses import Response

from switchboard import admin
from switchboard.errors import InvalidArgument, SwitchboardError, Unauthenticated
from switchboard.feed.bell import BELL, POLL_SECONDS
from switchboard.feed.events import ahead, settled
from switchboard.mcp_server.callers import bearer
from switchboard.models import FeedEvent
from switchboard.text import whole_number
from switchboard.web import logins
from switchboard.web.problems import from_error, problem

if TYPE_CHECKING:
    from switchboard.hub import Hub

log = logging.getLogger(__name__)
HEARTBEAT_SECONDS = 15
RECHECK_SECONDS = 1.0
"""How often an open stream checks that its token or web session is still valid."""
PAGE = 200
COOKIE_NAME = "switchboard_session"


def human_for_request(hub: Hub, cookie_loader: Any, cookies: dict[str, str], authorization: str | None) -> str:
    """The human id behind a request: a bearer human token, else the signed session cookie.

    Args:
        cookie_loader: ``loads(value) -> dict`` of the Flask app's session serializer.

    Raises:
        Unauthenticated: neither is valid (one message).
    """
    with hub.db.read() as s:
        if authorization:
            return admin.authenticate_human(s, bearer(authorization)).id
        raw = cookies.get(COOKIE_NAME)
        data: dict[str, Any] = {}
        if raw:
            try:
                data = cookie_loader(raw) or {}
            except Exception:  # noqa: BLE001 - a bad signature is the same as no cookie
                data = {}
        return logins.authenticate(s, hub.clock, data.get("sid")).id


def _start(hub: Hub, request: Request) -> int | None:
    raw = request.headers.get("last-event-id") or request.query_params.get("since")
    if raw is None or raw == "":
        return None
    number = whole_number(raw, 18)
    if number is None:
        raise InvalidArgument("Last-Event-ID (or since) must be a feed event id")
    return number


def _position(hub: Hub, start: int | None) -> tuple[int, bool]:
    """``(start, False)``, or ``(newest settled event, restarted)`` when there is no start or it
    is past every feed id ever given (a ``Last-Event-ID`` kept across a restore:
    :func:`switchboard.feed.events.ahead`)."""
    with hub.db.read() as s:
        if start is not None and not ahead(s, start):
            return start, False
        if start is not None:
            log.info("human stream: Last-Event-ID %d is past every feed id given; starting at the newest", start)
        newest = int(s.execute(select(func.max(FeedEvent.id)).where(settled(FeedEvent.id, s))).scalar() or 0)
        return newest, start is not None


def _after(hub: Hub, human_id: str, position: int) -> list[tuple[int, str, str]]:
    with hub.db.read() as s:
        owned = admin.owned_projects(s, human_id)
        if not owned:
            return []
        rows = s.execute(select(FeedEvent.id, FeedEvent.kind, FeedEvent.project_id).where(
            FeedEvent.project_id.in_(owned), FeedEvent.id > position,  # type: ignore[attr-defined,operator]
            settled(FeedEvent.id, s))
            .order_by(FeedEvent.id).limit(PAGE)).all()
    return [(int(r[0]), r[1], r[2]) for r in rows]


async def stream(request: Request) -> Response:
    """``GET /api/v1/stream`` (see the module docstring)."""
    if request.method == "HEAD":  # a stream is read, not probed (a HEAD never ran its cleanup)
        return problem(405, "method_not_allowed", "/api/v1/stream accepts GET only", headers={"Allow": "GET"})
    hub: Hub = request.app.state.hub
    loader = request.app.state.cookie_loader
    try:
        human_id = await anyio.to_thread.run_sync(human_for_request, hub, loader, dict(request.cookies),
                                                  request.headers.get("authorization"))
        start = _start(hub, request)
    except SwitchboardError as exc:
        return from_error(exc)
    except Exception as exc:  # noqa: BLE001 - never a 5xx for a bad cookie
        log.info("human stream refused: %s", type(exc).__name__)
        return from_error(Unauthenticated("sign in first"))
    position, restarted = await anyio.to_thread.run_sync(_position, hub, start)
    cookies, authorization = dict(request.cookies), request.headers.get("authorization")

    def still_signed_in() -> bool:
        try:
            return human_for_request(hub, loader, cookies, authorization) == human_id
        except Exception:  # noqa: BLE001 - revoked token, ended web session, removed human
            return False

    async def events() -> Any:
        nonlocal position
        waiter = BELL.register()
        checked_at = anyio.current_time()
        try:
            yield ServerSentEvent(comment="attached")
            if restarted:  # the page's position is from another timeline: it reloads (ui.js)
                yield ServerSentEvent(event="restart", id=str(position), data=json.dumps({"position": position}))
            while True:
                waiter[1].clear()
                # The credential is checked again at least every RECHECK_SECONDS: a revoked token
                # or a signed-out web session ends the stream (issue 13 item 3, for humans too).
                if anyio.current_time() - checked_at >= RECHECK_SECONDS:
                    checked_at = anyio.current_time()
                    if not await anyio.to_thread.run_sync(still_signed_in):
                        yield ServerSentEvent(event="unauthenticated", data=json.dumps(
                            {"code": "unauthenticated", "message": "this sign-in was revoked or ended"}))
                        return
                rows = await anyio.to_thread.run_sync(_after, hub, human_id, position)
                for event_id, kind, project_id in rows:
                    position = event_id
                    yield ServerSentEvent(id=str(event_id), event="feed",
                                          data=json.dumps({"id": event_id, "kind": kind, "project_id": project_id}))
                if len(rows) == PAGE:
                    continue
                try:
                    await asyncio.wait_for(waiter[1].wait(), timeout=min(POLL_SECONDS, RECHECK_SECONDS))
                except TimeoutError:
                    pass
        finally:
            BELL.unregister(waiter)

    return EventSourceResponse(events(), ping=HEARTBEAT_SECONDS,
                               headers={"X-Accel-Buffering": "no", "Cache-Control": "no-cache"})
