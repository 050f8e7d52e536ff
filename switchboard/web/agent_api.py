"""Agent-facing async routes used by the channel adapter (DESIGN.md §3, §6.5a).

- ``GET /api/v1/agent/tools``: the tool catalogue (MCP ``Tool`` shapes).
- ``POST /api/v1/agent/tools/<name>``: call a tool with a JSON object of arguments; the body
  is the MCP ``CallToolResult`` (tool errors are ``isError`` results with status 200), with the
  ``notifications`` trailer member when something is pending (DESIGN.md §6.4).
- ``GET /api/v1/inbox/wait?wait_seconds=&since=``: ``inbox_wait`` over REST, returning the
  structured result as JSON (errors as problem details); parked on the broker, no thread.
- ``GET /api/v1/agent/stream``: server-sent events carrying wakes for this agent; a comment
  heartbeat every 15 s, ``X-Accel-Buffering: no``, ``Cache-Control: no-cache``. Wakes carry no
  event id: they are doorbells, and a missed one is found by ``todo_list``.

Every route needs ``Authorization: Bearer <agent token>`` (401 problem details otherwise).
"""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING, Any

import asyncio

import anyio
from sse_starlette.sse import EventSourceResponse, ServerSentEvent
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from switchboard.errors import InvalidArgument, SwitchboardError
from switchboard.intake import json_shape
from switchboard.mcp_server.tools import TOOLS, Caller, bearer, call_tool_async, resolve_caller
from switchboard.notify.broker import Subscriber
from switchboard.web.problems import from_error, problem

if TYPE_CHECKING:
    from switchboard.hub import Hub

log = logging.getLogger(__name__)
MAX_ARGUMENT_BYTES = 1024 * 1024
HEARTBEAT_SECONDS = 15


async def _caller(request: Request) -> tuple[Hub, Caller]:
    hub: Hub = request.app.state.hub
    token = bearer(request.headers.get("authorization"))
    caller = await anyio.to_thread.run_sync(resolve_caller, hub, token)
    return hub, caller


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


async def stream(request: Request) -> Response:
    """``GET /api/v1/agent/stream``: attach this agent's session and stream its wakes."""
    try:
        hub, caller = await _caller(request)
    except SwitchboardError as exc:
        return from_error(exc)

    sub = Subscriber(caller.agent_id, asyncio.get_running_loop())
    hub.streams.attach(sub)
    log.info("agent stream attached agent=%s", caller.agent_id)

    async def events() -> Any:
        try:
            # A first comment tells the adapter the session is attached.
            yield ServerSentEvent(comment="attached")
            while True:
                message = await sub.queue.get()
                yield {"event": message.pop("event", "wake"), "data": json.dumps(message)}
        finally:
            hub.streams.detach(sub)
            log.info("agent stream detached agent=%s", caller.agent_id)

    return EventSourceResponse(events(), ping=HEARTBEAT_SECONDS,
                               headers={"X-Accel-Buffering": "no", "Cache-Control": "no-cache"})
