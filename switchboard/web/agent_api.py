"""Agent-facing async routes used by the channel adapter (DESIGN.md §3, §6.5a).

- ``GET /api/v1/agent/tools``: the tool catalogue (MCP ``Tool`` shapes).
- ``POST /api/v1/agent/tools/<name>``: call a tool with a JSON object of arguments; the body
  is the MCP ``CallToolResult`` (tool errors are ``isError`` results with status 200), with the
  ``notifications`` trailer member when something is pending (DESIGN.md §6.4).
- ``GET /api/v1/inbox/wait?wait_seconds=&since=``: ``inbox_wait`` over REST, returning the
  structured result as JSON (errors as problem details); parked on the broker, no thread.
- ``GET /api/v1/agent/stream``: server-sent events for one session of this agent (wakes,
  doorbell tests; verdicts of the permission relay), read from the ledger with their ids, so
  ``Last-Event-ID`` resumes with no gap and no duplicate (one past every id this database has
  given, kept across a restore, starts a new stream: a ``restart`` event whose id is the new
  position, then the events of this session still in the ledger, which may come again); a
  comment heartbeat every 15 s,
  ``X-Accel-Buffering: no``, ``Cache-Control: no-cache`` (:func:`stream`).

Every route needs ``Authorization: Bearer <agent token>`` (401 problem details otherwise).
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import TYPE_CHECKING, Any

import anyio
from sse_starlette.sse import EventSourceResponse, ServerSentEvent
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from switchboard.errors import InvalidArgument, RateLimited, SwitchboardError
from switchboard.feed.events import ahead
from switchboard.inbox.permissions import start_position
from switchboard.intake import json_shape
from switchboard.mcp_server.callers import SESSION_HEADER, bearer, resolve_caller, session_of
from switchboard.mcp_server.calls import call_tool_async
from switchboard.mcp_server.specs import Caller
from switchboard.mcp_server.tools import TOOLS
from switchboard.models.base import new_id
from switchboard.notify import sessions
from switchboard.notify.broker import Subscriber
from switchboard.notify.wakes import attach_ring
from switchboard.text import whole_number
from switchboard.web.problems import from_error, problem

if TYPE_CHECKING:
    from switchboard.hub import Hub

log = logging.getLogger(__name__)
MAX_ARGUMENT_BYTES = 1024 * 1024
HEARTBEAT_SECONDS = 15
MAX_STREAMS_PER_AGENT = 8  # per process; a replaced stream of the same session does not count
# On PostgreSQL a stream reads only ids below the oldest open transaction (feed.events.settled):
# after a nudge it looks again every RECHECK_SECONDS for RECHECK_WINDOW_SECONDS, so an event
# held back by another transaction still arrives within a fraction of a second of its end.
RECHECK_SECONDS = 0.25
RECHECK_WINDOW_SECONDS = 2.0


async def _caller(request: Request) -> tuple[Hub, Caller]:
    hub: Hub = request.app.state.hub
    token = bearer(request.headers.get("authorization"))
    caller = await anyio.to_thread.run_sync(resolve_caller, hub, token)
    return hub, session_of(caller, token, header=request.headers.get(SESSION_HEADER))


async def list_tools(request: Request) -> Response:
    """``GET /api/v1/agent/tools``."""
    try:
        await _caller(request)
    except SwitchboardError as exc:
        return from_error(exc)
    return JSONResponse({"tools": [t.definition() for t in TOOLS]})


async def invoke_tool(request: Request) -> Response:
    """``POST /api/v1/agent/tools/<name>``."""
    try:
        hub, caller = await _caller(request)
        raw = await request.body()
        if len(raw) > MAX_ARGUMENT_BYTES:
            raise InvalidArgument(f"arguments are over {MAX_ARGUMENT_BYTES} bytes")
        arguments: Any = json_shape.loads(raw) if raw.strip() else {}
    except SwitchboardError as exc:
        return from_error(exc)
    result = await call_tool_async(hub, caller, request.path_params["name"], arguments)
    return JSONResponse(result)


async def inbox_wait(request: Request) -> Response:
    """``GET /api/v1/inbox/wait``: the ``inbox_wait`` tool as plain JSON."""
    from switchboard.web.schemas import InboxWaitQuery, query_args

    try:
        hub, caller = await _caller(request)
        args = query_args(InboxWaitQuery(), _MultiArgs(request.query_params))
    except SwitchboardError as exc:
        return from_error(exc)
    result = await call_tool_async(hub, caller, "inbox_wait", args, with_trailer=False)
    if result.get("isError"):
        body = result["structuredContent"]
        status = {"invalid_argument": 400, "not_found": 404, "unauthenticated": 401}.get(body["code"], 500)
        return problem(status, body["code"], body["message"])
    return JSONResponse(result["structuredContent"])


class _MultiArgs:
    """Starlette query params with Werkzeug's ``getlist``/``get`` shape for :func:`query_args`."""

    def __init__(self, params: Any) -> None:
        self._params = params

    def __iter__(self) -> Any:
        return iter(dict.fromkeys(self._params.keys()))

    def get(self, key: str) -> Any:
        return self._params.get(key)

    def getlist(self, key: str) -> list[str]:
        return list(self._params.getlist(key))


