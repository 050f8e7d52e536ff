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

from typing import TYPE_CHECKING, Any

from flask import Blueprint

from switchboard.web import rest_calls

if TYPE_CHECKING:
    pass

bp = Blueprint("rest_agent_friends", __name__, url_prefix="/api/v1")








@bp.get("/friends")
def friend_list() -> Any:
    """The calling agent's friendships and requests (``friend_list``)."""
    return rest_calls.run_tool("friend_list", {})


@bp.post("/friends/requests")
def friend_request() -> Any:
    """Ask another human's agent to accept work (``friend_request``)."""
    return rest_calls.run_tool("friend_request", rest_calls.json_body(), 201)


@bp.post("/friends/requests/<request_id>/respond")
def friend_respond(request_id: str) -> Any:
    """Approve (with a bound human decision) or decline a request (``friend_respond``)."""
    return rest_calls.run_tool("friend_respond", {**rest_calls.json_body(), "request_id": request_id})


@bp.post("/friends/<friendship_id>/revoke")
def friend_revoke(friendship_id: str) -> Any:
    """End a friendship of the calling agent (``friend_revoke``)."""
    return rest_calls.run_tool("friend_revoke", {"friendship_id": friendship_id})


@bp.post("/todos")
def todo_create() -> Any:
    """Create a todo on a friend's queue or an own project (``todo_create``)."""
    return rest_calls.run_tool("todo_create", rest_calls.json_body(), 201)
