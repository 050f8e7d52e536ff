"""The human-facing Flask app (REST API and the web UI under ``/ui/``), mounted under the ASGI root.

Every error is RFC 9457 problem details, rendered here in one place.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from flask import Flask, jsonify, redirect, request
from werkzeug.exceptions import HTTPException

from switchboard import __version__
from switchboard.errors import SwitchboardError
from switchboard.web.problems import MEDIA_TYPE, problem_body

if TYPE_CHECKING:
    from switchboard.hub import Hub


def create_flask_app(hub: Hub) -> Flask:
    """The Flask app for ``hub``: ``/``, the agent and human REST routes and
    the OpenAPI document ``/api/v1/openapi.json``."""
    app = Flask("switchboard")
    app.config["HUB"] = hub

    @app.get("/")
    def index() -> Any:
        """A browser goes to the web UI; any other client gets the service's map as JSON."""
        if request.accept_mimetypes.best_match(["application/json", "text/html"]) == "text/html":
            return redirect("/ui/", code=302)
        return jsonify({"service": "switchboard", "version": __version__, "ui": "/ui/",
                        "openapi": "/api/v1/openapi.json", "docs": "README.md", "mcp": "/mcp",
                        "hooks": "/hooks/<source_id>"})

    # REST by caller: agents (Bearer sbk_) under /api/v1, humans (Bearer sbh_) under /api/v1/human.
    from switchboard.web import (
        rest_agent_feed,
        rest_agent_friends,
        rest_agent_todos,
        rest_human_access,
        rest_human_friends,
        rest_human_inbox,
        rest_human_work,
        rest_ops,
    )
    from switchboard.web.openapi import build_spec

    for module in (rest_agent_todos, rest_agent_feed, rest_agent_friends, rest_human_inbox, rest_human_work,
                   rest_human_friends, rest_human_access, rest_ops):
        app.register_blueprint(module.bp)
    from switchboard.web import ui

    ui.install(app)  # the web UI under /ui/ (sessions, CSRF)
    openapi_doc: dict[str, Any] = {}

    @app.get("/api/v1/openapi.json")
    def openapi() -> Any:
        if not openapi_doc:  # built once, on first request (no auth: it holds no data)
            openapi_doc.update(build_spec(app))
        return jsonify(openapi_doc)

    @app.errorhandler(SwitchboardError)
    def on_error(exc: SwitchboardError) -> Any:
        resp = _problem(exc.status, exc.code, exc.message)
        if exc.status == 401:
            resp.headers["WWW-Authenticate"] = "Bearer"
        return resp

    @app.errorhandler(HTTPException)
    def on_http(exc: HTTPException) -> Any:
        code = {404: "not_found", 405: "method_not_allowed", 400: "invalid_argument"}.get(exc.code or 500, "http_error")
        resp = _problem(exc.code or 500, code, exc.description or "")
        allowed = getattr(exc, "valid_methods", None)
        if allowed:  # RFC 9110 §15.5.6: a 405 lists the methods the resource takes
            resp.headers["Allow"] = ", ".join(allowed)
        return resp

    @app.errorhandler(Exception)
    def on_crash(exc: Exception) -> Any:
        app.logger.exception("unhandled error")
        return _problem(500, "internal", "internal error")

    return app


def _problem(status: int, code: str, detail: str) -> Any:
    resp = jsonify(problem_body(status, code, detail))
    resp.status_code = status
    resp.mimetype = MEDIA_TYPE
    return resp
