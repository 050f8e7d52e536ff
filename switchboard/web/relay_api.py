"""Agent-facing async routes of the permission relay (DESIGN.md §6.5, §6.5a).

The channel adapter names its session in ``X-Switchboard-Session`` (1-80 characters of
``[A-Za-z0-9_.:-]``, random per adapter process) on its stream, its tool calls and these routes:

- ``POST /api/v1/agent/permission``: a ``permission_request`` Claude Code sent the adapter,
  body ``{request_id, tool_name, description, input_preview}``. 201 with the inbox item (200
  when the same session relayed the same open prompt before); 400 ``invalid_argument`` for a
  malformed field or a ``<channel>`` break (the prompt is then answered in the terminal only).
- ``POST /api/v1/agent/session/close``: the adapter's session ended (stdin closed): its open
  prompts expire and queued verdicts are marked ``session_gone``; 200 with the counts.

``Authorization: Bearer <agent token>`` on both (401 problem details otherwise).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import anyio
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from switchboard.errors import InvalidArgument, SwitchboardError
from switchboard.inbox import alerts, permissions
from switchboard.intake import json_shape
from switchboard.mcp_server.callers import bearer, resolve_caller
from switchboard.mcp_server.specs import Caller
from switchboard.web.problems import from_error

if TYPE_CHECKING:
    from switchboard.hub import Hub

SESSION_HEADER = "x-switchboard-session"
MAX_BODY_BYTES = 64 * 1024


def relay_prompt(hub: Hub, caller: Caller, session_id: str, body: dict[str, Any]) -> tuple[dict[str, Any], bool]:
    """Store a relayed prompt and notify the human (coalesced) after the commit.

    Returns:
        ``(item view, created)``.

    Raises:
        InvalidArgument: see :func:`switchboard.inbox.permissions.relay`.
    """
    with hub.db.write() as s:
        item, created = permissions.relay(
            s, hub.clock, agent_id=caller.agent_id, session_id=session_id, request_id=body.get("request_id"),
            tool_name=body.get("tool_name"), description=body.get("description"),
            input_preview=body.get("input_preview"), expires_in_seconds=hub.settings.permission_expiry_seconds)
        messages: list[tuple[str, str]] = []
        if created:
            text = alerts.prompt_text(caller.agent_name, str(item["tool_name"]), item["body"], str(item["request_id"]))
            messages = alerts.queue_prompt(s, hub.clock, caller.human_id, text, hub.settings.notify_coalesce_seconds)
    alerts.send(messages)
    return item, created


async def _body(request: Request) -> dict[str, Any]:
    raw = await request.body()
    if len(raw) > MAX_BODY_BYTES:
        raise InvalidArgument(f"the body is over {MAX_BODY_BYTES} bytes")
    if not raw.strip():
        raise InvalidArgument("the body must be a JSON object")
    # The shared strict reader: plain json.loads let 50,000 '[' raise RecursionError, a 500
    # (a review), and said nothing of what was wrong.
    return json_shape.loads_object(raw)


async def permission_request(request: Request) -> Response:
    """``POST /api/v1/agent/permission``."""
    hub: Hub = request.app.state.hub
    try:
        caller = await anyio.to_thread.run_sync(resolve_caller, hub, bearer(request.headers.get("authorization")))
        session_id = permissions.check_session_id(request.headers.get(SESSION_HEADER))
        body = await _body(request)
        item, created = await anyio.to_thread.run_sync(relay_prompt, hub, caller, session_id, body)
    except SwitchboardError as exc:
        return from_error(exc)
    return JSONResponse(item, status_code=201 if created else 200)


async def close_session(request: Request) -> Response:
    """``POST /api/v1/agent/session/close``."""
    hub: Hub = request.app.state.hub
    try:
        caller = await anyio.to_thread.run_sync(resolve_caller, hub, bearer(request.headers.get("authorization")))
        session_id = permissions.check_session_id(request.headers.get(SESSION_HEADER))

        def run() -> dict[str, int]:
            with hub.db.write() as s:
                return permissions.close_session(s, hub.clock, caller.agent_id, session_id)

        counts = await anyio.to_thread.run_sync(run)
    except SwitchboardError as exc:
        return from_error(exc)
    return JSONResponse({"session_id": session_id, **counts})
