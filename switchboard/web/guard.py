"""The door of every HTTP request: authenticate from headers, bound the body, then hand it on.

An ASGI middleware around the whole app (:func:`switchboard.web.asgi.create_app`), so a new
route cannot skip it (issue 13 items 2 and 8):

1. ``/api/...`` and ``/mcp`` (except the public :data:`PUBLIC_PATHS`): the bearer token must be
   a valid, unrevoked token of the kind the path takes (human ``sbh_`` under
   :data:`HUMAN_PATHS`, agent ``sbk_`` elsewhere), checked from the headers before a byte of the
   body is read or a query parameter is parsed; otherwise 401. The views resolve it again.
2. A ``Content-Length`` over the limit is refused with 413 before reading (REST, tools and
   ``/mcp``: ``rest_max_body_bytes``, default 1 MiB; ``/hooks``: ``max_body_bytes``); a chunked
   body is cut off at the limit. A request with both ``Content-Length`` and
   ``Transfer-Encoding`` is refused 400 and its connection closed (RFC 9112 §6.1).
3. The body must arrive within ``body_timeout_seconds`` of the request's headers, else 408: the
   server protocol enforces it (:mod:`switchboard.web.server_protocol`, one timer per
   connection), so a body trickled a byte a second holds nothing for long.
4. ``/hooks/<source_id>``: a URL that names no enabled source is answered 404 before its body
   is read (the receiver's answer, from the source cache, read in a worker thread on a miss),
   so it holds no place; at most ``source_body_concurrency`` bodies are read at once for one
   source before verification (and eight times that over all sources); more get 429 with
   ``Retry-After``, so whoever knows a source URL cannot hold ``n × 25 MiB``.

The body is then replayed to the app in one message; later ``receive`` calls go to the server
(disconnects still reach streaming responses). Parsing happens after all this, in the views,
with the shape rules of :mod:`switchboard.intake.json_shape`.
"""

from __future__ import annotations

import logging
from collections import Counter
from typing import TYPE_CHECKING

import anyio
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from switchboard.errors import (
    MalformedRequest,
    NotFound,
    PayloadTooLarge,
    RateLimited,
    SwitchboardError,
    Unauthenticated,
)
from switchboard.text import whole_number
from switchboard.web.ingest import NO_SUCH_SOURCE, known_source
from switchboard.web.problems import from_error

if TYPE_CHECKING:
    from switchboard.hub import Hub

log = logging.getLogger(__name__)

PUBLIC_PATHS = frozenset({"/", "/api/v1/health", "/api/v1/ready", "/api/v1/openapi.json"})
"""Paths that hold no data and need no token."""
HUMAN_PATHS = ("/api/v1/human/", "/api/v1/stream")
"""Paths for human tokens (``sbh_``); every other ``/api/`` path and ``/mcp`` takes agent tokens."""
COOKIE_PATHS = frozenset({"/api/v1/stream"})
"""Bodyless GET routes a browser opens with the web session cookie (``EventSource`` cannot send a
bearer header): without an ``Authorization`` header they are authenticated by the view."""
BODY_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
RETRY_AFTER_SECONDS = 1


def route_path(scope: Scope) -> str:
    """The request's path as Starlette's router matches it (``starlette._utils.get_route_path``,
    a private module this project may not import): without the ASGI root path."""
    path: str = scope.get("path", "")
    root: str = scope.get("root_path", "")
    if root and path.startswith(root) and path[len(root):len(root) + 1] == "/":
        return path[len(root):]
    return path


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", []):
        if key.lower() == name:
            return value.decode("latin-1")
    return None


class AmbiguousFraming(MalformedRequest):
    """The request has both Content-Length and Transfer-Encoding (RFC 9112 §6.1): send one."""


