"""The friend tools and ``todo_create`` (DESIGN.md §6.3, §6.6), appended to the catalogue.

Kept apart from :mod:`switchboard.mcp_server.tools` so the catalogue module stays small; the
specs have the same shape (title, described arguments, output schema with the optional
``notifications`` member, annotations) and run through the same ``call_tool`` path
(validation, errors, trailer).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from switchboard.friends import requests as friends
from switchboard.friends import work
from switchboard.intake import vault
from switchboard.mcp_server import outputs
from switchboard.mcp_server.outputs import BOOL, NSTR, STR
from switchboard.mcp_server.specs import READ_ONLY, WRITE, Caller, ToolSpec
from switchboard.mcp_server.specs import schema as _schema

if TYPE_CHECKING:
    from switchboard.hub import Hub

_REQUEST_ID = {"type": "string", "minLength": 1, "maxLength": 100, "pattern": "^fr_",
               "description": "The friend request's id (fr_...), as friend_request or friend_list gave it."}
_QUEUES = {"type": "array", "items": STR}
REQUEST = {"type": "object", "properties": {
    "request_id": STR, "from_agent": NSTR, "to_agent": NSTR, "queues": _QUEUES, "reason": STR,
    "status": {"type": "string", "enum": ["pending", "approved", "declined", "expired"]},
    "inbox_item_id": NSTR, "decided_via": NSTR, "decided_at": NSTR, "created_at": STR},
    "required": ["request_id", "status", "queues"]}
FRIENDSHIP = {"type": "object", "properties": {
    "friendship_id": STR, "request_id": STR, "from_agent": NSTR, "from_human": NSTR, "to_agent": NSTR,
    "to_human": NSTR, "queues": _QUEUES, "approved_via": STR, "created_at": STR, "active": BOOL,
    "revoked_at": NSTR}, "required": ["friendship_id", "queues", "active"]}
REQUEST_OUT = outputs.output(REQUEST["properties"], REQUEST["required"])
RESPOND_OUT = outputs.output({"request": REQUEST, "friendship": {"anyOf": [FRIENDSHIP, {"type": "null"}]}},
                             ["request", "friendship"])
LIST_OUT = outputs.output({"friendships": {"type": "array", "items": FRIENDSHIP},
                           "requests": {"type": "array", "items": REQUEST}}, ["friendships", "requests"])
REVOKE_OUT = outputs.output(FRIENDSHIP["properties"], FRIENDSHIP["required"])
CREATED_OUT = outputs.output({**outputs.TODO_FULL["properties"], "assigned_agent_id": NSTR,
                              "requested_by": {"type": "object", "properties": {
                                  "agent_id": STR, "agent": STR, "human_id": STR, "human": NSTR}}},
                             ["id", "state", "queue", "title", "requested_by"])


def _friend_request(hub: Hub, caller: Caller, args: dict[str, Any]) -> dict[str, Any]:
    with hub.db.write() as s:
        return friends.request(s, hub.clock, agent_id=caller.agent_id, to_agent=args["to_agent"],
                               queues=args["queues"], reason=args["reason"])


def _friend_respond(hub: Hub, caller: Caller, args: dict[str, Any]) -> dict[str, Any]:
    with hub.db.write() as s:
        result = friends.respond(s, hub.clock, agent_id=caller.agent_id, session_id=caller.session_id,
                                 request_id=args["request_id"], decision=args["decision"],
                                 ttl_seconds=hub.settings.permission_expiry_seconds)
    hub.broker.publish_inbox(caller.agent_id)
    return result


def _friend_list(hub: Hub, caller: Caller, args: dict[str, Any]) -> dict[str, Any]:
    with hub.db.read() as s:
        return friends.list_for_agent(s, caller.agent_id)


def _friend_revoke(hub: Hub, caller: Caller, args: dict[str, Any]) -> dict[str, Any]:
    with hub.db.write() as s:
        return friends.revoke(s, hub.clock, args["friendship_id"], human_id=caller.human_id)


def _todo_create(hub: Hub, caller: Caller, args: dict[str, Any]) -> dict[str, Any]:
    with hub.db.write() as s:
        row, wake = work.create(s, hub.clock, vault.load_key_ring(hub.settings), agent_id=caller.agent_id,
                                project=args["project"], queue=args["queue"], title=args["title"],
                                body=args.get("body"), assign=args.get("assign"),
                                priority=args.get("priority", 0))
    hub.broker.publish_wake(wake)
    return row


def _render_request(r: dict[str, Any]) -> str:
    return (f"friend request {r['request_id']} to {r['to_agent']} on {', '.join(r['queues'])} is {r['status']}; "
            "it grants nothing until their human approves")


def _render_respond(r: dict[str, Any]) -> str:
    fs = r.get("friendship")
    if fs:
        return f"approved {r['request']['request_id']}: friendship {fs['friendship_id']} on {', '.join(fs['queues'])}"
    return f"{r['request']['request_id']} is {r['request']['status']}"


def _render_list(r: dict[str, Any]) -> str:
    lines = [f"{f['friendship_id']} {f['from_agent']} -> {f['to_agent']} on {', '.join(f['queues'])}"
             f"{'' if f['active'] else ' (revoked)'}" for f in r["friendships"]]
    lines += [f"{q['request_id']} {q['from_agent']} -> {q['to_agent']} [{q['status']}]" for q in r["requests"]]
    return "\n".join(lines) or "no friendships or requests"


RELAY_TOOLS: list[ToolSpec] = [
    ToolSpec(
        "friend_request", "Ask to send work to another human's agent",
        "Ask another human's agent to accept work from you on some of its queues. Grants nothing: the other "
        "agent's human decides (their inbox, or a permission prompt when their agent approves). Returns "
        "{request_id: 'fr_...'}; once approved, create work there with todo_create.",
        _schema({"to_agent": {"type": "string", "minLength": 1, "maxLength": 100,
                              "description": "The other agent's name."},
                 "queues": {"type": "array", "minItems": 1, "maxItems": friends.MAX_QUEUES,
                            "items": {"type": "string", "minLength": 3, "maxLength": 201},
                            "description": "Queues you want to send work to, each 'project/queue' in a project "
                                           "that agent works on."},
                 "reason": {"type": "string", "minLength": 1, "maxLength": friends.MAX_REASON_CHARS,
                            "description": "Why, in one line: shown to the other human."}},
                ["to_agent", "queues", "reason"]),
        REQUEST_OUT, WRITE, _friend_request, _render_request),
    ToolSpec(
        "friend_respond", "Answer a friend request",
        "Answer a friend request addressed to you: decline (no human needed) or approve. Approving needs your "
        "human's decision: they approve the friend item in their inbox, or allow this very call's permission "
        "prompt (Claude Code relays it); otherwise the error is human_approval_required. Each approval is used "
        "once.",
        _schema({"request_id": _REQUEST_ID,
                 "decision": {"type": "string", "enum": ["approve", "decline"],
                              "description": "approve (needs your human's decision) or decline."}},
                ["request_id", "decision"]),
        RESPOND_OUT, WRITE, _friend_respond, _render_respond),
    ToolSpec(
        "friend_list", "List friendships",
        "Your friendships (who may send you work, and where you may send work) and friend requests, newest first.",
        _schema({}), LIST_OUT, READ_ONLY, _friend_list, _render_list),
    ToolSpec(
        "friend_revoke", "End a friendship",
        "End a friendship you are part of: no new todos flow through it from this moment.",
        _schema({"friendship_id": {"type": "string", "minLength": 1, "maxLength": 100,
                                   "description": "The friendship's id (fs_...), as friend_list gives it."}},
                ["friendship_id"]),
        REVOKE_OUT, {**WRITE, "destructiveHint": True}, _friend_revoke, lambda r: f"revoked {r['friendship_id']}"),
    ToolSpec(
        "todo_create", "Create a todo",
        "Create a todo: on a friend's queue (an approved friendship; it goes to the friend's agent) or in a "
        "project you work on. Title and body are screened like webhook payloads; the todo shows who asked and "
        "wakes the agent that may take it.",
        _schema({"project": {"type": "string", "minLength": 1, "maxLength": 100,
                             "description": "The project's name or id (a friend's project, or one you work on)."},
                 "queue": {"type": "string", "minLength": 1, "maxLength": 100,
                           "description": "The queue within the project (on a friend's project: one the "
                                          "friendship grants)."},
                 "title": {"type": "string", "minLength": 1, "maxLength": work.MAX_TITLE_CHARS,
                           "description": "One line: what needs doing."},
                 "body": {"type": "string", "maxLength": work.MAX_BODY_CHARS,
                          "description": "Details (plain text; secrets in it become refs)."},
                 "assign": {"type": "string", "minLength": 1, "maxLength": 100,
                            "description": "An agent name that alone may claim it (on a friend's queue, only "
                                           "the friend's agent)."},
                 "priority": {"type": "integer", "minimum": -1000, "maximum": 1000,
                              "description": "Higher is claimed first (default 0)."}},
                ["project", "queue", "title"]),
        CREATED_OUT, WRITE, _todo_create, lambda r: f"created {r['id']} on {r['queue']}: {r['title']}"),
]
