"""uvicorn settings against slow clients (issue 13 item 8).

uvicorn bounds the idle time between requests on a kept-alive connection (``timeout_keep_alive``)
but nothing else: a connection that never sends a byte, or sends half its headers, stays open
forever. :class:`HeaderTimeoutProtocol` (uvicorn's h11 protocol) closes a connection that has
not sent complete request headers within ``header_timeout_seconds`` of connecting or of its
previous response. Body reads are bounded by :mod:`switchboard.web.guard` (408).

Behind a reverse proxy, set the proxy's own header and body timeouts too (nginx:
``client_header_timeout 10s; client_body_timeout 30s; keepalive_timeout 5s``; Caddy:
``timeouts { read_header 10s read_body 30s idle 5s }``), so slow clients are shed before they
reach the hub (README, "Deployment").
"""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.protocols.http.h11_impl import H11Protocol

from switchboard.config import Settings

KEEP_ALIVE_SECONDS = 5


class HeaderTimeoutProtocol(H11Protocol):
    """h11 protocol that closes connections slow to send request headers."""

    header_timeout: float = 10.0

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm_header_timer()

    def _arm_header_timer(self) -> None:
        self._cycle_at_arming = self.cycle
        handle = getattr(self, "_header_timer", None)
        if handle is not None:
            handle.cancel()
        self._header_timer: asyncio.TimerHandle | None = self.loop.call_later(self.header_timeout,
                                                                              self._header_timeout)

    def _header_timeout(self) -> None:
        self._header_timer = None
        # A new request cycle since arming means its headers arrived in time.
        if self.cycle is self._cycle_at_arming and not self.transport.is_closing():
            self.transport.close()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing():
            self._arm_header_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        handle = getattr(self, "_header_timer", None)
        if handle is not None:
            handle.cancel()
        super().connection_lost(exc)


def uvicorn_options(settings: Settings) -> dict[str, Any]:
    """Keyword arguments for ``uvicorn.run``/``uvicorn.Config``: the protocol class with
    ``settings.header_timeout_seconds`` and the keep-alive timeout."""
    protocol = type("SwitchboardHTTP", (HeaderTimeoutProtocol,),
                    {"header_timeout": float(settings.header_timeout_seconds)})
    return {"http": protocol, "timeout_keep_alive": KEEP_ALIVE_SECONDS}