def _last_event_id(request: Request) -> int | None:
    raw = request.headers.get("last-event-id")
    if raw is None or not raw.strip():
        return None
    number = whole_number(raw.strip(), 19)
    if number is None or number >= 2**63:
        raise InvalidArgument("Last-Event-ID must be an event id this stream sent")
    return number


def _open_session(hub: Hub, agent_id: str, session_id: str, stream_id: str,
                  last: int | None) -> tuple[int, Any, bool]:
    """Record the session, pick the stream's start position, and ring what already waits.

    Returns:
        ``(position, wake, restarted)``; ``restarted`` when ``last`` was from another timeline.
    """
    restarted = False
    with hub.db.write() as s:
        sessions.attach(s, hub.clock, agent_id, session_id, stream_id)
        if last is not None and ahead(s, last, "agent_events"):
            # From another timeline (a restore, or ids given before migration 0022): read after it,
            # every new event would be skipped until the ids caught up. Start as a new stream
            # (the events still in the ledger for this session come again: at least once).
            log.info("agent stream: Last-Event-ID %d is past every event id given; starting afresh", last)
            last, restarted = None, True
        # Without Last-Event-ID: after the newest event, but not past verdicts for this session.
        position = last if last is not None else start_position(s, agent_id, session_id)
        wake = attach_ring(s, hub.clock, agent_id, session_id)
    return position, wake, restarted


def _read(hub: Hub, agent_id: str, session_id: str, after: int) -> list[tuple[int, str, str]]:
    with hub.db.read() as s:
        return [(int(e.id or 0), e.kind, sessions.event_text(e.data)) for e in
                sessions.read_after(s, agent_id, session_id, after)]


def _touch(hub: Hub, session_id: str, stream_id: str) -> bool:
    with hub.db.write() as s:
        return sessions.touch(s, hub.clock, session_id, stream_id)


def _close_session(hub: Hub, session_id: str, stream_id: str) -> None:
    with hub.db.write() as s:
        sessions.detach(s, session_id, stream_id)


