"""REST for humans: the items waiting on the calling human (DESIGN.md §6.3, §6.5, §6.6).

Routes take a human API token (``Authorization: Bearer sbh_...``, vended by ``switchboard
token vend-human``) and act only on items waiting on that human: another human's item is
``not_found``, like an unknown one. Decisions take the same path as the CLI and the web UI
(:func:`switchboard.inbox.items.resolve`, then :meth:`switchboard.hub.Hub.after_decision`).

Each view's docstring carries its OpenAPI operation after ``---`` (apispec-webframeworks).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from flask import Blueprint, jsonify, request

from switchboard import admin
from switchboard.inbox import items as inbox
from switchboard.mcp_server.callers import bearer
from switchboard.web import rest_calls, schemas

if TYPE_CHECKING:
    pass

bp = Blueprint("rest_human_inbox", __name__, url_prefix="/api/v1/human")






def _human_id() -> str:
    with rest_calls.hub().db.read() as s:
        return admin.authenticate_human(s, bearer(request.headers.get("Authorization"))).id


@bp.get("/inbox")
def human_inbox() -> Any:
    """Items waiting on the calling human.
    ---
    get:
      summary: The calling human's inbox (open items by default)
      security: [{human: []}]
      parameters:
      - in: query
        schema: HumanInboxQuery
      responses:
        200: {content: {application/json: {schema: HumanInboxPage}}}
        400: {content: {application/problem+json: {schema: Problem}}}
        401: {content: {application/problem+json: {schema: Problem}}}
    """
    args = schemas.query_args(schemas.HumanInboxQuery(), request.args)
    human_id = _human_id()
    status = args.get("status", "open")
    with rest_calls.hub().db.read() as s:
        return jsonify(inbox.page_for_human(s, human_id=human_id, status=None if status == "all" else status,
                                            limit=args.get("limit", 100), cursor=args.get("cursor")))


def _resolve(item_id: str, **kwargs: Any) -> Any:
    hub = rest_calls.hub()
    human_id = _human_id()
    with hub.db.write() as s:
        data, agent_id = inbox.resolve(s, hub.clock, item_id, via="rest", human_id=human_id, **kwargs)
    hub.after_decision(agent_id)  # rings inbox_wait; a permission verdict goes to its session now
    return jsonify(data)


@bp.post("/inbox/<item_id>/answer")
def human_answer(item_id: str) -> Any:
    """Answer a question waiting on the calling human.
    ---
    post:
      summary: Answer a question
      security: [{human: []}]
      parameters:
      - {in: path, name: item_id, required: true, schema: {type: string}}
      requestBody: {required: true, content: {application/json: {schema: AnswerBody}}}
      responses:
        200: {content: {application/json: {schema: InboxItem}}}
        400: {content: {application/problem+json: {schema: Problem}}}
        401: {content: {application/problem+json: {schema: Problem}}}
        404: {content: {application/problem+json: {schema: Problem}}}
        409: {content: {application/problem+json: {schema: Problem}}}
    """
    body = schemas.load(schemas.AnswerBody(), rest_calls.json_body())
    return _resolve(item_id, answer=body["answer"], note=body.get("note"))


@bp.post("/inbox/<item_id>/decide")
def human_decide(item_id: str) -> Any:
    """Approve or deny an approval waiting on the calling human.
    ---
    post:
      summary: Decide an approval
      security: [{human: []}]
      parameters:
      - {in: path, name: item_id, required: true, schema: {type: string}}
      requestBody: {required: true, content: {application/json: {schema: DecideBody}}}
      responses:
        200: {content: {application/json: {schema: InboxItem}}}
        400: {content: {application/problem+json: {schema: Problem}}}
        401: {content: {application/problem+json: {schema: Problem}}}
        404: {content: {application/problem+json: {schema: Problem}}}
        409: {content: {application/problem+json: {schema: Problem}}}
    """
    body = schemas.load(schemas.DecideBody(), rest_calls.json_body())
    return _resolve(item_id, decision=body["decision"], note=body.get("note"))
