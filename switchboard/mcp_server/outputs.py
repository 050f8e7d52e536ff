"""Output schemas of the tool catalogue (MCP ``Tool.outputSchema``, DESIGN.md §6.3, §6.4).

Every tool returns ``structuredContent``; Claude Code hands the model
``JSON.stringify(structuredContent)`` and drops the ``content`` blocks when it is present
(anthropics/claude-code issues 79944, 55677, 54450), so the notifications trailer rides inside
it as ``notifications`` and every output schema declares that member as optional
(:func:`output`). Schemas name the fields a caller relies on and stay open
(``additionalProperties`` allowed), so adding a field never breaks a validating client.
"""

from __future__ import annotations

from typing import Any

STR = {"type": "string"}
NSTR = {"type": ["string", "null"]}
INT = {"type": "integer"}
BOOL = {"type": "boolean"}

NOTIFICATIONS = {
    "type": "object",
    "description": "Pending answers, decisions and subscribed events, each delivered once (DESIGN.md §6.4).",
    "properties": {
        "pending": {"type": "array", "items": {
            "type": "object",
            "properties": {"source": {"type": "string", "enum": ["attention", "subscription"]}, "kind": STR,
                           "id": {"type": ["string", "integer"]}, "project_id": NSTR, "title": STR, "at": STR},
            "required": ["source", "kind", "id", "project_id", "title", "at"],
        }},
        "more": BOOL,
    },
    "required": ["pending"],
}

TODO_ROW = {"type": "object", "properties": {"id": STR, "project_id": STR, "queue": STR, "state": STR,
                                             "kind": STR, "title": STR, "lease_expires_at": NSTR},
            "required": ["id", "state", "queue", "title"]}
ATTEMPT = {"type": "object", "properties": {"number": INT, "agent_id": NSTR, "outcome": NSTR}}
NINT = {"type": ["integer", "null"]}
# A payload or result over the size budget is null with these markers (queue/payloads.py).
_CUT = {f"{part}_{name}": schema for part in ("payload", "result")
        for name, schema in (("truncated", BOOL), ("bytes", INT), ("preview", STR), ("next_offset", INT))}
TODO_FULL = {**TODO_ROW, "properties": {**TODO_ROW["properties"], "payload": {}, "result": {}, **_CUT,
                                        "attempts": {"type": "array", "items": ATTEMPT}}}
NEXT_CURSOR = {"type": ["string", "null"],
               "description": "Pass as cursor for the next page (null: this was the last page)."}
INBOX_ITEM = {"type": "object", "properties": {"id": STR, "kind": STR, "project_id": NSTR, "status": STR, "title": STR,
                                               "answer": NSTR, "decision": NSTR, "expires_at": NSTR},
              "required": ["id", "kind", "status", "title"]}
EVENT = {"type": "object", "properties": {"id": INT, "project_id": STR, "kind": STR, "subject_id": NSTR, "title": STR,
                                          "data": {}, "at": STR}, "required": ["id", "kind", "title"]}


def output(properties: dict[str, Any], required: list[str] | None = None) -> dict[str, Any]:
    """An object schema with ``properties`` plus the optional ``notifications`` member."""
    return {"type": "object", "properties": {**properties, "notifications": NOTIFICATIONS},
            "required": required or []}


WHOAMI = output({"agent": {"type": "object", "properties": {"id": STR, "name": STR}},
                 "human": {"type": "object", "properties": {"id": STR, "name": NSTR}},
                 "grants": {"type": "array", "items": {"type": "object", "properties": {
                     "project_id": STR, "project": NSTR, "role": {"type": "string", "enum": ["read", "work"]}}}}},
                ["agent", "human", "grants"])
TODO_LIST = output({"todos": {"type": "array", "items": TODO_ROW}, "has_more": BOOL, "next_cursor": NEXT_CURSOR},
                   ["todos", "has_more", "next_cursor"])
TODO_PAYLOAD = output({"todo_id": STR, "part": STR, "offset": INT, "length": INT, "total_bytes": INT, "data": STR,
                       "next_offset": NINT},
                      ["todo_id", "part", "offset", "length", "total_bytes", "data", "next_offset"])
TODO_GET = output(TODO_FULL["properties"], ["id", "state", "queue", "title"])
TODO_CLAIM = output({"empty": BOOL, "todo": TODO_FULL, "lease_token": NSTR, "lease_expires_at": NSTR,
                     "attempt": INT})
TODO_ROW_OUT = output(TODO_ROW["properties"], ["id", "state"])
SECRET = output({"ref": STR, "value": STR}, ["ref", "value"])
FEED = output({"events": {"type": "array", "items": EVENT}, "next_since": INT, "next_cursor": STR, "has_more": BOOL},
              ["events", "next_since"])
ITEM = output(INBOX_ITEM["properties"], ["id", "kind", "status", "title"])
INBOX = output({"items": {"type": "array", "items": INBOX_ITEM}, "next_since": INT, "next_cursor": STR,
                "has_more": BOOL},
               ["items", "next_since"])
WAIT = output({"resolved": {"type": "array", "items": INBOX_ITEM}, "next_since": INT, "timed_out": BOOL},
              ["resolved"])
SUBSCRIBE = output({"subscription_id": STR, "kinds": {"type": "array", "items": STR}, "cursor": INT},
                   ["subscription_id"])
UNSUBSCRIBE = output({"subscription_id": STR, "removed": BOOL}, ["subscription_id", "removed"])
DOORBELL_TEST = output({"ring_id": STR, "sessions": INT, "verdict": STR}, ["ring_id", "sessions"])
DOORBELL_ACK = output({"ring_id": STR, "heard": BOOL}, ["ring_id", "heard"])
