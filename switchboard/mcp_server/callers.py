"""Who calls a tool: the agent behind a bearer token, and the session a lease is bound to.

Used by every agent surface (``/mcp``, the agent REST routes, the channel adapter's routes);
a missing, unknown or revoked token is ``unauthenticated`` with one message for all three.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from switchboard import admin
from switchboard.mcp_server.specs import Caller

if TYPE_CHECKING:
    from switchboard.hub import Hub


def resolve_caller(hub: Hub, token: str | None) -> Caller:
    """Resolve a bearer token to the calling agent.

    Raises:
        Unauthenticated: missing, unknown or revoked token.
    """
    with hub.db.read() as s:
        agent = admin.authenticate(s, token)
        return Caller(agent.id, agent.name, agent.human_id)


SESSION_HEADER = "x-switchboard-session"
"""Sent by the channel adapter (one value per adapter process) and by REST callers that want
their own session; a lease claimed without it is bound to the caller's token."""


def session_of(caller: Caller, token: str | None, *, mcp_session: str | None = None,
               header: str | None = None) -> Caller:
    """``caller`` with its session key: the MCP session id on ``/mcp``, else the
    ``X-Switchboard-Session`` header (adapter, REST; it also becomes ``session_id``), else a
    digest of the bearer token.

    Keys are namespaced and cut to 80 characters; the token itself is never stored.
    """
    import hashlib

    if mcp_session:
        key = "mcp:" + mcp_session[:76]
    elif header and header.strip():
        key = "hdr:" + hashlib.sha256(header.strip().encode("utf-8", "replace")).hexdigest()[:40]
        # The adapter's session also binds relayed prompts and friend verdicts (DESIGN.md §6.6).
        return replace(caller, session_key=key, session_id=header.strip()[:80])
    elif token:
        key = "tok:" + hashlib.sha256(token.encode("utf-8", "replace")).hexdigest()[:40]
    else:
        return caller
    return replace(caller, session_key=key)


def bearer(authorization: str | None) -> str | None:
    """The token from an ``Authorization: Bearer <token>`` header value."""
    if not authorization:
        return None
    scheme, _, value = authorization.partition(" ")
    return value.strip() if scheme.lower() == "bearer" and value.strip() else None
