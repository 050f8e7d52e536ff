"""``/mcp`` sessions bound to the token that opened them, capped per agent (issue 13 item 4).

The SDK's :class:`StreamableHTTPSessionManager` caps sessions server-wide (10,000) and binds a
session to the ``AuthorizationContext`` of the request that opened it when ``scope["user"]`` is
an :class:`AuthenticatedUser`. :class:`AgentSessions` uses that: :func:`bind` sets the user to
``client_id = <token id>``, ``subject = <agent id>``, so a session id used with another token
(even of the same agent) is answered exactly like an unknown one (404), and the per-agent cap
counts sessions by subject. Revocation (:meth:`AgentSessions.close_tokens`) ends the sessions
opened with a revoked token at once.

The count and the close use the manager's ``_session_owners``/``_server_instances``/
``_discard_session`` (mcp 2.3); a test fails if an SDK update renames them.
"""

from __future__ import annotations

import logging
from typing import Any

from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from starlette.types import Scope

log = logging.getLogger(__name__)


def bind(scope: Scope, agent_id: str, token_id: str) -> None:
    """Mark the request as made by ``agent_id`` with token ``token_id`` (what a session binds to)."""
    scope["user"] = AuthenticatedUser(AccessToken(token=token_id, client_id=token_id, subject=agent_id, scopes=[]))


class AgentSessions(StreamableHTTPSessionManager):
    """The SDK's session manager with a per-agent cap and close-by-token.

    Args:
        per_agent: open sessions one agent may hold (``Settings.mcp_sessions_per_agent``).
        **kwargs: passed to :class:`StreamableHTTPSessionManager` (``session_idle_timeout`` ...).
    """

    def __init__(self, *args: Any, per_agent: int = 16, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.per_agent = per_agent

    def count_for(self, agent_id: str) -> int:
        """Open sessions of ``agent_id``."""
        return sum(1 for owner in list(self._session_owners.values()) if owner.get("subject") == agent_id)

    def token_ids(self) -> set[str]:
        """Token ids that opened the sessions open now."""
        return {owner["client_id"] for owner in list(self._session_owners.values())}

    def _admit_session(self, requestor: Any) -> Any:
        # Under the SDK's creation lock: the hard cap (the ASGI wrapper answers 429 before this).
        if requestor is not None and self.count_for(requestor.get("subject")) >= self.per_agent:
            return None
        return super()._admit_session(requestor)

    async def close_tokens(self, token_ids: set[str]) -> int:
        """End every session opened with one of ``token_ids`` (revoked); return how many."""
        doomed = [(sid, self._server_instances.get(sid)) for sid, owner in list(self._session_owners.items())
                  if owner.get("client_id") in token_ids]
        for sid, transport in doomed:
            if transport is not None:
                await self._discard_session(sid, transport)
        if doomed:
            log.info("closed %d /mcp session(s) of revoked tokens", len(doomed))
        return len(doomed)
