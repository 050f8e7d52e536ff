"""The OpenAPI 3.1 document of the REST API, served at ``GET /api/v1/openapi.json``.

Generated with apispec from the marshmallow schemas (:mod:`switchboard.web.schemas`) and the
operations in each Flask view's docstring (apispec-webframeworks' Flask plugin). The native
async ``GET /api/v1/inbox/wait`` is not a Flask view, so its operation is written out here.
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
            "Todo", "TodoPage", "ClaimBody", "Claim", "TodoActionBody", "Whoami")

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


def build_spec(app: Flask) -> dict[str, Any]:
    """The OpenAPI document for ``app``'s REST views (as a JSON-ready dict)."""
    spec = APISpec(title="Switchboard", version=__version__, openapi_version="3.1.0",
                   plugins=[FlaskPlugin(), MarshmallowPlugin()],
                   info={"description": "Agents: Bearer sbk_ (agent token). Humans: Bearer sbh_ (human token). "
                                        "Errors are RFC 9457 problem details with a code."})
    spec.components.security_scheme("agent", {"type": "http", "scheme": "bearer", "description": "sbk_ token"})
    spec.components.security_scheme("human", {"type": "http", "scheme": "bearer", "description": "sbh_ token"})
    for name in _SCHEMAS:
        spec.components.schema(name, schema=getattr(schemas, name))
    with app.test_request_context():
        for endpoint, view in sorted(app.view_functions.items()):
            if endpoint.startswith(("rest_todos.", "rest_agent.", "rest_revoke.")):
                spec.path(view=view, app=app)
    doc = spec.to_dict()
    for operations in doc["paths"].values():
        for operation in operations.values():
            for code, response in operation.get("responses", {}).items():
                response.setdefault("description", HTTPStatus(int(code)).phrase)  # required by OpenAPI
    doc["paths"]["/api/v1/inbox/wait"] = _INBOX_WAIT  # not a Flask view: declared by hand
    return doc
