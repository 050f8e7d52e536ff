"""Running behind a reverse proxy: ``X-Forwarded-*`` honoured only from trusted proxies.

A proxy that rewrites ``Host`` (``proxy_pass http://switchboard:8080``) makes the MCP
library's DNS-rebinding check answer 421 on ``/mcp`` while webhooks and REST still work
(issue 12 #9). With ``SWITCHBOARD_TRUSTED_PROXIES`` set, a request whose peer address is in
one of those networks has its ``Host`` restored from ``X-Forwarded-Host`` and its scheme and
client from ``X-Forwarded-Proto`` / ``X-Forwarded-For`` (uvicorn's
:class:`~uvicorn.middleware.proxy_headers.ProxyHeadersMiddleware`); from anyone else the
headers are ignored, so a client cannot choose the host the checks see. The public host
names the hub answers for are ``SWITCHBOARD_PUBLIC_HOSTS`` plus the public URL's host.

The rightmost ``X-Forwarded-Host`` value is used: it is the one the proxy we trust wrote
(a proxy that appends keeps what the client sent on the left).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence
from urllib.parse import urlsplit

from mcp.server.transport_security import TransportSecuritySettings
from starlette.types import ASGIApp, Receive, Scope, Send
from uvicorn.middleware.proxy_headers import ProxyHeadersMiddleware

from switchboard.config import Settings, valid_host


class ForwardedHost:
    """ASGI middleware: ``Host`` := the rightmost ``X-Forwarded-Host`` from a trusted peer, then
    uvicorn's proxy-headers middleware for the scheme and client address."""

    def __init__(self, app: ASGIApp, trusted: Sequence[str]) -> None:
        self.networks = [ipaddress.ip_network(n, strict=False) for n in trusted]
        self.app = ProxyHeadersMiddleware(app, trusted_hosts=list(trusted))  # type: ignore[arg-type]

    def _trusted(self, scope: Scope) -> bool:
        client = scope.get("client")
        if not client:
            return False
        try:
            address = ipaddress.ip_address(client[0])
        except ValueError:
            return False
        return any(address in network for network in self.networks)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] in ("http", "websocket") and self._trusted(scope):
            forwarded = [v.decode("latin-1") for k, v in scope["headers"] if k == b"x-forwarded-host"]
            host = forwarded[-1].split(",")[-1].strip() if forwarded else ""
            if host and valid_host(host):
                headers = [(k, v) for k, v in scope["headers"] if k != b"host"]
                headers.append((b"host", host.encode("latin-1")))
                scope = {**scope, "headers": headers}
        await self.app(scope, receive, send)  # type: ignore[arg-type]


def mcp_transport_security(base: TransportSecuritySettings, settings: Settings) -> TransportSecuritySettings:
    """The MCP library's DNS-rebinding settings plus :attr:`Settings.public_hosts`.

    Each public host is allowed as given and on any port, with ``http`` and ``https`` origins
    (the browser-facing scheme behind a TLS-terminating proxy is ``https``).
    """
    hosts = list(base.allowed_hosts)
    origins = list(base.allowed_origins)
    for entry in settings.public_hosts:
        name = urlsplit(f"//{entry}").hostname or entry
        shown = f"[{name}]" if ":" in name else name
        hosts += [entry, shown, f"{shown}:*"]
        origins += [f"{scheme}://{entry}" for scheme in ("https", "http")]
        origins += [f"{scheme}://{shown}" for scheme in ("https", "http")]
        origins += [f"{scheme}://{shown}:*" for scheme in ("https", "http")]
    return base.model_copy(update={"allowed_hosts": list(dict.fromkeys(hosts)),
                                   "allowed_origins": list(dict.fromkeys(origins))})