AMBIGUOUS = "the request has both Content-Length and Transfer-Encoding (RFC 9112 §6.1): send one of them"
""":class:`AmbiguousFraming`'s message. Refused with ``Connection: close`` (RFC 9112 §6.1: the
server MUST close the connection after such a request): the HTTP parser frames it by Transfer-Encoding, and a front end that framed it
by Content-Length would read what follows the chunked body as a second request (a break run
smuggled a ``GET /api/v1/health`` that way)."""


def _framing(scope: Scope) -> tuple[str | None, bool]:
    """The request's ``Content-Length`` (the first) and whether it has a ``Transfer-Encoding``, in
    one pass over the headers."""
    declared, encoded = None, False
    for key, value in scope.get("headers", []):
        key = key.lower()
        if key == b"content-length":
            if declared is None:
                declared = value.decode("latin-1")
        elif key == b"transfer-encoding":
            encoded = True
    return declared, encoded


def authenticate_any(hub: Hub, authorization: str | None) -> dict[str, str]:
    """The principal behind a bearer token, agent or human: ``{kind, id, token_id}``.

    Raises:
        Unauthenticated: missing, malformed, unknown or revoked (one message for all).
    """
    from sqlalchemy import select

    from switchboard import admin
    from switchboard.mcp_server.callers import bearer
    from switchboard.models import HumanToken, Token

    token = bearer(authorization)
    if token is None or len(token) > 200:
        raise Unauthenticated("a valid agent or human token is required")
    if token.startswith(admin.TOKEN_PREFIX):
        table, kind = Token, "agent"
    elif token.startswith(admin.HUMAN_TOKEN_PREFIX):
        table, kind = HumanToken, "human"  # type: ignore[assignment]
    else:
        raise Unauthenticated("a valid agent or human token is required")
    owner = table.agent_id if kind == "agent" else HumanToken.human_id  # type: ignore[attr-defined]
    with hub.db.read() as s:
        row = s.execute(select(table.id, owner).where(  # type: ignore[attr-defined]
            table.token_sha256 == admin.token_digest(token), table.revoked_at.is_(None))).first()
    if row is None:
        raise Unauthenticated("a valid agent or human token is required")
    return {"kind": kind, "id": row[1], "token_id": row[0]}


