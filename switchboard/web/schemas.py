"""Marshmallow schemas of the REST API: request validation and the OpenAPI document.

Request schemas load query strings and JSON bodies (unknown fields are refused); a
``ValidationError`` becomes ``invalid_argument`` with the field messages (CONVENTIONS.md,
"translate at the boundary"). Response schemas describe the tool results of
:mod:`switchboard.mcp_server.tools` for ``/api/v1/openapi.json``; the results themselves come
from the same handlers as the MCP tools.
"""

from __future__ import annotations

from typing import Any

from marshmallow import Schema, ValidationError, fields, validate

from switchboard import paging
from switchboard.errors import InvalidArgument
from switchboard.feed.events import KINDS
from switchboard.inbox import items as inbox
from switchboard.queue import leases, payloads, todos

_ID = fields.String(validate=validate.Length(1, 100))


def load(schema: Schema, data: Any) -> dict[str, Any]:
    """``schema.load(data)`` with errors as :class:`InvalidArgument` naming each field.

    Raises:
        InvalidArgument: the data does not match (message ``field: problem; ...``).
    """
    try:
        return dict(schema.load(data))
    except ValidationError as exc:
        raise InvalidArgument("; ".join(_flatten(exc.normalized_messages()))) from None


def _flatten(messages: Any, where: str = "") -> list[str]:
    """marshmallow's nested messages as ``field: problem`` lines, list items as ``field[0]``
    (they read ``options: {0: ['Not a valid string.']}`` before: a new-user run)."""
    if isinstance(messages, dict):
        parts: list[str] = []
        for key, value in sorted(messages.items(), key=lambda kv: str(kv[0])):
            shown = str(key)[:40]  # an unknown key is the caller's text: a 200 KB key made a 200 KB error
            name = f"{where}[{shown}]" if isinstance(key, int) else (f"{where}.{shown}" if where else shown)
            parts.extend(_flatten(value, name))
        return parts
    if isinstance(messages, list) and all(isinstance(m, str) for m in messages):
        text = " ".join(messages)
        return [f"{where}: {text}" if where else text]
    if isinstance(messages, list):
        return [part for m in messages for part in _flatten(m, where)]
    return [f"{where}: {messages}" if where else str(messages)]


def query_args(schema: Schema, args: Any, lists: tuple[str, ...] = ()) -> dict[str, Any]:
    """Load a Werkzeug ``MultiDict`` of query parameters (``lists`` may repeat)."""
    data: dict[str, Any] = {}
    for key in args:
        data[key] = args.getlist(key) if key in lists else args.get(key)
    return load(schema, data)


class Problem(Schema):
    """RFC 9457 problem details with our error ``code`` (DESIGN.md §6.1)."""

    type = fields.String(required=True)
    title = fields.String(required=True)
    status = fields.Integer(required=True)
    detail = fields.String(required=True)
    code = fields.String(required=True)


# --- feed ------------------------------------------------------------------------------------------

_CURSOR = fields.String(validate=validate.Length(1, paging.MAX_CURSOR_CHARS),
                        metadata={"description": "next_cursor of an earlier page, unchanged"})
_NEXT_CURSOR = fields.String(allow_none=True, metadata={
    "description": "pass as cursor for the next page; null when this was the last page"})


class FeedQuery(Schema):
    project = _ID
    kinds = fields.List(fields.String(validate=validate.OneOf(KINDS)), validate=validate.Length(min=1))
    since = fields.Integer(validate=validate.Range(min=0, max=2**63 - 1))
    cursor = _CURSOR
    limit = fields.Integer(validate=validate.Range(1, 200))


class FeedEvent(Schema):
    id = fields.Integer(required=True)
    project_id = fields.String(required=True)
    kind = fields.String(required=True)
    subject_id = fields.String(allow_none=True)
    title = fields.String(required=True)
    data = fields.Dict(allow_none=True)
    at = fields.String(required=True, metadata={"format": "date-time"})


class FeedPage(Schema):
    events = fields.List(fields.Nested(FeedEvent), required=True)
    next_since = fields.Integer(required=True)
    next_cursor = fields.String(required=True, metadata={"description": "the same position as next_since"})
    has_more = fields.Boolean(required=True)


# --- inbox -----------------------------------------------------------------------------------------

