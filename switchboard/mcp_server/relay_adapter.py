"""The adapter's half of the permission relay (DESIGN.md §6.5, §6.5a; ``notes/mcp-and-channels.md``).

- The adapter declares ``capabilities.experimental["claude/channel/permission"] = {}`` beside
  ``claude/channel`` (:class:`~switchboard.mcp_server.channel.ChannelServer`), so Claude Code
  sends it ``notifications/claude/channel/permission_request`` with ``{request_id, tool_name,
  description, input_preview}``: snake_case on the wire, so the params models here derive from
  plain pydantic ``BaseModel`` (the SDK's ``NotificationParams`` would camelCase them).
- Each prompt is forwarded to the hub (``POST /api/v1/agent/permission``) with this adapter's
  session id, so the hub binds it to this session.
- The hub's verdict arrives on this session's stream as event ``verdict`` ``{request_id,
  behavior}`` (only this session's stream carries it) and is sent to Claude Code as
  ``notifications/claude/channel/permission`` ``{request_id, behavior}``, once.
- When stdin closes, the adapter tells the hub its session ended
  (``POST /api/v1/agent/session/close``): open prompts of the session expire, and the hub sends
  their verdicts nowhere else.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Literal

import anyio
import httpx2
import mcp_types as types
from pydantic import BaseModel, ConfigDict

if TYPE_CHECKING:
    from switchboard.mcp_server.channel import Bridge, ChannelServer

log = logging.getLogger("switchboard.channel")

PERMISSION_CAPABILITY = "claude/channel/permission"
REQUEST_METHOD = "notifications/claude/channel/permission_request"
VERDICT_METHOD = "notifications/claude/channel/permission"
FORWARD_ATTEMPTS = 3


class PermissionRequestParams(BaseModel):
    """``permission_request`` params as Claude Code sends them (snake_case; extra fields kept out)."""

    model_config = ConfigDict(extra="ignore")
    request_id: str
    tool_name: str
    description: str = ""
    input_preview: str = ""


class PermissionParams(BaseModel):
    """The verdict's params: ``{request_id, behavior}``, snake_case on the wire."""

    model_config = ConfigDict(extra="forbid")
    request_id: str
    behavior: Literal["allow", "deny"]


class PermissionNotification(types.Notification[PermissionParams, Literal["notifications/claude/channel/permission"]]):
    """The verdict notification Claude Code applies to its open permission dialog."""

    method: Literal["notifications/claude/channel/permission"] = "notifications/claude/channel/permission"
    params: PermissionParams


async def forward(bridge: Bridge, params: PermissionRequestParams) -> bool:
    """Send one prompt to the hub, bound to this session; a few retries, then give up (the
    terminal dialog still works: a lost relay loses only the remote answer).

    Returns:
        True when the hub stored it (or had it already).
    """
    body = params.model_dump()
    for attempt in range(FORWARD_ATTEMPTS):
        try:
            resp = await bridge.client.post(f"{bridge.url}/api/v1/agent/permission", json=body)
        except httpx2.HTTPError as exc:
            log.warning("could not relay permission prompt %s (%s)", params.request_id, type(exc).__name__)
            await anyio.sleep(0.5 * 2 ** attempt)
            continue
        if resp.status_code in (200, 201):
            return True
        log.warning("the hub refused permission prompt %s (HTTP %s)", params.request_id, resp.status_code)
        if resp.status_code < 500:
            return False
        await anyio.sleep(0.5 * 2 ** attempt)
    return False


async def close_session(bridge: Bridge) -> None:
    """Tell the hub this session ended (best effort, short timeout)."""
    try:
        await bridge.client.post(f"{bridge.url}/api/v1/agent/session/close", timeout=httpx2.Timeout(3.0))
    except httpx2.HTTPError:
        pass


def install(server: ChannelServer, bridge: Bridge) -> None:
    """Wire the relay into the adapter: the request handler, and the ``verdict`` event handler."""

    async def on_request(ctx: Any, params: PermissionRequestParams) -> None:
        await forward(bridge, params)

    async def on_verdict(event: dict[str, Any]) -> None:
        try:
            params = PermissionParams(request_id=str(event["request_id"]), behavior=event["behavior"])
        except (KeyError, TypeError, ValueError):
            log.warning("ignored a malformed verdict event from the hub")
            return
        await bridge.session.send_notification(PermissionNotification(params=params))

    server.add_notification_handler(REQUEST_METHOD, PermissionRequestParams, on_request)
    bridge.handlers["verdict"] = on_verdict
