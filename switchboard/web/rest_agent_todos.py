"""REST for agents: the todo and identity operations, the same handlers as the MCP tools.

``Authorization: Bearer <agent token>`` on every route; errors are problem details with the
tool error codes (DESIGN.md §6.3) mapped to HTTP statuses (404, 409, 400, 403, 401, 429).

| route | tool |
|---|---|
| ``GET /api/v1/whoami`` | ``whoami`` |
| ``GET /api/v1/todos?project=&queue=&state=&limit=&cursor=`` | ``todo_list`` |
| ``GET /api/v1/todos/<id>`` | ``todo_get`` |
| ``GET /api/v1/todos/<id>/payload?part=&offset=&length=`` | ``todo_payload`` |
| ``POST /api/v1/todos/claim`` (JSON ``project``, ``queue``, ``lease_seconds``) | ``todo_claim`` (next) |
| ``POST /api/v1/todos/<id>/claim|heartbeat|complete|fail|release`` (JSON body) | the same tool by id |
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from flask import Blueprint, request

from switchboard.errors import InvalidArgument
from switchboard.intake import json_shape
from switchboard.text import whole_number
from switchboard.web import rest_calls

if TYPE_CHECKING:
    pass

bp = Blueprint("rest_agent_todos", __name__, url_prefix="/api/v1")
_ACTIONS = ("claim", "heartbeat", "complete", "fail", "release")




def _body() -> dict[str, Any]:
    return json_shape.loads_object(request.get_data())


@bp.get("/whoami")
def whoami() -> Any:
    """The calling agent, its human and grants (``whoami``).
    ---
    get:
      summary: Who am I
      security: [{agent: []}]
      responses:
        200: {content: {application/json: {schema: Whoami}}}
        401: {content: {application/problem+json: {schema: Problem}}}
    """
    return rest_calls.run_tool("whoami", {})


@bp.get("/todos")
def list_todos() -> Any:
    """Todos the agent can read (``todo_list``).
    ---
    get:
      summary: List todos
      security: [{agent: []}]
      parameters:
      - {in: query, name: project, schema: {type: string}}
      - {in: query, name: queue, schema: {type: string}}
      - {in: query, name: state, schema: {type: string, enum: [pending, claimed, done, failed, cancelled]}}
      - {in: query, name: limit, schema: {type: integer, minimum: 1, maximum: 200}}
      - {in: query, name: cursor, description: next_cursor of an earlier page, schema: {type: string}}
      responses:
        200: {content: {application/json: {schema: TodoPage}}}
        400: {content: {application/problem+json: {schema: Problem}}}
        401: {content: {application/problem+json: {schema: Problem}}}
        404: {content: {application/problem+json: {schema: Problem}}}
    """
    args: dict[str, Any] = {k: v for k, v in request.args.items() if k in ("project", "queue", "state", "cursor")}
    if "limit" in request.args:
        limit = whole_number(request.args["limit"], 3)
        if limit is None:
            raise InvalidArgument("limit must be a whole number from 1 to 200")
        args["limit"] = limit
    unknown = set(request.args) - {"project", "queue", "state", "limit", "cursor"}
    if unknown:
        raise InvalidArgument(f"unknown query parameter(s): {', '.join(sorted(unknown))}")
    return rest_calls.run_tool("todo_list", args)


@bp.route("/todos/claim", methods=["GET", "PUT", "PATCH", "DELETE"])
def claim_wrong_method() -> Any:
    """``/todos/claim`` takes POST only: without this, a GET read ``claim`` as a todo id and
    answered 404 "no such todo" (a new-user run)."""
    from werkzeug.exceptions import MethodNotAllowed

    raise MethodNotAllowed(valid_methods=["POST"], description="/api/v1/todos/claim accepts POST only")


@bp.get("/todos/<todo_id>")
def get_todo(todo_id: str) -> Any:
    """One todo with payload and attempts (``todo_get``).
    ---
    get:
      summary: Get a todo
      security: [{agent: []}]
      parameters:
      - {in: path, name: todo_id, required: true, schema: {type: string}}
      responses:
        200: {content: {application/json: {schema: Todo}}}
        401: {content: {application/problem+json: {schema: Problem}}}
        404: {content: {application/problem+json: {schema: Problem}}}
    """
    return rest_calls.run_tool("todo_get", {"todo_id": todo_id})


@bp.get("/todos/<todo_id>/payload")
def get_payload(todo_id: str) -> Any:
    """A byte range of a todo's payload or result as canonical JSON text (``todo_payload``).
    ---
    get:
      summary: Read a todo's payload (or result) in parts
      description: >-
        For payloads over the hub's size budget (`SWITCHBOARD_PAYLOAD_BUDGET_BYTES`, default
        64 KiB), which `GET /api/v1/todos/{todo_id}` returns as null with `payload_truncated`.
        Call with `offset` = `next_offset` until it is null; the concatenated `data` parses as
        the JSON value. Authorised like the todo itself (another project's todo is 404).
      security: [{agent: []}]
      parameters:
      - {in: path, name: todo_id, required: true, schema: {type: string}}
      - in: query
        schema: PayloadQuery
      responses:
        200: {content: {application/json: {schema: PayloadPart}}}
        400: {content: {application/problem+json: {schema: Problem}}}
        401: {content: {application/problem+json: {schema: Problem}}}
        404: {content: {application/problem+json: {schema: Problem}}}
    """
    from switchboard.web import schemas

    return rest_calls.run_tool("todo_payload", {**schemas.query_args(schemas.PayloadQuery(), request.args), "todo_id": todo_id})


@bp.post("/todos/claim")
def claim_next() -> Any:
    """Claim the next pending todo (``todo_claim``).
    ---
    post:
      summary: Claim the next todo
      security: [{agent: []}]
      requestBody: {content: {application/json: {schema: ClaimBody}}}
      responses:
        200: {content: {application/json: {schema: Claim}}}
        400: {content: {application/problem+json: {schema: Problem}}}
        401: {content: {application/problem+json: {schema: Problem}}}
        403: {content: {application/problem+json: {schema: Problem}}}
        404: {content: {application/problem+json: {schema: Problem}}}
    """
    return rest_calls.run_tool("todo_claim", _body())


@bp.post("/todos/<todo_id>/<action>")
def act(todo_id: str, action: str) -> Any:
    """``todo_claim|heartbeat|complete|fail|release`` on one todo.
    ---
    post:
      summary: Act on a held todo (claim, heartbeat, complete, fail, release)
      security: [{agent: []}]
      parameters:
      - {in: path, name: todo_id, required: true, schema: {type: string}}
      - {in: path, name: action, required: true, schema: {type: string, enum: [claim, heartbeat, complete, fail, release]}}
      requestBody: {content: {application/json: {schema: TodoActionBody}}}
      responses:
        200: {content: {application/json: {schema: Todo}}}
        400: {content: {application/problem+json: {schema: Problem}}}
        401: {content: {application/problem+json: {schema: Problem}}}
        403: {content: {application/problem+json: {schema: Problem}}}
        404: {content: {application/problem+json: {schema: Problem}}}
        409: {content: {application/problem+json: {schema: Problem}}}
    """
    if action not in _ACTIONS:
        raise InvalidArgument(f"unknown action {action!r}; one of {', '.join(_ACTIONS)}")
    body = _body()
    if "id" in body or "todo_id" in body:
        raise InvalidArgument("the todo id goes in the path, not the body")
    return rest_calls.run_tool(f"todo_{action}", {**body, "todo_id": todo_id})