class QuestionBody(Schema):
    project = fields.String(required=True, validate=validate.Length(1, 100))
    title = fields.String(required=True, validate=validate.Length(1, inbox.MAX_TITLE_CHARS))
    body = fields.String(validate=validate.Length(max=inbox.MAX_BODY_CHARS))
    options = fields.List(fields.String(validate=validate.Length(1, 200)),
                          validate=validate.Length(1, inbox.MAX_OPTIONS))
    expires_in_seconds = fields.Integer(validate=validate.Range(1, inbox.MAX_EXPIRES_SECONDS))
    on_expiry = fields.String(validate=validate.Length(1, 200))


class ApprovalBody(Schema):
    project = fields.String(required=True, validate=validate.Length(1, 100))
    title = fields.String(required=True, validate=validate.Length(1, inbox.MAX_TITLE_CHARS))
    body = fields.String(validate=validate.Length(max=inbox.MAX_BODY_CHARS))
    expires_in_seconds = fields.Integer(validate=validate.Range(1, inbox.MAX_EXPIRES_SECONDS))
    on_expiry = fields.String(validate=validate.OneOf(["deny", "approve", "expire"]))


class InboxItem(Schema):
    id = fields.String(required=True)
    kind = fields.String(required=True, validate=validate.OneOf(["question", "approval"]))
    project_id = fields.String(required=True)
    title = fields.String(required=True)
    body = fields.String(allow_none=True)
    options = fields.List(fields.String(), allow_none=True)
    status = fields.String(required=True, validate=validate.OneOf(["open", "answered", "decided", "expired"]))
    answer = fields.String(allow_none=True)
    decision = fields.String(allow_none=True, validate=validate.OneOf(["approve", "deny"]))
    note = fields.String(allow_none=True)
    expires_at = fields.String(allow_none=True)
    on_expiry = fields.String(required=True)
    resolved_by = fields.Raw(allow_none=True, metadata={"description": '{"human_id": ...} or "hub" (expiry)'})
    resolved_via = fields.String(allow_none=True, validate=validate.OneOf(inbox.VIAS))
    resolved_at = fields.String(allow_none=True)
    created_at = fields.String(required=True)
    seq = fields.Integer(required=True, metadata={"description": "feed position of the last change"})


class InboxQuery(Schema):
    status = fields.String(validate=validate.OneOf(inbox.READ_STATUSES))
    since = fields.Integer(validate=validate.Range(min=0, max=2**63 - 1))
    cursor = _CURSOR
    limit = fields.Integer(validate=validate.Range(1, inbox.MAX_READ_LIMIT))


class InboxPage(Schema):
    items = fields.List(fields.Nested(InboxItem), required=True)
    next_since = fields.Integer(required=True)
    next_cursor = fields.String(required=True, metadata={"description": "the same position as next_since"})
    has_more = fields.Boolean(required=True)


class InboxWaitQuery(Schema):
    wait_seconds = fields.Float(validate=validate.Range(0, 60))
    since = fields.Integer(validate=validate.Range(min=0, max=2**63 - 1))


class InboxWaitResult(Schema):
    resolved = fields.List(fields.Nested(InboxItem), required=True)
    next_since = fields.Integer(required=True)
    timed_out = fields.Boolean(required=True)


class AnswerBody(Schema):
    answer = fields.String(required=True, validate=validate.Length(1, inbox.MAX_ANSWER_CHARS))
    note = fields.String(validate=validate.Length(max=inbox.MAX_ANSWER_CHARS))


class DecideBody(Schema):
    decision = fields.String(required=True, validate=validate.OneOf(inbox.DECISIONS))
    note = fields.String(validate=validate.Length(max=inbox.MAX_ANSWER_CHARS))


class HumanInboxQuery(Schema):
    status = fields.String(validate=validate.OneOf(["open", "answered", "decided", "expired", "all"]))
    limit = fields.Integer(validate=validate.Range(1, 200))
    cursor = _CURSOR


class HumanInboxPage(Schema):
    items = fields.List(fields.Nested(InboxItem), required=True)
    has_more = fields.Boolean(required=True)
    next_cursor = _NEXT_CURSOR


# --- subscriptions ---------------------------------------------------------------------------------

class SubscribeBody(Schema):
    kinds = fields.List(fields.String(validate=validate.OneOf(KINDS)), required=True,
                        validate=validate.Length(min=1))
    project = _ID


class SubscriptionCreated(Schema):
    subscription_id = fields.String(required=True)
    cursor = fields.Integer(required=True, metadata={"description": "seed: the newest matching event id"})
    kinds = fields.List(fields.String(), required=True)
    project_id = fields.String(allow_none=True)
    created_at = fields.String(required=True)


