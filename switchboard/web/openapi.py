"""The OpenAPI 3.1 document of the REST API, served at ``GET /api/v1/openapi.json``.

Generated with apispec from the marshmallow schemas (:mod:`switchboard.web.schemas`) and the
operations in each Flask view's docstring (apispec-webframeworks' Flask plugin). The native
async routes (receiver, ``/mcp``, agent tools and stream, ``inbox/wait``) and the views without
an operation in their docstring are written out here; ``tests/web/test_openapi_coverage.py``
walks the Flask url_map and the ASGI routes so no route is left out.
"""

from __future__ import annotations

from http import HTTPStatus
from typing import Any

from apispec import APISpec
from apispec.ext.marshmallow import MarshmallowPlugin
from apispec_webframeworks.flask import FlaskPlugin
from flask import Flask

from switchboard import __version__
from switchboard.web import schemas

_SCHEMAS = ("Problem", "FeedQuery", "FeedEvent", "FeedPage", "QuestionBody", "ApprovalBody", "InboxItem",
            "InboxQuery", "InboxPage", "InboxWaitQuery", "InboxWaitResult", "AnswerBody", "DecideBody",
            "HumanInboxQuery", "HumanInboxPage", "SubscribeBody", "SubscriptionCreated", "SubscriptionRemoved",
            "Todo", "TodoPage", "ClaimBody", "Claim", "TodoActionBody", "Whoami", "QuarantinePage", "PayloadQuery",
            "PayloadPart")

_INBOX_WAIT = {"get": {
    "summary": "Wait until one of the calling agent's inbox items is resolved (inbox_wait)",
    "description": "Returns within 100 ms of a resolution, or after wait_seconds (default 30, max 60; 0 polls). "
                   "Without since, each resolution is returned once (the agent's stored position).",
    "security": [{"agent": []}],
    "parameters": [
        {"in": "query", "name": "wait_seconds", "schema": {"type": "number", "minimum": 0, "maximum": 60}},
        {"in": "query", "name": "since", "schema": {"type": "integer", "minimum": 0}},
    ],
    "responses": {
        "200": {"description": "", "content": {"application/json": {
            "schema": {"$ref": "#/components/schemas/InboxWaitResult"}}}},
        **{code: {"description": "", "content": {"application/problem+json": {
            "schema": {"$ref": "#/components/schemas/Problem"}}}} for code in ("400", "401")},
    },
}}


def _json(schema: str | None = None, description: str = "") -> dict[str, Any]:
    body: dict[str, Any] = {"schema": {"$ref": f"#/components/schemas/{schema}"}} if schema else {"schema": {
        "type": "object"}}
    return {"description": description, "content": {"application/json": body}}


def _problems(*codes: str) -> dict[str, Any]:
    return {code: {"description": "", "content": {"application/problem+json": {
        "schema": {"$ref": "#/components/schemas/Problem"}}}} for code in codes}


def _op(summary: str, security: str | None, responses: dict[str, Any], description: str = "",
        parameters: list[dict[str, Any]] | None = None, body: str | None = None) -> dict[str, Any]:
    op: dict[str, Any] = {"summary": summary, "responses": responses}
    if description:
        op["description"] = description
    if security:
        op["security"] = [{security: []}]
    if parameters:
        op["parameters"] = parameters
    if body:
        op["requestBody"] = {"required": False, "content": {"application/json": {"schema": (
            {"$ref": f"#/components/schemas/{body}"} if body[0].isupper() else {"type": "object"})}}}
    return op


def _path(name: str, description: str = "") -> dict[str, Any]:
    return {"in": "path", "name": name, "required": True, "schema": {"type": "string"}, "description": description}


def _query(name: str, kind: str = "string") -> dict[str, Any]:
    return {"in": "query", "name": name, "schema": {"type": kind}}


