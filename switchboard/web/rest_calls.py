"""What every REST route of the Flask app shares: the hub, the JSON body under the shape rules,
and an agent tool call on behalf of the request's bearer (DESIGN.md §6.3).

One place, so every route reads bodies the same strict way (``json_shape.loads_object``: an
empty body is ``{}``; NaN, lone surrogates, deep nesting are 400) and every agent call carries
the same session (``X-Switchboard-Session`` via :func:`~switchboard.mcp_server.callers.session_of`:
the lease fence's key and the adapter session of friend and permission verdicts).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from flask import current_app, jsonify, request

from switchboard.intake import json_shape
from switchboard.mcp_server.callers import SESSION_HEADER, bearer, resolve_caller, session_of
from switchboard.mcp_server.calls import invoke

if TYPE_CHECKING:
    from switchboard.hub import Hub


def hub() -> Hub:
    """The process hub the Flask app was built with."""
    return current_app.config["HUB"]  # type: ignore[no-any-return]


def json_body() -> dict[str, Any]:
    """The request body as a JSON object (empty body: ``{}``). Raises ``InvalidArgument``."""
    return json_shape.loads_object(request.get_data())


def run_tool(tool: str, args: dict[str, Any], status: int = 200) -> Any:
    """Call ``tool`` as the bearer agent (with its session) and answer the structured result as
    JSON with ``status``. Errors propagate as ``SwitchboardError`` (problem details)."""
    the_hub = hub()
    token = bearer(request.headers.get("Authorization"))
    caller = session_of(resolve_caller(the_hub, token), token, header=request.headers.get(SESSION_HEADER))
    resp = jsonify(invoke(the_hub, caller, tool, args))
    resp.status_code = status
    return resp
