"""Closing what a revoked token holds open: ``/mcp`` sessions and agent streams (issue 13 item 3).

Every request resolves its token afresh, so a revoked token fails its next call at once; what
needs closing is what stays open between calls. :class:`RevocationWatch` runs on the server's
event loop and every :data:`INTERVAL_SECONDS` asks the database (one indexed read, only while
something is open) which of the token ids behind open sessions and streams are revoked, whether
the revocation came from this process, the CLI or another server; those are closed within a
second. Agent streams register a callback (:meth:`RevocationWatch.register`) that ends the
stream with an ``unauthenticated`` event.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

import anyio
from sqlalchemy import select

if TYPE_CHECKING:
    from switchboard.hub import Hub
    from switchboard.mcp_server.sessions import AgentSessions

log = logging.getLogger(__name__)
INTERVAL_SECONDS = 0.5


class RevocationWatch:
    """Polls for revoked tokens behind open sessions and streams, and closes them."""

    def __init__(self, hub: Hub, sessions: AgentSessions | None = None) -> None:
        self.hub = hub
        self.sessions = sessions
        self._streams: dict[str, dict[int, Callable[[], None]]] = {}
        self._next = 0

    def register(self, token_id: str, on_revoke: Callable[[], None]) -> Callable[[], None]:
        """Call ``on_revoke`` (on the event loop) once ``token_id`` is revoked; returns an unregister."""
        self._next += 1
        key = self._next
        self._streams.setdefault(token_id, {})[key] = on_revoke

        def unregister() -> None:
            callbacks = self._streams.get(token_id)
            if callbacks is not None:
                callbacks.pop(key, None)
                if not callbacks:
                    self._streams.pop(token_id, None)

        return unregister

    def revoked_among(self, token_ids: set[str]) -> set[str]:
        """Which of ``token_ids`` (agent or human token ids) are revoked or gone."""
        from switchboard.models import HumanToken, Token

        ids = sorted(token_ids)
        live: set[str] = set()
        with self.hub.db.read() as s:
            for table in (Token, HumanToken):
                for start in range(0, len(ids), 500):
                    live.update(s.execute(select(table.id).where(
                        table.id.in_(ids[start:start + 500]), table.revoked_at.is_(None))).scalars())  # type: ignore[attr-defined,union-attr]
        return set(token_ids) - live

    async def check(self) -> int:
        """One pass: close what revoked tokens hold; returns how many sessions and streams closed."""
        held = set(self._streams) | (self.sessions.token_ids() if self.sessions else set())
        if not held:
            return 0
        revoked = await anyio.to_thread.run_sync(self.revoked_among, held)
        if not revoked:
            return 0
        closed = await self.sessions.close_tokens(revoked) if self.sessions else 0
        for token_id in revoked:
            for callback in list(self._streams.pop(token_id, {}).values()):
                callback()
                closed += 1
        return closed

    async def run(self) -> None:
        """Check every :data:`INTERVAL_SECONDS` until cancelled; a failing pass is logged, never fatal."""
        while True:
            await anyio.sleep(INTERVAL_SECONDS)
            try:
                await self.check()
            except Exception as exc:  # noqa: BLE001 - the next pass retries; requests re-check tokens anyway
                log.warning("revocation check failed (%s)", type(exc).__name__)