class RequestGuard:
    """ASGI middleware applying the rules in the module docstring."""

    def __init__(self, app: ASGIApp, hub: Hub) -> None:
        self.app = app
        self.hub = hub
        self.settings = hub.settings
        self._reading: Counter[str] = Counter()
        self._total = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        # The route, as Starlette's router matches it: without an ASGI root path (`uvicorn
        # --root-path /sb` sends /sb/hooks/<id>), or a delivery got the REST body limit and no
        # source places, and an /api body was read before its token was checked (a review).
        path = route_path(scope)
        try:
            # First, before a token or a place is checked: their refusals keep the connection,
            # and a smuggled request behind a 401 or 429 was answered too (a review).
            declared, encoded = _framing(scope)
            if encoded and declared is not None:
                raise AmbiguousFraming(AMBIGUOUS)
            if path.startswith("/hooks/"):
                await self._hook(scope, receive, send, path, declared)
                return
            cookie_only = (path in COOKIE_PATHS and scope.get("method") == "GET"
                           and _header(scope, b"authorization") is None and _header(scope, b"cookie") is not None)
            if (path.startswith(("/api/", "/mcp/")) or path == "/mcp") and path not in PUBLIC_PATHS \
                    and not cookie_only:
                principal = await anyio.to_thread.run_sync(
                    authenticate_any, self.hub, _header(scope, b"authorization"))
                wanted = "human" if path.startswith(HUMAN_PATHS) else "agent"
                if principal["kind"] != wanted:
                    raise Unauthenticated(f"a valid {wanted} token is required")
                scope.setdefault("state", {})["principal"] = principal
            if scope.get("method") in BODY_METHODS:
                receive = await self._buffer(scope, receive, self.settings.rest_max_body_bytes, declared)
        except SwitchboardError as exc:
            await _refuse(exc, scope, receive, send)
            return
        except _ClientGone:
            return  # nobody to answer, nothing acknowledged: the app never sees half a request
        await self.app(scope, receive, send)

    async def _hook(self, scope: Scope, receive: Receive, send: Send, path: str, declared: str | None) -> None:
        if scope.get("method") not in BODY_METHODS:
            await self.app(scope, receive, send)  # no body is read for these: the route answers 405
            return
        source = path[len("/hooks/"):].strip("/")
        # Only a URL naming an enabled source takes a place: slow bodies sent to made-up ids held
        # every place of the total and refused the real sources' deliveries 429 (a review, 128
        # connections). The answer is the receiver's 404, before the body is read.
        if await known_source(self.hub, source) is None:
            await _refuse(NotFound(NO_SUCH_SOURCE), scope, receive, send)
            return
        cap = self.settings.source_body_concurrency
        if self._reading[source] >= cap or self._total >= 8 * cap:
            whose = "this source" if self._reading[source] >= cap else "all sources"
            await _refuse(RateLimited(f"too many deliveries are being received for {whose}; retry shortly"),
                          scope, receive, send)
            return
        self._reading[source] += 1
        self._total += 1
        try:
            if scope.get("method") in BODY_METHODS:
                receive = await self._buffer(scope, receive, self.settings.max_body_bytes, declared)
        except SwitchboardError as exc:
            if isinstance(exc, PayloadTooLarge):
                self.hub.counters["deliveries_too_large"] += 1  # as the receiver counts them
            else:
                self.hub.counters["deliveries_" + exc.code] += 1
            from switchboard import metrics

            metrics.delivery_refused(self.hub, source, exc.status, exc.code)  # `source show` tallies
            await _refuse(exc, scope, receive, send)
            return
        except _ClientGone:
            return
        finally:
            self._total -= 1
            self._reading[source] -= 1
            if self._reading[source] <= 0:
                del self._reading[source]
        await self.app(scope, receive, send)

    async def _buffer(self, scope: Scope, receive: Receive, limit: int, declared: str | None) -> Receive:
        """Read the whole body under ``limit`` bytes (``declared``: its ``Content-Length``, if
        any); return a replaying receive.

        Raises:
            PayloadTooLarge: declared or actual size over ``limit``.
            _ClientGone: the client disconnected before the whole body arrived.
        """
        size = None if declared is None else whole_number(declared.strip(), 19)
        if declared is not None and (size is None or size > limit):
            # Not a number, or past 19 digits (over any limit): refused as too large.
            raise PayloadTooLarge(f"the body is over the limit of {limit} bytes")
        chunks: list[bytes] = []
        size = 0
        # The time to receive it is bounded by the server protocol (server_protocol.py, 408).
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                log.debug("client disconnected mid-body on %s", scope.get("path"))
                raise _ClientGone
            body = message.get("body", b"")
            size += len(body)
            if size > limit:
                raise PayloadTooLarge(f"the body is over the limit of {limit} bytes")
            chunks.append(body)
            if not message.get("more_body", False):
                break
        replay: list[Message] = [{"type": "http.request", "body": b"".join(chunks), "more_body": False}]

        async def replaying() -> Message:
            if replay:
                return replay.pop()
            return await receive()

        return replaying


class _ClientGone(Exception):
    """The client disconnected before its request body was complete."""


async def _refuse(exc: SwitchboardError, scope: Scope, receive: Receive, send: Send) -> None:
    response = from_error(exc)
    if exc.status == 401:
        response.headers["WWW-Authenticate"] = "Bearer"
    if exc.status == 429:
        response.headers["Retry-After"] = str(RETRY_AFTER_SECONDS)
    if exc.status in (404, 408, 413) or isinstance(exc, AmbiguousFraming):
        # The rest of the body is not read: close, with the server's lingering close, so a client
        # still sending (one that reads only after writing its body) reads this answer instead
        # of a reset when the header timer fires (a 404 before the body: review, 20 MiB at 1.5 MB/s).
        response.headers["Connection"] = "close"
    await response(scope, receive, send)

