"""REST for agents: the todo and identity operations, the same handlers as the MCP tools.

``Authorization: Bearer <agent token>`` on every route; errors are problem details with the
tool error codes (DESIGN.md §6.3) mapped to HTTP statuses (404, 409, 400, 403, 401, 429).

| route | tool |
|---|---|
| ``GET /api/v1/whoami`` | ``whoami`` |
| ``GET /api/v1/todos?project=&queue=&state=&limit=`` | ``todo_list`` |
| ``GET /api/v1/todos/<id>`` | ``todo_get`` |
| ``POST /api/v1/todos/claim`` (JSON ``project``, ``queue``, ``lease_seconds``) | ``todo_claim`` (next) |
| ``POST /api/v1/todos/<id>/claim|heartbeat|complete|fail|release`` (JSON body) | the same tool by id |
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from flask import Blueprint, current_app, jsonify, request

from switchboard.errors import InvalidArgument
from switchboard.mcp_server.tools import bearer, invoke, resolve_caller

if TYPE_CHECKING:
    from switchboard.hub import Hub

bp = Blueprint("rest_todos", __name__, url_prefix="/api/v1")
_ACTIONS = ("claim", "heartbeat", "complete", "fail", "release")


def _run(tool: str, args: dict[str, Any]) -> Any:
    hub: Hub = current_app.config["HUB"]
    caller = resolve_caller(hub, bearer(request.headers.get("Authorization")))
    return jsonify(invoke(hub, caller, tool, args))


def _body() -> dict[str, Any]:
    if not request.get_data():
        return {}
    data = request.get_json(silent=True)
    if not isinstance(data, dict):
        raise InvalidArgument("the body must be a JSON object")
    return data


@bp.get("/whoami")
def whoami() -> Any:
    return _run("whoami", {})


@bp.get("/todos")
def list_todos() -> Any:
    args: dict[str, Any] = {k: v for k, v in request.args.items() if k in ("project", "queue", "state")}
    if "limit" in request.args:
        raw = request.args["limit"]
        if not raw.isdigit():
            raise InvalidArgument("limit must be a whole number from 1 to 200")
        args["limit"] = int(raw)
    unknown = set(request.args) - {"project", "queue", "state", "limit"}
    if unknown:
        raise InvalidArgument(f"unknown query parameter(s): {', '.join(sorted(unknown))}")
    return _run("todo_list", args)


@bp.get("/todos/<todo_id>")
def get_todo(todo_id: str) -> Any:
    return _run("todo_get", {"id": todo_id})


@bp.post("/todos/claim")
def claim_next() -> Any:
    return _run("todo_claim", _body())


@bp.post("/todos/<todo_id>/<action>")
def act(todo_id: str, action: str) -> Any:
    if action not in _ACTIONS:
        raise InvalidArgument(f"unknown action {action!r}; one of {', '.join(_ACTIONS)}")
    body = _body()
    if "id" in body:
        raise InvalidArgument("the todo id goes in the path, not the body")
    return _run(f"todo_{action}", {**body, "id": todo_id})