async def stream(request: Request) -> Response:
    """``GET /api/v1/agent/stream``: attach one session of this agent and stream its events.

    Headers: ``X-Switchboard-Session`` (the client's session id; one is made when absent and
    named in the first comment), ``Last-Event-ID`` (resume after that event: no gap, no
    duplicate, across hub restarts). A stream of a session that is already attached replaces
    the old stream at once. Events: ``wake`` (``{content, meta}``) and ``doorbell``, each with
    its ledger id as the SSE id; ``unauthenticated`` (no id) when the token is revoked, then the
    stream ends (issue 13 item 3); heartbeats are comments without ids (DESIGN.md §6.5a).
    Errors: 401 unauthenticated, 400 a bad session id or ``Last-Event-ID``, 429 over
    :data:`MAX_STREAMS_PER_AGENT` streams of this agent in this process.
    """
    if request.method == "HEAD":  # a stream is read, not probed: see asgi._with_405s
        return problem(405, "method_not_allowed", "/api/v1/agent/stream accepts GET only", headers={"Allow": "GET"})
    reserved = False
    try:
        hub, caller = await _caller(request)
        session_id = sessions.check_session_id(request.headers.get("x-switchboard-session") or new_id("ses"))
        last = _last_event_id(request)
        # A place is held from here to the attach below: the session is opened in a thread in
        # between, and streams opened at the same moment must not all pass the limit.
        if not hub.streams.holds(session_id):
            if not hub.streams.reserve(caller.agent_id, MAX_STREAMS_PER_AGENT):
                raise RateLimited(f"this agent already has {MAX_STREAMS_PER_AGENT} open streams; close one first")
            reserved = True
        stream_id = new_id("stm")
        sub = Subscriber(caller.agent_id, asyncio.get_running_loop(), session_id=session_id, stream_id=stream_id)
        position, wake, restarted = await anyio.to_thread.run_sync(_open_session, hub, caller.agent_id,
                                                                   session_id, stream_id, last)
    except BaseException as exc:
        if reserved:
            hub.streams.unreserve(caller.agent_id)
        if isinstance(exc, SwitchboardError):
            return from_error(exc)
        raise
    revoked = False
    principal = request.scope.get("state", {}).get("principal")
    watch = getattr(request.app.state, "revocation_watch", None)

    def on_revoke() -> None:  # the token was revoked: end the stream at once (issue 13 item 3)
        nonlocal revoked
        revoked = True
        sub.close()

    try:
        replaced = hub.streams.attach(sub, reserved=reserved, limit=MAX_STREAMS_PER_AGENT)
    except RateLimited as exc:  # it was to replace a stream that ended meanwhile, and no place is free
        await anyio.to_thread.run_sync(_close_session, hub, session_id, stream_id)
        return from_error(exc)
    unwatch = watch.register(principal["token_id"], on_revoke) if watch and principal else (lambda: None)
    if replaced is not None:
        log.info("agent stream replaced agent=%s session=%s", caller.agent_id, session_id)
    log.info("agent stream attached agent=%s session=%s", caller.agent_id, session_id)
    sub.look()  # read once at start: a resume, or the attach ring

    async def events() -> Any:
        nonlocal position
        try:
            # The first byte at once: the client knows it is attached, and to which session.
            yield ServerSentEvent(comment=f"attached session={session_id}")
            if restarted:  # the client's Last-Event-ID becomes this timeline's position
                yield ServerSentEvent(event="restart", id=str(position), data=json.dumps({"position": position}))
            beat_at = anyio.current_time() + HEARTBEAT_SECONDS
            recheck_until = 0.0
            while not sub.closed or revoked:
                # The heartbeat is due every HEARTBEAT_SECONDS however busy the stream is: it keeps
                # the session live for routing (sessions.LIVE_SECONDS) and proves the connection.
                now = anyio.current_time()
                wait = beat_at - now
                if now < recheck_until:  # PostgreSQL: an event may wait for an older transaction
                    wait = min(wait, RECHECK_SECONDS)
                with anyio.move_on_after(max(wait, 0)):
                    await sub.ready.wait()
                if revoked:  # the token was revoked: say so, then end (issue 13 item 3)
                    yield ServerSentEvent(event="unauthenticated", data=json.dumps(
                        {"code": "unauthenticated", "message": "this agent's token was revoked"}))
                    return
                if anyio.current_time() >= beat_at:
                    beat_at = anyio.current_time() + HEARTBEAT_SECONDS
                    yield ServerSentEvent(comment="heartbeat")
                    if not await anyio.to_thread.run_sync(_touch, hub, session_id, stream_id):
                        return  # another stream (maybe in another process) holds the session now
                    sub.look()  # and read: a nudge may have been lost (DESIGN.md rule 1)
                if sub.ready.is_set():
                    sub.ready.clear()
                    if not hub.db.is_sqlite:
                        recheck_until = anyio.current_time() + RECHECK_WINDOW_SECONDS
                    # Pushed wakes that follow on from the position go out as they are: the
                    # ledger's rows, without a worker thread and a second pass of the loop
                    # (SQLite; issue 11). Anything else is read from the ledger after them.
                    rows, read = sub.take(position)
                elif anyio.current_time() >= recheck_until:
                    continue
                else:  # PostgreSQL: an event may have waited for an older transaction
                    rows, read = [], True
                if sub.closed:
                    return
                if read:  # after the pushed ones: the read starts where they end
                    after = rows[-1][0] if rows else position
                    found = await anyio.to_thread.run_sync(_read, hub, caller.agent_id, session_id, after)
                    if len(found) == 100:
                        sub.look()  # a long backlog: read on
                    rows += found
                for event_id, kind, data in rows:
                    position = event_id
                    yield ServerSentEvent(data=data, event=kind, id=str(event_id))
        finally:
            unwatch()
            hub.streams.detach(sub)
            with anyio.CancelScope(shield=True):
                try:
                    await anyio.to_thread.run_sync(_close_session, hub, session_id, stream_id)
                except Exception:  # noqa: BLE001 - the row goes stale on its own (sessions.LIVE_SECONDS)
                    log.warning("could not record the end of session %s", session_id)
            log.info("agent stream detached agent=%s session=%s", caller.agent_id, session_id)

    del wake  # written to the ledger with the session's first read position after it
    return EventSourceResponse(events(), ping=HEARTBEAT_SECONDS * 4,
                               headers={"X-Accel-Buffering": "no", "Cache-Control": "no-cache"})
