"""The ASGI root that ``uvicorn app:app`` serves (DESIGN.md §3).

Native async routes for machine-facing paths (the receiver, ``/mcp``, the agent stream and
tool routes); the Flask app, mounted through ``a2wsgi``, for everything else. The lifespan
applies migrations, starts the MCP session manager, the sweeper, and (embedded mode) the
inline worker thread.
"""

from __future__ import annotations

import logging
import re
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
from a2wsgi import WSGIMiddleware
from mcp.server.streamable_http_manager import StreamableHTTPASGIApp
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Mount, Route
from starlette.types import ASGIApp, Receive, Scope, Send

from switchboard.clock import Clock
from switchboard.config import Settings
from switchboard.db import upgrade
from switchboard.errors import SwitchboardError, Unauthenticated
from switchboard.hub import Hub
from switchboard.logs import RequestIdMiddleware
from switchboard.mcp_server.hub_server import build_server, transport_security
from switchboard.mcp_server.sessions import AgentSessions, bind
from switchboard.web import agent_api, human_stream, relay_api
from switchboard.web.flask_app import create_flask_app
from switchboard.web.forwarded import ForwardedHost, mcp_transport_security
from switchboard.web.guard import RETRY_AFTER_SECONDS, RequestGuard, authenticate_any, route_path
from switchboard.web.mcp_problems import MCPProblems
from switchboard.web.mcp_streams import McpStreamRules
from switchboard.web.problems import from_error, problem
from switchboard.web.receiver import HookReceiver, wrong_method
from switchboard.web.revocation_watch import RevocationWatch
from switchboard.web.writer_child import ProcessWriter

log = logging.getLogger(__name__)
SWITCH_INTERVAL_SECONDS = 0.001
CHILD_READY_SECONDS = 30
"""How long start-up waits for embedded mode's processing process (``SWITCHBOARD_PROCESSING``)."""


class RequireAgent:
    """ASGI wrapper for ``/mcp``: 401 problem details unless the bearer token is an agent's;
    binds the request to its token (a session answers only the token that opened it) and caps
    open sessions per agent with 429 + ``Retry-After`` (issue 13 item 4)."""

    def __init__(self, app: ASGIApp, hub: Hub, sessions: AgentSessions | None = None) -> None:
        self.app = app
        self.hub = hub
        self.sessions = sessions

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            principal = scope.get("state", {}).get("principal")
            if principal is None or principal["kind"] != "agent":
                headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
                try:
                    principal = await anyio.to_thread.run_sync(authenticate_any, self.hub,
                                                               headers.get("authorization"))
                    if principal["kind"] != "agent":
                        raise Unauthenticated("a valid agent token is required")
                except SwitchboardError as exc:
                    await from_error(exc)(scope, receive, send)
                    return
            bind(scope, principal["id"], principal["token_id"])
            opening = scope.get("method") == "POST" and not any(
                k.lower() == b"mcp-session-id" for k, _ in scope.get("headers", []))
            if opening and self.sessions is not None and \
                    self.sessions.count_for(principal["id"]) >= self.sessions.per_agent:
                await problem(429, "rate_limited",
                              f"this agent already has {self.sessions.per_agent} open MCP sessions; close one "
                              "(DELETE /mcp) or let one expire", {"Retry-After": str(RETRY_AFTER_SECONDS)})(
                    scope, receive, send)
                return
        await self.app(scope, receive, send)


_METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE")
HOOK_PATH = re.compile(r"/hooks/([^/]+)/?")
"""What the routes ``/hooks/{source_id}`` and ``/hooks/{source_id}/`` match (Starlette's ``str``
parameter is ``[^/]+``)."""


class HookShortcut:
    """The innermost middleware: ``POST /hooks/<source_id>`` (with or without the trailing
    slash; the path as the router matches it, without an ASGI root path) goes straight to the
    receiver; everything else to Starlette's exception layer and router.

    A delivery has been through the whole stack by then (the error handler's 500 problem, the
    request id, the proxy headers, :class:`RequestGuard` and its body places, one instance for
    every request); it skips only Starlette's exception wrappers, router, route and ``Request``,
    which were about a seventh of its time on the event loop (issue 11).
    """

    def __init__(self, app: ASGIApp, receiver: ASGIApp) -> None:
        self.app = app
        self.receiver = receiver

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "POST":
            match = HOOK_PATH.fullmatch(route_path(scope))
            if match is not None:
                scope["path_params"] = {"source_id": match[1]}
                await self.receiver(scope, receive, send)
                return
        await self.app(scope, receive, send)


