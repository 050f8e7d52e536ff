"""Problem details for the errors the MCP library answers itself on ``/mcp``.

The Streamable HTTP transport answers some requests before our code runs: 400 (no session id,
bad ``Content-Type``, unparseable JSON-RPC), 404 (unknown session), 405, 406 (``Accept``
without ``application/json`` and ``text/event-stream``), 415, 421 (``Host`` not allowed) and 403
(``Origin`` not allowed), as ``text/plain`` or as a bare JSON-RPC error. Every HTTP error of
ours is RFC 9457 problem details (DESIGN.md §6.1), so this middleware rewrites them: the status
and headers (``mcp-session-id``, ``Allow``) are kept, the library's message becomes ``detail``,
and a JSON-RPC error object is kept beside it (``jsonrpc``, ``id``, ``error``, RFC 9457 §3.2
extension members), so JSON-RPC clients still find it. Successful responses and event streams
pass through untouched.
"""

from __future__ import annotations

import json
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from switchboard.web.problems import MEDIA_TYPE, problem_body

_CODES = {400: "invalid_argument", 403: "forbidden", 404: "not_found", 405: "method_not_allowed",
          406: "not_acceptable", 415: "unsupported_media_type", 421: "misdirected_request"}
_HINTS = {421: " (the Host header names none of the hub's host names: set SWITCHBOARD_PUBLIC_HOSTS, and "
               "SWITCHBOARD_TRUSTED_PROXIES behind a reverse proxy)",
          403: " (the Origin is not one of the hub's host names: set SWITCHBOARD_PUBLIC_HOSTS)",
          406: " (send Accept: application/json, text/event-stream)"}
_KEEP = (b"mcp-session-id", b"allow", b"www-authenticate")
_NOT_JSON_RPC = ('not a JSON-RPC 2.0 message: send an object with "jsonrpc": "2.0" and "method" (a request '
                 'also has "id"), or a response with "id" and "result" or "error"')
_MAX_BUFFER = 64 * 1024


class MCPProblems:
    """ASGI middleware around the MCP app (see the module docstring)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start: Message | None = None
        chunks: list[bytes] = []

        async def intercept(message: Message) -> None:
            nonlocal start
            if message["type"] == "http.response.start":
                headers = {k.lower(): v for k, v in message.get("headers", [])}
                is_problem = headers.get(b"content-type", b"").startswith(MEDIA_TYPE.encode())
                if message["status"] >= 400 and not is_problem:
                    start = message
                    return
                await send(message)
                return
            if message["type"] == "http.response.body" and start is not None:
                if sum(map(len, chunks)) < _MAX_BUFFER:
                    chunks.append(message.get("body", b""))
                if not message.get("more_body", False):
                    await _send_problem(send, start, b"".join(chunks))
                return
            await send(message)

        await self.app(scope, receive, intercept)


async def _send_problem(send: Send, start: Message, body: bytes) -> None:
    status = int(start["status"])
    extra: dict[str, Any] = {}
    detail = ""
    try:
        parsed = json.loads(body)
    except ValueError:
        parsed = None
    if isinstance(parsed, dict) and isinstance(parsed.get("error"), dict):
        extra = {k: parsed[k] for k in ("jsonrpc", "id", "error") if k in parsed}
        detail = str(parsed["error"].get("message") or "")
        if "validation error" in detail.lower():
            # pydantic's report (about 2 KB, with the input echoed and errors.pydantic.dev links)
            # said little to a client: name what a JSON-RPC message needs (a new-user run).
            detail = _NOT_JSON_RPC
            extra["error"] = {**{k: v for k, v in parsed["error"].items() if k != "data"}, "message": detail}
    elif body:
        detail = body.decode("utf-8", "replace")
    detail = " ".join(detail.split())[:300] or "the MCP transport refused the request"
    code = _CODES.get(status, "invalid_argument" if status < 500 else "internal")
    payload = {**extra, **problem_body(status, code, detail + _HINTS.get(status, ""))}
    out = json.dumps(payload).encode("utf-8")
    headers = [(k, v) for k, v in start.get("headers", []) if k.lower() in _KEEP]
    headers += [(b"content-type", MEDIA_TYPE.encode()), (b"content-length", str(len(out)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": out})
