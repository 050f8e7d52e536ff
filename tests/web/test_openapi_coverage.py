"""The OpenAPI document covers every route (issue 14): every Flask rule and every ASGI route,
with each of its methods, is an operation in ``/api/v1/openapi.json``."""

from __future__ import annotations

import re
from typing import Any

from starlette.routing import Mount, Route

from switchboard.web.asgi import create_app
from tests.conftest import World

# Trailing-slash twins of documented routes answer the same; HEAD/OPTIONS are automatic.
_TWINS = {"/hooks/{source_id}/", "/mcp/"}
_AUTOMATIC = {"HEAD", "OPTIONS"}


def _openapi_path(rule: str) -> str:
    return re.sub(r"<(?:[a-z_]+:)?([a-z_]+)>", r"{\1}", rule)


def _routes(asgi: Any) -> tuple[set[tuple[str, str]], Any]:
    """``({(openapi path, method)}, the mounted Flask app)`` of the ASGI root."""
    found: set[tuple[str, str]] = set()
    flask_app = None
    for route in asgi.routes:
        if isinstance(route, Mount):
            flask_app = route.app.app  # a2wsgi's WSGIMiddleware keeps the Flask app as .app
            for rule in flask_app.url_map.iter_rules():
                if rule.endpoint == "static" or rule.rule.startswith("/ui/"):  # the web UI is HTML, not API
                    continue
                for method in rule.methods or ():
                    # A route that only answers 405 is no operation (as on the ASGI side).
                    if method not in _AUTOMATIC and not rule.endpoint.endswith("wrong_method"):
                        found.add((_openapi_path(rule.rule), method.lower()))
        elif isinstance(route, Route) and route.path not in _TWINS:
            methods = route.methods or {"GET", "POST", "DELETE"}  # a bare ASGI app (/mcp) takes all three
            for method in methods:
                if method not in _AUTOMATIC and not getattr(route.endpoint, "__name__", "").endswith("wrong_method"):
                    found.add((route.path, method.lower()))
    return found, flask_app


def test_openapi_documents_every_flask_and_asgi_route(world: World) -> None:
    asgi = create_app(world.settings, migrate=False)
    try:
        routes, flask_app = _routes(asgi)
        doc = flask_app.test_client().get("/api/v1/openapi.json").get_json()
    finally:
        asgi.state.hub.close()
    documented = {(path, method) for path, ops in doc["paths"].items() for method in ops}
    assert len(routes) > 25
    missing = sorted(routes - documented)
    assert not missing, f"routes without an OpenAPI operation: {missing}"
    for must in ("/api/v1/human/todos", "/api/v1/human/quarantine", "/api/v1/agent/tools",
                 "/api/v1/agent/stream", "/api/v1/health", "/api/v1/ready", "/metrics", "/hooks/{source_id}"):
        assert must in doc["paths"], must
    assert doc["openapi"] == "3.1.0"
    for path, ops in doc["paths"].items():
        for method, op in ops.items():
            assert op["responses"] and all("description" in r for r in op["responses"].values()), (path, method)