def _with_405s(routes: list[Any]) -> list[Any]:
    """``routes`` plus, for each path whose routes take only some methods, one route answering
    the others with a 405 problem and ``Allow`` (RFC 9110 §15.5.6). Without it a wrong method
    fell through to the Flask mount at ``/`` and read 404 "not found" (a review). HEAD is
    refused on streams too: Starlette answers HEAD on a GET route, and a HEAD of the agent
    stream attached a stream that never ended, holding one of the agent's places for good."""
    taken: dict[str, set[str]] = {}
    for route in routes:
        if isinstance(route, Route) and route.methods:
            taken.setdefault(route.path, set()).update(route.methods)
    extra = []
    for path, methods in taken.items():
        others = [m for m in _METHODS if m not in methods]
        allowed = ", ".join(sorted(methods - {"HEAD"}))
        if others:
            extra.append(Route(path, _wrong_method(path, allowed), methods=others))
    return routes + extra


def _wrong_method(path: str, allowed: str) -> Any:
    async def wrong_method(request: Request) -> Response:
        return problem(405, "method_not_allowed", f"{path} accepts {allowed} only", headers={"Allow": allowed})

    return wrong_method


def create_app(settings: Settings | None = None, clock: Clock | None = None, migrate: bool = True,
               settle: bool = False) -> Starlette:
    """Build the ASGI app.

    Args:
        settings: defaults to :meth:`Settings.from_env` (entry points only).
        clock: injected clock for tests.
        migrate: apply migrations at start-up (``serve`` does).
        settle: freeze the start-up heap once the app is up (:meth:`Hub.settle`): for a process
            that runs one app (``serve``, ``uvicorn app:app``), not for tests that build many.
    """
    settings = settings or Settings.from_env()
    if migrate:
        upgrade(settings)
    hub = Hub(settings, clock=clock, role="serve")
    mcp_server = build_server(hub)
    session_manager = AgentSessions(
        app=mcp_server, security_settings=mcp_transport_security(transport_security(settings.public_url), settings),
        per_agent=settings.mcp_sessions_per_agent, session_idle_timeout=settings.mcp_session_idle_seconds,
    )
    watch = RevocationWatch(hub, session_manager)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        # The event loop shares the GIL with the writer, processing and maintenance threads; a
        # CPU-bound thread keeps it for up to the switch interval (5 ms by default) whenever the
        # loop wants it back. 1 ms keeps the loop's waits short (issue 11: health p99 <= 50 ms).
        sys.setswitchinterval(SWITCH_INTERVAL_SECONDS)
        writer = hub.delivery_writer
        if isinstance(writer, ProcessWriter):
            writer.start()  # before waiting for the processing process: the two import side by side
        if not await anyio.to_thread.run_sync(hub.dispatcher.wait_ready, CHILD_READY_SECONDS):
            log.warning("the processing process is not ready after %d s; serving anyway", CHILD_READY_SECONDS)
        if isinstance(writer, ProcessWriter) and not await anyio.to_thread.run_sync(writer.wait_ready,
                                                                                      CHILD_READY_SECONDS):
            log.warning("the delivery writer process is not ready after %d s; serve writes deliveries itself "
                        "until it is", CHILD_READY_SECONDS)
        if settle:
            await anyio.to_thread.run_sync(hub.settle)
        hub.start_sweeper()
        async with session_manager.run(), anyio.create_task_group() as tasks:
            tasks.start_soon(watch.run)
            try:
                yield
            finally:
                tasks.cancel_scope.cancel()
                try:
                    if isinstance(writer, ProcessWriter):
                        # Shielded: this scope is cancelled, and an await in it would be cut
                        # short (and hub.close skipped). The child writes what it was sent
                        # while the loop runs.
                        with anyio.CancelScope(shield=True):
                            await writer.aclose()
                finally:
                    hub.close()

    async def not_found(request: Request, exc: Exception) -> Response:
        status = exc.status_code if isinstance(exc, HTTPException) else 404
        code = {404: "not_found", 405: "method_not_allowed"}.get(status, "http_error")
        return problem(status, code, "no such resource" if status == 404 else str(getattr(exc, "detail", "")))

    async def crashed(request: Request, exc: Exception) -> Response:
        log.exception("unhandled error on %s", request.url.path)
        return problem(500, "internal", "internal error")

    liveness = {"status": "ok", "database": "sqlite" if hub.db.is_sqlite else "postgresql",
                "jobs": hub.dispatcher.name}

    async def health(request: Request) -> Response:
        """``GET /api/v1/health``: liveness, answered on the event loop from memory. It never waits
        on the database, Redis or the WSGI threads (issue 11: p99 <= 50 ms under full ingest load);
        ``/api/v1/ready`` is the check that the database and Redis answer."""
        return JSONResponse(liveness)

    async def health_wrong_method(request: Request) -> Response:
        """As Flask answered it: OPTIONS lists the methods, anything else is a 405 problem."""
        if request.method == "OPTIONS":
            return Response(status_code=200, headers={"Allow": "GET, HEAD, OPTIONS"})
        return problem(405, "method_not_allowed", "/api/v1/health accepts GET and HEAD only",
                       headers={"Allow": "GET, HEAD, OPTIONS"})

    flask_app = create_flask_app(hub)
    mcp_app = RequireAgent(MCPProblems(McpStreamRules(StreamableHTTPASGIApp(session_manager), hub, session_manager)),
                           hub, session_manager)
    hooks = HookReceiver(hub)
    routes: list[Any] = [
        Route("/hooks/{source_id}", hooks, methods=["POST"]),
        Route("/hooks/{source_id}/", hooks, methods=["POST"]),
        Route("/hooks/{source_id}", wrong_method, methods=["GET", "PUT", "PATCH", "DELETE", "OPTIONS"]),
        Route("/hooks/{source_id}/", wrong_method, methods=["GET", "PUT", "PATCH", "DELETE", "OPTIONS"]),
        Route("/api/v1/health", health, methods=["GET"]),
        Route("/api/v1/health", health_wrong_method, methods=["POST", "PUT", "PATCH", "DELETE", "OPTIONS"]),
        Route("/mcp", mcp_app),
        Route("/mcp/", mcp_app),
        Route("/api/v1/agent/tools", agent_api.list_tools, methods=["GET"]),
        Route("/api/v1/agent/tools/{name}", agent_api.invoke_tool, methods=["POST"]),
        Route("/api/v1/agent/stream", agent_api.stream, methods=["GET"]),
        Route("/api/v1/inbox/wait", agent_api.inbox_wait, methods=["GET"]),
        Route("/api/v1/stream", human_stream.stream, methods=["GET"]),
        Route("/api/v1/agent/permission", relay_api.permission_request, methods=["POST"]),
        Route("/api/v1/agent/session/close", relay_api.close_session, methods=["POST"]),
        Mount("/", WSGIMiddleware(flask_app)),  # type: ignore[arg-type]
    ]
    routes[:-1] = _with_405s(routes[:-1])
    # Behind a reverse proxy: X-Forwarded-* only from SWITCHBOARD_TRUSTED_PROXIES (issue 12 #9).
    middleware = [Middleware(RequestIdMiddleware)]
    if settings.trusted_proxies:
        middleware.append(Middleware(ForwardedHost, trusted=settings.trusted_proxies))
    middleware.append(Middleware(RequestGuard, hub=hub))  # after the proxy headers are settled
    middleware.append(Middleware(HookShortcut, receiver=hooks))  # innermost: after the guard
    app = Starlette(routes=routes, lifespan=lifespan, middleware=middleware,
                    exception_handlers={HTTPException: not_found, Exception: crashed})
    app.state.hub = hub
    app.state.revocation_watch = watch
    app.state.mcp_sessions = session_manager
    # The human stream reads the UI's signed session cookie with the Flask app's own serializer.
    app.state.cookie_loader = flask_app.session_interface.get_signing_serializer(flask_app).loads  # type: ignore[attr-defined]
    return app
