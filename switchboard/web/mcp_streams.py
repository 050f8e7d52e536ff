"""ASGI rules for the standalone GET streams of ``/mcp`` (issue 18 items 2 and 9).

The MCP SDK's Streamable HTTP transport answers a second ``GET /mcp`` of a session with 409
while the first stream lives, and a stream frozen by a proxy lives on until TCP gives up: the
client could not get its back-channel back for 30 s and more. :class:`McpStreamRules` wraps the
transport:

- a new GET stream of a session replaces the old one at once: the old stream is closed through
  the transport's own ``close_standalone_sse_stream()`` and the new one starts after it ended;
- the first body byte (an SSE comment) is sent as soon as the stream opens, so proxies and
  clients see it within a second;
- at most :data:`MAX_STREAMS_PER_AGENT` GET streams per agent at once, else 429 problem details.

The agent is resolved from the bearer token (the same token check as ``RequireAgent``, which
runs first and refuses bad tokens with 401).
"""

from __future__ import annotations

import logging
from collections import Counter
from typing import TYPE_CHECKING

import anyio
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from switchboard.errors import RateLimited, SwitchboardError
from switchboard.mcp_server.callers import bearer, resolve_caller
from switchboard.web.problems import from_error

if TYPE_CHECKING:
    from mcp.server.streamable_http_manager import StreamableHTTPSessionManager

    from switchboard.hub import Hub

log = logging.getLogger(__name__)
MAX_STREAMS_PER_AGENT = 8
REPLACE_WAIT_SECONDS = 5.0
OPENING_COMMENT = b": stream open\n\n"


class McpStreamRules:
    """Wraps the ``/mcp`` ASGI app (see the module docstring)."""

    def __init__(self, app: ASGIApp, hub: Hub, manager: StreamableHTTPSessionManager) -> None:
        self.app = app
        self.hub = hub
        self.manager = manager
        self._open: Counter[str] = Counter()
        self._by_session: dict[str, anyio.Event] = {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "GET":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        session_id = headers.get("mcp-session-id")
        try:
            caller = await anyio.to_thread.run_sync(resolve_caller, self.hub, bearer(headers.get("authorization")))
            replacing = session_id is not None and session_id in self._by_session
            if not replacing and self._open[caller.agent_id] >= MAX_STREAMS_PER_AGENT:
                raise RateLimited(f"this agent already has {MAX_STREAMS_PER_AGENT} open MCP streams; close one first")
        except SwitchboardError as exc:
            await from_error(exc)(scope, receive, send)
            return
        if session_id is not None:
            await self._replace(session_id)
        done = anyio.Event()
        if session_id is not None:
            self._by_session[session_id] = done
        self._open[caller.agent_id] += 1
        try:
            await self.app(scope, receive, _first_byte_at_once(send))
        finally:
            self._open[caller.agent_id] -= 1
            if self._open[caller.agent_id] <= 0:
                del self._open[caller.agent_id]
            if session_id is not None and self._by_session.get(session_id) is done:
                del self._by_session[session_id]
            done.set()

    async def _replace(self, session_id: str) -> None:
        """Close the session's live GET stream and wait (bounded) until it has ended."""
        old = self._by_session.get(session_id)
        transport = getattr(self.manager, "_server_instances", {}).get(session_id)
        if old is None or transport is None:
            return
        log.info("replacing the GET stream of MCP session %s", session_id)
        transport.close_standalone_sse_stream()
        with anyio.move_on_after(REPLACE_WAIT_SECONDS):
            await old.wait()


def _first_byte_at_once(send: Send) -> Send:
    """A ``send`` that follows an SSE response start with an opening comment."""

    async def wrapped(message: Message) -> None:
        await send(message)
        if message["type"] == "http.response.start" and message.get("status") == 200:
            content_type = dict(message.get("headers", [])).get(b"content-type", b"")
            if content_type.startswith(b"text/event-stream"):
                await send({"type": "http.response.body", "body": OPENING_COMMENT, "more_body": True})

    return wrapped