# Routes that are not Flask views with an operation in their docstring: the native async routes
# of the ASGI root, and views documented here (issue 14: the document covers every route; a test
# walks the Flask url_map and the ASGI routes).
_BY_HAND: dict[str, dict[str, Any]] = {
    "/": {"get": _op("Service index", None, {"200": _json(description="service, version, links")})},
    "/api/v1/openapi.json": {"get": _op("This OpenAPI document", None, {"200": _json()})},
    "/hooks/{source_id}": {"post": _op(
        "Webhook receiver (DESIGN.md §6.1)", None,
        {"202": _json(description="accepted: {delivery_id, status: received}"),
         "200": _json(description="duplicate {delivery_id, duplicate: true}, a handshake or a provider ack"),
         **_problems("400", "401", "404", "405", "413", "503")},
        description="Signed by the provider; the raw body is verified with the source's secret.",
        parameters=[_path("source_id", "src_...")])},
    "/mcp": {"post": _op("MCP Streamable HTTP (JSON-RPC)", "agent", {"200": _json(), **_problems("401")},
                         description="MCP protocol endpoint; GET opens the server stream, DELETE ends a session."),
             "get": _op("MCP server-sent stream", "agent", {"200": {"description": "text/event-stream"}}),
             "delete": _op("End an MCP session", "agent", {"200": {"description": "session ended"}})},
    "/api/v1/health": {"get": _op(
        "Liveness: the process answers (and which database and job mode it runs); never touches the "
        "database or Redis (readiness is /api/v1/ready)", None,
        {"200": _json(description='{"status": "ok", "database": "sqlite|postgresql", "jobs": "inline|rq"}')})},
    "/api/v1/agent/tools": {"get": _op("The tool catalogue as JSON (used by the channel adapter)", "agent",
                                       {"200": _json(description="{tools: [{name, description, inputSchema}]}"),
                                        **_problems("401")})},
    "/api/v1/agent/tools/{name}": {"post": _op(
        "Call one tool with JSON arguments; the result carries the notifications trailer", "agent",
        {"200": _json(description="the tool result {structuredContent, content, isError, notifications?}"),
         **_problems("400", "401", "404")}, parameters=[_path("name", "tool name, e.g. todo_claim")], body="args")},
    "/api/v1/agent/stream": {"get": _op(
        "Server-sent wakes and verdicts for the calling agent (Last-Event-ID resumes)", "agent",
        {"200": {"description": "text/event-stream"}, **_problems("401")})},
    "/api/v1/stream": {"get": _op(
        "Server-sent feed nudges for the projects the human owns (web session cookie or human token; "
        "Last-Event-ID or ?since= resumes)", "human",
        {"200": {"description": "text/event-stream"}, **_problems("400", "401")},
        parameters=[_query("since", "integer")])},
    "/api/v1/agent/permission": {"post": _op(
        "The channel adapter relays a Claude Code permission prompt (DESIGN.md §6.5)", "agent",
        {"201": _json("InboxItem", "a new permission inbox item"), "200": _json("InboxItem", "the same prompt again"),
         **_problems("400", "401", "429")},
        description="Body {request_id, tool_name, description, input_preview} as Claude Code sends them; "
                    "X-Switchboard-Session names the adapter's session. The texts are screened like deliveries.",
        parameters=[{"in": "header", "name": "X-Switchboard-Session", "required": True, "schema": {"type": "string"}}],
        body="object")},
    "/api/v1/agent/session/close": {"post": _op(
        "The adapter's session ended: its open permission prompts expire", "agent",
        {"200": _json(description="{session_id, expired}"), **_problems("400", "401")},
        parameters=[{"in": "header", "name": "X-Switchboard-Session", "required": True, "schema": {"type": "string"}}])},
    "/api/v1/friends": {"get": _op("The calling agent's friendships and requests (friend_list)", "agent",
                                   {"200": _json(description="{friendships: [...], requests: [...]}"),
                                    **_problems("401")})},
    "/api/v1/friends/requests": {"post": _op(
        "Ask another human's agent to accept work: {to_agent, queues, reason} (friend_request, DESIGN.md §6.6)",
        "agent", {"201": _json(description="{request_id, status: pending, inbox_item_id, ...}"),
                  **_problems("400", "401", "404", "409")}, body="object")},
    "/api/v1/friends/requests/{request_id}/respond": {"post": _op(
        "Approve (with a bound human decision) or decline a friend request: {decision} (friend_respond)", "agent",
        {"200": _json(description="{request, friendship}"), **_problems("400", "401", "403", "404", "409")},
        parameters=[_path("request_id", "fr_...")], body="object")},
    "/api/v1/friends/{friendship_id}/revoke": {"post": _op(
        "End a friendship of the calling agent (friend_revoke)", "agent",
        {"200": _json(description="the friendship, revoked"), **_problems("401", "404")},
        parameters=[_path("friendship_id", "fs_...")])},
    "/api/v1/todos": {"post": _op(
        "Create a todo on an own project or a friend's queue: {project, queue, title, body?, assign?, priority?} "
        "(todo_create)", "agent", {"201": _json("Todo"), **_problems("400", "401", "404", "409")}, body="object")},
    "/api/v1/human/friends": {"get": _op(
        "Friendships the calling human is part of (either side)", "human",
        {"200": _json(description="{friendships: [...]}"), **_problems("401")})},
    "/api/v1/human/friends/{friendship_id}/revoke": {"post": _op(
        "Revoke a friendship the calling human is part of; no new todos flow from that moment", "human",
        {"200": _json(description="the friendship, revoked"), **_problems("401", "404")},
        parameters=[_path("friendship_id", "fs_...")])},
    "/api/v1/human/todos": {
        "get": _op("Todos of the projects the human owns, oldest first; pass next_cursor back as cursor for "
                   "the next page", "human", {"200": _json("TodoPage"), **_problems("400", "401", "404")},
                   parameters=[_query("project"), _query("state"), _query("dead_letters", "boolean"),
                               _query("limit", "integer"), _query("cursor")]),
        "post": _op("Add a todo: {project, title, queue?, assign? (agent name), priority?}", "human",
                    {"201": _json("Todo"), **_problems("400", "401", "404")}, body="object")},
    "/api/v1/human/todos/{todo_id}/{action}": {"post": _op(
        "retry (a dead letter), cancel, or assign ({agent}) a todo", "human",
        {"200": _json("Todo"), **_problems("400", "401", "404", "409")},
        parameters=[_path("todo_id"), _path("action", "retry | cancel | assign")], body="object")},
    "/api/v1/human/quarantine": {"get": _op(
        "Quarantined deliveries of owned projects, oldest first, with the sender to link and reason_now; "
        "pass next_cursor back as cursor for the next page", "human",
        {"200": _json("QuarantinePage"), **_problems("400", "401", "404")},
        parameters=[_query("project"), _query("limit", "integer"), _query("cursor")])},
    "/api/v1/human/quarantine/{delivery_id}/{action}": {"post": _op(
        "release ({as_self?}: processed again, once) or discard a quarantined delivery", "human",
        {"200": _json(description="{id, status, todo_id?}"), **_problems("400", "401", "404", "409")},
        parameters=[_path("delivery_id"), _path("action", "release | discard")], body="object")},
}


