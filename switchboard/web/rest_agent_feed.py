"""REST for agents: the feed, the inbox and subscriptions (DESIGN.md §6.3).

Routes take ``Authorization: Bearer sbk_...`` and run the same handlers as the MCP tools
(:func:`switchboard.mcp_server.calls.invoke`). The human side of the inbox is
:mod:`switchboard.web.rest_human_inbox`. Requests are validated with the marshmallow schemas
of :mod:`switchboard.web.schemas`; errors are problem details. ``inbox_wait`` over REST is the native async route ``GET /api/v1/inbox/wait``
(:mod:`switchboard.web.agent_api`), so a waiting request holds no thread.

Each view's docstring carries its OpenAPI operation after ``---`` (apispec-webframeworks).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from flask import Blueprint, request

from switchboard.web import rest_calls, schemas

if TYPE_CHECKING:
    pass

bp = Blueprint("rest_agent_feed", __name__, url_prefix="/api/v1")








@bp.get("/feed")
def feed() -> Any:
    """Feed events (``feed_read``).
    ---
    get:
      summary: Read feed events with an explicit or stored cursor
      description: >-
        Without `since` the agent's stored cursor per project is used and advanced past the
        events returned. `next_since` is in every page; `limit` over 200 is refused.
      security: [{agent: []}]
      parameters:
      - in: query
        schema: FeedQuery
      responses:
        200: {content: {application/json: {schema: FeedPage}}}
        400: {content: {application/problem+json: {schema: Problem}}}
        401: {content: {application/problem+json: {schema: Problem}}}
        404: {content: {application/problem+json: {schema: Problem}}}
    """
    return rest_calls.run_tool("feed_read", schemas.query_args(schemas.FeedQuery(), request.args, lists=("kinds",)))


@bp.get("/inbox")
def inbox_read() -> Any:
    """The agent's questions and approvals (``inbox_read``).
    ---
    get:
      summary: The calling agent's inbox items with answers and decisions
      security: [{agent: []}]
      parameters:
      - in: query
        schema: InboxQuery
      responses:
        200: {content: {application/json: {schema: InboxPage}}}
        400: {content: {application/problem+json: {schema: Problem}}}
        401: {content: {application/problem+json: {schema: Problem}}}
    """
    return rest_calls.run_tool("inbox_read", schemas.query_args(schemas.InboxQuery(), request.args))


@bp.post("/inbox/questions")
def question_post() -> Any:
    """Ask the agent's human a question (``question_post``).
    ---
    post:
      summary: Post a question
      security: [{agent: []}]
      requestBody: {required: true, content: {application/json: {schema: QuestionBody}}}
      responses:
        201: {content: {application/json: {schema: InboxItem}}}
        400: {content: {application/problem+json: {schema: Problem}}}
        401: {content: {application/problem+json: {schema: Problem}}}
        403: {content: {application/problem+json: {schema: Problem}}}
        404: {content: {application/problem+json: {schema: Problem}}}
    """
    return rest_calls.run_tool("question_post", schemas.load(schemas.QuestionBody(), rest_calls.json_body()), status=201)


@bp.post("/inbox/approvals")
def approval_request() -> Any:
    """Ask the agent's human for an approval (``approval_request``).
    ---
    post:
      summary: Request an approval
      security: [{agent: []}]
      requestBody: {required: true, content: {application/json: {schema: ApprovalBody}}}
      responses:
        201: {content: {application/json: {schema: InboxItem}}}
        400: {content: {application/problem+json: {schema: Problem}}}
        401: {content: {application/problem+json: {schema: Problem}}}
        403: {content: {application/problem+json: {schema: Problem}}}
        404: {content: {application/problem+json: {schema: Problem}}}
    """
    return rest_calls.run_tool("approval_request", schemas.load(schemas.ApprovalBody(), rest_calls.json_body()), status=201)


@bp.post("/subscriptions")
def subscribe() -> Any:
    """Subscribe to feed events for the notifications trailer (``notify_subscribe``).
    ---
    post:
      summary: Subscribe to feed event kinds
      security: [{agent: []}]
      requestBody: {required: true, content: {application/json: {schema: SubscribeBody}}}
      responses:
        201: {content: {application/json: {schema: SubscriptionCreated}}}
        400: {content: {application/problem+json: {schema: Problem}}}
        401: {content: {application/problem+json: {schema: Problem}}}
        404: {content: {application/problem+json: {schema: Problem}}}
    """
    return rest_calls.run_tool("notify_subscribe", schemas.load(schemas.SubscribeBody(), rest_calls.json_body()), status=201)


@bp.delete("/subscriptions/<subscription_id>")
def unsubscribe(subscription_id: str) -> Any:
    """Remove a subscription (``notify_unsubscribe``).
    ---
    delete:
      summary: Remove a subscription
      security: [{agent: []}]
      parameters:
      - {in: path, name: subscription_id, required: true, schema: {type: string}}
      responses:
        200: {content: {application/json: {schema: SubscriptionRemoved}}}
        401: {content: {application/problem+json: {schema: Problem}}}
        404: {content: {application/problem+json: {schema: Problem}}}
    """
    return rest_calls.run_tool("notify_unsubscribe", {"subscription_id": subscription_id})
