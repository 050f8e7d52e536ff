"""REST for friend requests, friendships and ``todo_create`` (DESIGN.md §6.3, §6.6).

Agents (``Authorization: Bearer sbk_...``), the same operations as the tools:

| route | tool |
|---|---|
| ``GET /api/v1/friends`` | ``friend_list`` |
| ``POST /api/v1/friends/requests`` (``to_agent``, ``queues``, ``reason``) | ``friend_request`` (201) |
| ``POST /api/v1/friends/requests/<id>/respond`` (``decision``) | ``friend_respond`` |
| ``POST /api/v1/friends/<id>/revoke`` | ``friend_revoke`` |
| ``POST /api/v1/todos`` (``project``, ``queue``, ``title``, ``body?``, ``assign?``, ``priority?``) | ``todo_create`` (201) |

The humans' side is :mod:`switchboard.web.rest_human_friends`.

Friend requests are decided like any inbox item: ``POST /api/v1/human/inbox/<id>/decide``.
Errors are problem details with the tool error codes (``human_approval_required`` is 403).
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from flask import Blueprint, current_app, jsonify, request

from switchboard.errors import InvalidArgument
from switchboard.mcp_server.callers import bearer, resolve_caller
from switchboard.mcp_server.calls import invoke

if TYPE_CHECKING:
    from switchboard.hub import Hub

bp = Blueprint("rest_agent_friends", __name__, url_prefix="/api/v1")


def _hub() -> Hub:
    return current_app.config["HUB"]  # type: ignore[no-any-return]


def _json() -> dict[str, Any]:
    data = request.get_json(force=True, silent=True) if request.get_data() else {}
    if not isinstance(data, dict):
        raise InvalidArgument("the body must be a JSON object (Content-Type: application/json)")
    return data


def _run(tool: str, args: dict[str, Any], status: int = 200) -> Any:
    hub = _hub()
    caller = resolve_caller(hub, bearer(request.headers.get("Authorization")))
    session_id = request.headers.get("X-Switchboard-Session")
    if session_id:
        caller = dataclasses.replace(caller, session_id=session_id[:80])
    resp = jsonify(invoke(hub, caller, tool, args))
    resp.status_code = status
    return resp


@bp.get("/friends")
def friend_list() -> Any:
    """The calling agent's friendships and requests (``friend_list``)."""
    return _run("friend_list", {})


@bp.post("/friends/requests")
def friend_request() -> Any:
    """Ask another human's agent to accept work (``friend_request``)."""
    return _run("friend_request", _json(), 201)


@bp.post("/friends/requests/<request_id>/respond")
def friend_respond(request_id: str) -> Any:
    """Approve (with a bound human decision) or decline a request (``friend_respond``)."""
    return _run("friend_respond", {**_json(), "request_id": request_id})


@bp.post("/friends/<friendship_id>/revoke")
def friend_revoke(friendship_id: str) -> Any:
    """End a friendship of the calling agent (``friend_revoke``)."""
    return _run("friend_revoke", {"friendship_id": friendship_id})


@bp.post("/todos")
def todo_create() -> Any:
    """Create a todo on a friend's queue or an own project (``todo_create``)."""
    return _run("todo_create", _json(), 201)