def build_spec(app: Flask) -> dict[str, Any]:
    """The OpenAPI document for ``app``'s REST views (as a JSON-ready dict)."""
    spec = APISpec(title="Switchboard", version=__version__, openapi_version="3.1.0",
                   plugins=[FlaskPlugin(), MarshmallowPlugin()],
                   info={"description": "Agents: Bearer sbk_ (agent token). Humans: Bearer sbh_ (human token). "
                                        "Errors are RFC 9457 problem details with a code."})
    spec.components.security_scheme("agent", {"type": "http", "scheme": "bearer", "description": "sbk_ token"})
    spec.components.security_scheme("human", {"type": "http", "scheme": "bearer", "description": "sbh_ token"})
    spec.components.security_scheme("metrics", {"type": "http", "scheme": "bearer",
                                                "description": "SWITCHBOARD_METRICS_TOKEN"})
    for name in _SCHEMAS:
        spec.components.schema(name, schema=getattr(schemas, name))
    with app.test_request_context():
        for endpoint, view in sorted(app.view_functions.items()):
            if "\n---" in (view.__doc__ or "").replace("    ", ""):  # views that document their operations
                spec.path(view=view, app=app)
    doc = spec.to_dict()
    for operations in doc["paths"].values():
        for operation in operations.values():
            for code, response in operation.get("responses", {}).items():
                response.setdefault("description", HTTPStatus(int(code)).phrase)  # required by OpenAPI
    doc["paths"]["/api/v1/inbox/wait"] = _INBOX_WAIT  # not a Flask view: declared by hand
    for path, operations in _BY_HAND.items():
        doc["paths"].setdefault(path, {})
        for method, operation in operations.items():
            doc["paths"][path].setdefault(method, operation)
    return doc