class SubscriptionRemoved(Schema):
    subscription_id = fields.String(required=True)
    removed = fields.Boolean(required=True)


# --- todos and identity (documentation of the existing routes) -----------------------------------

class Todo(Schema):
    id = fields.String(required=True)
    project_id = fields.String(required=True)
    queue = fields.String(required=True)
    state = fields.String(required=True, validate=validate.OneOf(todos.STATES))
    kind = fields.String(required=True)
    title = fields.String(required=True)
    priority = fields.Integer()
    assigned_agent_id = fields.String(allow_none=True)
    attempt_count = fields.Integer()
    failure_count = fields.Integer()
    max_attempts = fields.Integer()
    claimed_by = fields.String(allow_none=True)
    lease_expires_at = fields.String(allow_none=True)
    next_retry_at = fields.String(allow_none=True)
    dead_lettered = fields.Boolean()
    created_at = fields.String()
    updated_at = fields.String()
    payload = fields.Raw(allow_none=True, metadata={"description": "null when payload_truncated"})
    result = fields.Raw(allow_none=True, metadata={"description": "null when result_truncated"})
    payload_truncated = fields.Boolean(metadata={"description": "over the payload budget: fetch it in parts"})
    payload_bytes = fields.Integer(metadata={"description": "size of the payload's canonical JSON text"})
    payload_preview = fields.String(metadata={"description": "its first bytes, when truncated"})
    payload_next_offset = fields.Integer(metadata={"description": "offset for GET .../payload, when truncated"})
    result_truncated = fields.Boolean()
    result_bytes = fields.Integer()
    result_preview = fields.String()
    result_next_offset = fields.Integer()


class TodoPage(Schema):
    todos = fields.List(fields.Nested(Todo), required=True)
    has_more = fields.Boolean(required=True)
    next_cursor = _NEXT_CURSOR


class TodoQuery(Schema):
    """``GET /api/v1/human/todos``."""

    project = _ID
    state = fields.String(validate=validate.OneOf(todos.STATES))
    dead_letters = fields.Boolean()
    limit = fields.Integer(validate=validate.Range(1, todos.MAX_LIST_LIMIT))
    cursor = _CURSOR


class QuarantineQuery(Schema):
    """``GET /api/v1/human/quarantine``."""

    project = _ID
    limit = fields.Integer(validate=validate.Range(1, 200))
    cursor = _CURSOR


class QuarantinePage(Schema):
    deliveries = fields.List(fields.Dict(), required=True, metadata={
        "description": "{id, project_id, source_id, provider, reason, reason_now, event, received_at, sender}"})
    has_more = fields.Boolean(required=True)
    next_cursor = _NEXT_CURSOR


class PayloadQuery(Schema):
    """``GET /api/v1/todos/<id>/payload``."""

    part = fields.String(validate=validate.OneOf(payloads.PARTS))
    offset = fields.Integer(validate=validate.Range(min=0, max=2**63 - 1))
    length = fields.Integer(validate=validate.Range(1, payloads.MAX_BUDGET_BYTES))


class PayloadPart(Schema):
    todo_id = fields.String(required=True)
    part = fields.String(required=True)
    offset = fields.Integer(required=True)
    length = fields.Integer(required=True)
    total_bytes = fields.Integer(required=True)
    data = fields.String(required=True, metadata={"description": "bytes [offset, offset+length) of the JSON text"})
    next_offset = fields.Integer(allow_none=True, required=True, metadata={"description": "null at the end"})


class ClaimBody(Schema):
    project = _ID
    queue = _ID
    lease_seconds = fields.Integer(validate=validate.Range(1, leases.MAX_LEASE_SECONDS))


class Claim(Schema):
    todo = fields.Nested(Todo)
    lease_token = fields.String(allow_none=True)
    lease_expires_at = fields.String(allow_none=True)
    attempt = fields.Integer()
    empty = fields.Boolean()


class TodoActionBody(Schema):
    lease_token = fields.String(validate=validate.Length(1, 200))
    lease_seconds = fields.Integer(validate=validate.Range(1, leases.MAX_LEASE_SECONDS))
    result = fields.Raw(allow_none=True)
    summary = fields.String(validate=validate.Length(max=leases.MAX_SUMMARY_CHARS))


class Whoami(Schema):
    agent = fields.Dict(required=True)
    human = fields.Dict(required=True)
    grants = fields.List(fields.Dict(), required=True)
