"""REST for humans: their agents' friendships (DESIGN.md §6.6).

| route | what |
|---|---|
| ``GET /api/v1/human/friends`` | friendships the human is part of (either side) |
| ``POST /api/v1/human/friends/<id>/revoke`` | revoke one; no new todos flow from that moment |

Routes take a human API token (``Authorization: Bearer sbh_...``). Friend requests are decided
like any inbox item (:mod:`switchboard.web.rest_human_inbox`). Errors are problem details.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from flask import Blueprint, jsonify, request

from switchboard import admin
from switchboard.friends import requests as friends
from switchboard.mcp_server.callers import bearer
from switchboard.web import rest_calls

if TYPE_CHECKING:
    pass

bp = Blueprint("rest_human_friends", __name__, url_prefix="/api/v1/human")




@bp.get("/friends")
def human_friends() -> Any:
    """Friendships the calling human is part of."""
    with rest_calls.hub().db.read() as s:
        human = admin.authenticate_human(s, bearer(request.headers.get("Authorization")))
        return jsonify({"friendships": friends.list_for_human(s, human.id)})


@bp.post("/friends/<friendship_id>/revoke")
def human_revoke(friendship_id: str) -> Any:
    """Revoke a friendship the calling human is part of."""
    hub = rest_calls.hub()
    with hub.db.write() as s:
        human = admin.authenticate_human(s, bearer(request.headers.get("Authorization")))
        return jsonify(friends.revoke(s, hub.clock, friendship_id, human_id=human.id))
