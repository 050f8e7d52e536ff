"""The tool catalogue, defined once (DESIGN.md §6.3).

Each tool has a JSON input schema, a handler that runs in the hub with the calling agent as
actor, and a short text rendering. The MCP server (``/mcp``), the REST routes the channel
adapter calls, and the adapter's ``tools/list`` all read :data:`TOOLS`; the adapter never
defines a tool of its own.

What a tool is lives in :mod:`.specs`; running one (validation, results, errors, the
trailer) in :mod:`.calls`; resolving the calling agent in :mod:`.callers`. The MCP servers put
the trailer's top-level member back on the wire with a middleware (the SDK drops unknown
members). ``inbox_wait`` is the one tool with an async ``waiter``
(:func:`switchboard.mcp_server.calls.call_tool_async`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from sqlalchemy import select

from switchboard import admin, direct, paging
from switchboard.errors import InvalidArgument
from switchboard.feed import pages as feed_pages
from switchboard.feed.events import KINDS as FEED_KINDS
from switchboard.inbox import items as inbox
from switchboard.inbox import waiting
from switchboard.intake import json_shape, vault
from switchboard.mcp_server import outputs
from switchboard.mcp_server.relay_tools import RELAY_TOOLS
from switchboard.mcp_server.specs import READ_ONLY, WRITE, WRITE_IDEMPOTENT, Caller, ToolSpec
from switchboard.mcp_server.specs import schema as _schema
from switchboard.models import Agent, Human, Project
from switchboard.notify import subscriptions
from switchboard.queue import leases, payloads, todos

if TYPE_CHECKING:
    from switchboard.hub import Hub

log = logging.getLogger(__name__)


_ID = {"type": "string", "minLength": 1, "maxLength": 100}
_NAME = {"type": "string", "minLength": 1, "maxLength": 100}
_TODO_ID = {**_ID, "description": "The todo's id (td_...), as in a wake's todo_id attribute or todo_list. "
                                  "'id' is accepted as a deprecated alias for one release."}
_PROJECT = {**_NAME, "description": "A project's name or id."}
_QUEUE = {**_NAME, "description": "A queue name within the project (e.g. reviews)."}
# Tools that name a todo take ``todo_id`` (as wakes say); ``id`` is its alias for one release.
TODO_ID_ALIAS = "id"


def _whoami(hub: Hub, caller: Caller, args: dict[str, Any]) -> dict[str, Any]:
    with hub.db.read() as s:
        agent = s.get(Agent, caller.agent_id)
        human = s.get(Human, caller.human_id)
        grants = admin.grants_of(s, caller.agent_id)
        projects = dict(s.execute(
            select(Project.id, Project.name).where(Project.id.in_(list(grants)))  # type: ignore[attr-defined]
        ).all())
    return {
        "agent": {"id": caller.agent_id, "name": agent.name if agent else caller.agent_name},
        "human": {"id": caller.human_id, "name": human.name if human else None},
        "grants": [{"project_id": pid, "project": projects.get(pid), "role": role}
                   for pid, role in sorted(grants.items(), key=lambda kv: projects.get(kv[0], ""))],
    }


def _render_whoami(r: dict[str, Any]) -> str:
    grants = ", ".join(f"{g['project']} ({g['role']})" for g in r["grants"]) or "no projects"
    return f"agent {r['agent']['name']} of {r['human']['name']}; grants: {grants}"


def _todo_list(hub: Hub, caller: Caller, args: dict[str, Any]) -> dict[str, Any]:
    with hub.db.read() as s:
        grants = admin.grants_of(s, caller.agent_id)
        return todos.list_todos(s, grants, project=args.get("project"), queue=args.get("queue"),
                                state=args.get("state"), limit=args.get("limit", 50), cursor=args.get("cursor"))


def _render_todo_list(r: dict[str, Any]) -> str:
    if not r["todos"]:
        return "no todos"
    lines = [f"{t['id']} [{t['state']}] {t['queue']}: {t['title']}" for t in r["todos"]]
    if r.get("next_cursor"):
        lines.append(f"(more exist: call again with cursor={r['next_cursor']})")
    return "\n".join(lines)


def _todo_get(hub: Hub, caller: Caller, args: dict[str, Any]) -> dict[str, Any]:
    with hub.db.read() as s:
        found = todos.get(s, admin.grants_of(s, caller.agent_id), args["todo_id"])
    return payloads.bound(found, hub.settings.payload_budget_bytes)


def _cut_note(r: dict[str, Any]) -> str:
    cut = [f"{p} cut at {r[p + '_next_offset']} of {r[p + '_bytes']} bytes" for p in payloads.PARTS
           if r.get(p + "_truncated")]
    return f" ({'; '.join(cut)}: fetch the rest with todo_payload)" if cut else ""


def _render_todo_get(r: dict[str, Any]) -> str:
    tries = ", ".join(f"#{a['number']} {a['outcome'] or 'open'}" for a in r["attempts"]) or "none"
    return f"{r['id']} [{r['state']}] {r['queue']}: {r['title']} (attempts: {tries}){_cut_note(r)}"


def _todo_payload(hub: Hub, caller: Caller, args: dict[str, Any]) -> dict[str, Any]:
    with hub.db.read() as s:
        return payloads.fetch(s, admin.grants_of(s, caller.agent_id), args["todo_id"],
                              part=args.get("part", "payload"), offset=args.get("offset", 0),
                              length=args.get("length"), budget=hub.settings.payload_budget_bytes)


def _render_payload(r: dict[str, Any]) -> str:
    more = f"; next_offset={r['next_offset']}" if r["next_offset"] is not None else "; that is the end"
    return f"{r['part']} of {r['todo_id']}, bytes {r['offset']}-{r['offset'] + r['length']} of {r['total_bytes']}{more}"


def _todo_claim(hub: Hub, caller: Caller, args: dict[str, Any]) -> dict[str, Any]:
    if "todo_id" in args and ("project" in args or "queue" in args):
        raise InvalidArgument("give either todo_id, or project/queue for the next todo, not both")
    def claim(s: Any) -> dict[str, Any]:
        grants = admin.grants_of(s, caller.agent_id)
        return leases.claim(s, hub.clock, caller.agent_id, grants, todo_id=args.get("todo_id"),
                            project=args.get("project"), queue=args.get("queue"),
                            lease_seconds=args.get("lease_seconds", leases.DEFAULT_LEASE_SECONDS),
                            is_postgres=not hub.db.is_sqlite, session_key=caller.session_key)

    if "todo_id" in args:  # it reads the todo first: an ORM session (direct.SessionNeeded)
        with hub.db.write() as s:
            claimed = claim(s)
    else:
        # Next in queue: no ORM session around it (switchboard.direct), and on PostgreSQL one
        # statement, run without BEGIN/COMMIT round trips (issue 11).
        claimed = direct.run(hub.db, claim, autocommit=leases.one_statement(not hub.db.is_sqlite, hub.clock))
    if "todo" in claimed:
        payloads.bound(claimed["todo"], hub.settings.payload_budget_bytes)
    return claimed


def _render_claim(r: dict[str, Any]) -> str:
    if r.get("empty"):
        return "nothing to claim"
    t = r["todo"]
    return (f"claimed {t['id']} (attempt {r['attempt']}, lease until {r['lease_expires_at']}): {t['title']}"
            f"{_cut_note(t)}")


def _held_op(op: Callable[..., dict[str, Any]], *names: str,
             one_statement: bool = False) -> Callable[[Hub, Caller, dict[str, Any]], dict[str, Any]]:
    """A tool handler running lease operation ``op`` with ``todo_id``, ``lease_token`` and ``names``;
    ``one_statement``: ``op`` writes one statement where :func:`leases.one_statement` says so
    (``complete``), and then runs without BEGIN/COMMIT round trips; it runs in a direct write
    (:func:`switchboard.direct.run`: prepared statements, no ORM session) unless it needs one."""

    def handler(hub: Hub, caller: Caller, args: dict[str, Any]) -> dict[str, Any]:
        extra = {name: args[name] for name in names if name in args}

        def run(s: Any) -> dict[str, Any]:
            grants = admin.grants_of(s, caller.agent_id)
            return op(s, hub.clock, caller.agent_id, grants, todo_id=args["todo_id"],
                      lease_token=args.get("lease_token"), session_key=caller.session_key, **extra)

        if not one_statement:
            with hub.db.write() as s:
                return run(s)
        return direct.run(hub.db, run, autocommit=leases.one_statement(not hub.db.is_sqlite, hub.clock))

    return handler


def _render_row(r: dict[str, Any]) -> str:
    extra = ""
    if r.get("lease_expires_at"):
        extra = f", lease until {r['lease_expires_at']}"
    elif r.get("next_retry_at"):
        extra = f", retry at {r['next_retry_at']}"
    elif r.get("dead_lettered"):
        extra = ", dead-lettered"
    return f"{r['id']} is {r['state']}{extra}: {r['title']}"


_LEASE_TOKEN = {"type": "string", "minLength": 1, "maxLength": 200,
                "description": "The lease_token from todo_claim; a stale one is refused with conflict."}
_LEASE_SECONDS = {"type": "integer", "minimum": 1, "maximum": leases.MAX_LEASE_SECONDS,
                  "description": f"Lease length in seconds (default {leases.DEFAULT_LEASE_SECONDS}, "
                                 f"at most {leases.MAX_LEASE_SECONDS}); heartbeat before it runs out."}


# --- inbox (DESIGN.md §6.3): questions and approvals, answered by humans --------------------------

def _post(kind: str) -> Callable[[Hub, Caller, dict[str, Any]], dict[str, Any]]:
    def handler(hub: Hub, caller: Caller, args: dict[str, Any]) -> dict[str, Any]:
        with hub.db.write() as s:
            return inbox.post(s, hub.clock, agent_id=caller.agent_id, grants=admin.grants_of(s, caller.agent_id),
                              kind=kind, project=args["project"], title=args["title"], body=args.get("body"),
                              options=args.get("options"), expires_in_seconds=args.get("expires_in_seconds"),
                              on_expiry=args.get("on_expiry"))

    return handler


def _render_item(r: dict[str, Any]) -> str:
    extra = f", expires {r['expires_at']} ({r['on_expiry']})" if r.get("expires_at") else ""
    return f"{r['kind']} {r['id']} is {r['status']}{extra}: {r['title']}"


def _inbox_read(hub: Hub, caller: Caller, args: dict[str, Any]) -> dict[str, Any]:
    with hub.db.read() as s:
        return inbox.read(s, caller.agent_id, status=args.get("status"), since=args.get("since"),
                          limit=args.get("limit", 50), cursor=args.get("cursor"))


def _render_inbox(r: dict[str, Any]) -> str:
    lines = [_render_item(i) + (f" -> {i['answer'] or i['decision']}" if i["status"] != "open" and
                                (i["answer"] or i["decision"]) else "") for i in r["items"]]
    if r.get("has_more"):
        lines.append(f"(more exist: call again with cursor={r['next_cursor']})")
    return "\n".join(lines) or "no inbox items"


async def _inbox_wait(hub: Hub, caller: Caller, args: dict[str, Any]) -> dict[str, Any]:
    return await waiting.wait(hub, caller.agent_id, float(args.get("wait_seconds", waiting.DEFAULT_SECONDS)),
                              args.get("since"))


def _inbox_wait_sync(hub: Hub, caller: Caller, args: dict[str, Any]) -> dict[str, Any]:
    # Only reached through invoke() (a Flask thread): no waiting there, one poll.
    result = waiting.poll(hub, caller.agent_id, args.get("since"))
    result["timed_out"] = not result["resolved"]
    return result


def _render_wait(r: dict[str, Any]) -> str:
    if not r["resolved"]:
        return f"nothing resolved yet (since {r['next_since']})"
    return "\n".join(_render_item(i) + f" -> {i['answer'] or i['decision'] or i['status']}" for i in r["resolved"])


# --- feed and subscriptions (DESIGN.md §6.3, §6.4) -------------------------------------------------

def _feed_read(hub: Hub, caller: Caller, args: dict[str, Any]) -> dict[str, Any]:
    stored = args.get("since") is None and args.get("cursor") is None  # stored cursors advance: a write
    with hub.db.write() if stored else hub.db.read() as s:
        return feed_pages.read(s, caller.agent_id, admin.grants_of(s, caller.agent_id),
                               project=args.get("project"), kinds=args.get("kinds"), since=args.get("since"),
                               limit=args.get("limit", feed_pages.DEFAULT_LIMIT), cursor=args.get("cursor"))


def _render_feed(r: dict[str, Any]) -> str:
    lines = [f"#{e['id']} {e['kind']}: {e['title']}" for e in r["events"]] or ["no new events"]
    lines.append(f"next_since={r['next_since']}" + (" (more exist)" if r.get("has_more") else ""))
    return "\n".join(lines)


def _subscribe(hub: Hub, caller: Caller, args: dict[str, Any]) -> dict[str, Any]:
    with hub.db.write() as s:
        return subscriptions.subscribe(s, hub.clock, caller.agent_id, admin.grants_of(s, caller.agent_id),
                                       args["kinds"], args.get("project"))


def _unsubscribe(hub: Hub, caller: Caller, args: dict[str, Any]) -> dict[str, Any]:
    with hub.db.write() as s:
        return subscriptions.unsubscribe(s, caller.agent_id, args["subscription_id"])


_SINCE = {"type": "integer", "minimum": 0, "maximum": json_shape.INT_MAX,
          "description": "A position (exclusive): next_since of an earlier page."}
_CURSOR = {"type": "string", "minLength": 1, "maxLength": paging.MAX_CURSOR_CHARS,
           "description": "next_cursor of an earlier page, passed unchanged: the next page starts after it. "
                          "Stable under inserts: every row is listed once. A malformed cursor is invalid_argument."}
_INBOX_POST = {
    "project": {**_NAME, "description": "The project (name or id) you work on that this concerns."},
    "title": {"type": "string", "minLength": 1, "maxLength": inbox.MAX_TITLE_CHARS,
              "description": "One line your human sees first."},
    "body": {"type": "string", "maxLength": inbox.MAX_BODY_CHARS, "description": "Details (plain text)."},
    "expires_in_seconds": {"type": "integer", "minimum": 1, "maximum": inbox.MAX_EXPIRES_SECONDS,
                           "description": "Close it after this many seconds with on_expiry."},
}


def _limit(maximum: int, default: int = 50) -> dict[str, Any]:
    return {"type": "integer", "minimum": 1, "maximum": maximum,
            "description": f"Page size, 1-{maximum} (default {default}); over it is invalid_argument."}


def _kinds(what: str) -> dict[str, Any]:
    return {"type": "array", "items": {"type": "string", "enum": list(FEED_KINDS)}, "minItems": 1,
            "maxItems": len(FEED_KINDS), "description": f"Feed event kinds {what} (e.g. todo.created)."}


def _doorbell_test(hub: Hub, caller: Caller, args: dict[str, Any]) -> dict[str, Any]:
    from switchboard.notify import doorbell

    with hub.db.write() as s:
        rung = doorbell.ring(s, hub.clock, caller.agent_id)
    for session_id in rung.pop("targets"):
        hub.broker.publish_event(caller.agent_id, session_id)
    return rung


def _doorbell_ack(hub: Hub, caller: Caller, args: dict[str, Any]) -> dict[str, Any]:
    from switchboard.notify import doorbell

    with hub.db.write() as s:
        return doorbell.ack(s, hub.clock, caller.agent_id, args["ring_id"])


TOOLS: list[ToolSpec] = [
    ToolSpec("whoami", "Who am I", "Who am I: this agent, its human, and its grants (project and role).",
             _schema({}), outputs.WHOAMI, READ_ONLY, _whoami, _render_whoami),
    ToolSpec(
        "todo_list", "List todos",
        "List todos this agent can read, oldest first, without payloads. Filter by project (name or id), "
        "queue and state; limit 1-200 (default 50). When more exist, has_more is true and next_cursor is set: "
        "pass it as cursor (with the same filters) for the next page; every todo is listed once.",
        _schema({"project": _PROJECT, "queue": _QUEUE,
                 "state": {"type": "string", "enum": list(todos.STATES),
                           "description": "Only todos in this state (pending is what can be claimed)."},
                 "limit": _limit(todos.MAX_LIST_LIMIT), "cursor": _CURSOR}),
        outputs.TODO_LIST, READ_ONLY, _todo_list, _render_todo_list),
    ToolSpec("todo_get", "Get a todo",
             "One todo with its payload, result and attempts (claimant, times, outcome). A payload or result "
             "over the hub's size budget (default 64 KiB) is null with payload_truncated: true, payload_bytes, "
             "payload_preview (the first bytes of its JSON text) and payload_next_offset: fetch the rest with "
             "todo_payload.",
             _schema({"todo_id": _TODO_ID}, ["todo_id"]), outputs.TODO_GET, READ_ONLY, _todo_get, _render_todo_get),
    ToolSpec(
        "todo_payload", "Read a todo's payload in parts",
        "A byte range of a todo's payload (or result) as JSON text (sorted keys, compact, ASCII with \\u "
        "escapes), for payloads too big to return whole. Start at payload_next_offset from todo_get or "
        "todo_claim (or 0) and call again with next_offset until it is null; the concatenated data parses "
        "as the JSON value. Secret refs stay refs.",
        _schema({"todo_id": _TODO_ID,
                 "part": {"type": "string", "enum": list(payloads.PARTS),
                          "description": "payload (default) or result."},
                 "offset": {"type": "integer", "minimum": 0, "maximum": json_shape.INT_MAX,
                            "description": "First byte of the range, 0 to the part's size (default 0)."},
                 "length": {"type": "integer", "minimum": 1, "maximum": payloads.MAX_BUDGET_BYTES,
                            "description": "Bytes wanted, 1 to the hub's payload budget (default: the budget, "
                                           "64 KiB unless configured); more is invalid_argument."}},
                ["todo_id"]),
        outputs.TODO_PAYLOAD, READ_ONLY, _todo_payload, _render_payload),
    ToolSpec(
        "todo_claim", "Claim a todo",
        "Claim a todo by todo_id (as a wake names it), or the next pending one (optionally in a project/queue; "
        f"priority, then oldest). Returns the todo with its payload, a lease (default {leases.DEFAULT_LEASE_SECONDS} s, "
        f"max {leases.MAX_LEASE_SECONDS}) and a lease_token (fence); call todo_heartbeat before the lease runs out, "
        "or the todo returns to the queue. Claiming a todo you already hold returns your current claim. "
        "{empty: true} when nothing is pending.",
        _schema({"todo_id": _TODO_ID, "project": _PROJECT, "queue": _QUEUE, "lease_seconds": _LEASE_SECONDS}),
        outputs.TODO_CLAIM, WRITE_IDEMPOTENT, _todo_claim, _render_claim),
    ToolSpec(
        "todo_heartbeat", "Extend a lease",
        "Extend the lease on a todo you hold to max(current expiry, now + lease_seconds); never shortens it.",
        _schema({"todo_id": _TODO_ID, "lease_seconds": _LEASE_SECONDS, "lease_token": _LEASE_TOKEN}, ["todo_id"]),
        outputs.TODO_ROW_OUT, WRITE_IDEMPOTENT, _held_op(leases.heartbeat, "lease_seconds"), _render_row),
    ToolSpec(
        "todo_complete", "Complete a todo",
        "Mark a todo you hold as done, with an optional result (object or text).",
        _schema({"todo_id": _TODO_ID, "result": {"description": "What you did: a JSON object or text."},
                 "lease_token": _LEASE_TOKEN}, ["todo_id"]),
        outputs.TODO_ROW_OUT, WRITE, _held_op(leases.complete, "result", one_statement=True), _render_row),
    ToolSpec(
        "todo_fail", "Report a failed attempt",
        "Report that an attempt failed, with a summary. The todo is retried after a backoff (30 s doubling, "
        "at most 15 min) or dead-lettered after max_attempts failures.",
        _schema({"todo_id": _TODO_ID, "summary": {"type": "string", "maxLength": leases.MAX_SUMMARY_CHARS,
                                                  "description": "Why it failed (plain text)."},
                 "lease_token": _LEASE_TOKEN}, ["todo_id"]),
        outputs.TODO_ROW_OUT, WRITE, _held_op(leases.fail, "summary"), _render_row),
    ToolSpec(
        "todo_release", "Release a todo",
        "Give a todo you hold back to the queue (pending again; no failure counted).",
        _schema({"todo_id": _TODO_ID, "lease_token": _LEASE_TOKEN}, ["todo_id"]),
        outputs.TODO_ROW_OUT, WRITE, _held_op(leases.release), _render_row),
    ToolSpec(
        "secret_fetch", "Fetch a secret",
        "Fetch the value behind a secret ref ([secret ref=sec_... type=...] in payloads and titles). Needs "
        "work on the ref's project; every fetch is audited (secret.fetched) and rate limited.",
        _schema({"ref": {"type": "string", "minLength": 1, "maxLength": 100,
                         "description": "The secret ref (sec_...) as it appears in the payload."}}, ["ref"]),
        outputs.SECRET, {**WRITE, "idempotentHint": True}, vault.fetch_tool, vault.render_fetch),
    ToolSpec(
        "feed_read", "Read the feed",
        "Feed events (what happened) in projects you can read, oldest first. With since (an event id) the read "
        "is stateless; without it your stored cursor per project is used and advanced past what this page "
        "returned. next_since and next_cursor (the same position, opaque) are in every page: pass either "
        "back as since or cursor to read on statelessly. limit 1-200 (default 50); has_more says when more exist.",
        _schema({"project": _PROJECT, "kinds": _kinds("to return"), "since": _SINCE, "cursor": _CURSOR,
                 "limit": _limit(feed_pages.MAX_LIMIT, feed_pages.DEFAULT_LIMIT)}),
        outputs.FEED, READ_ONLY, _feed_read, _render_feed),
    ToolSpec(
        "question_post", "Ask your human",
        "Ask your human a question in a project you work on. options limits the answers; expires_in_seconds "
        "with on_expiry ('expire' or one of the options) lets the hub close it. The answer arrives in the "
        "notifications trailer, inbox_wait and inbox_read.",
        _schema({**_INBOX_POST, "options": {"type": "array", "items": {"type": "string", "minLength": 1,
                                                                        "maxLength": 200},
                                            "minItems": 1, "maxItems": inbox.MAX_OPTIONS,
                                            "description": "The allowed answers (omit for free text)."},
                 "on_expiry": {"type": "string", "minLength": 1, "maxLength": 200,
                               "description": "'expire', or the option the hub answers when it expires."}},
                ["project", "title"]),
        outputs.ITEM, WRITE, _post("question"), _render_item),
    ToolSpec(
        "approval_request", "Ask for approval",
        "Ask your human to approve or deny something before you do it. expires_in_seconds with on_expiry "
        "('deny' by default, 'approve' or 'expire') lets the hub decide if nobody does.",
        _schema({**_INBOX_POST,
                 "on_expiry": {"type": "string", "enum": ["deny", "approve", "expire"],
                               "description": "What the hub decides when it expires (default deny)."}},
                ["project", "title"]),
        outputs.ITEM, WRITE, _post("approval"), _render_item),
    ToolSpec(
        "inbox_read", "Read your inbox",
        "Your questions and approvals with their answers and decisions (who, when, through which path), in "
        "order of their last change. status: open, answered, decided, expired or resolved; since or cursor: "
        "next_since or next_cursor of an earlier page (not both); limit 1-200 (default 50).",
        _schema({"status": {"type": "string", "enum": list(inbox.READ_STATUSES),
                            "description": "Only items in this status (resolved: answered, decided or expired)."},
                 "since": _SINCE, "cursor": _CURSOR, "limit": _limit(inbox.MAX_READ_LIMIT)}),
        outputs.INBOX, READ_ONLY, _inbox_read, _render_inbox),
    ToolSpec(
        "inbox_wait", "Wait for an answer",
        "Block until one of your questions or approvals is resolved, at most wait_seconds (default 30, max 60; "
        "0 just checks). Without since it returns each resolution once (your stored position); with since "
        "(next_since of an earlier call) it returns those after it. {resolved: [], timed_out: true} on time-out.",
        _schema({"wait_seconds": {"type": "number", "minimum": 0, "maximum": waiting.MAX_SECONDS,
                                  "description": "How long to wait, in seconds (default 30, max 60; 0 polls)."},
                 "since": _SINCE}),
        outputs.WAIT, WRITE, _inbox_wait_sync, _render_wait, waiter=_inbox_wait),
    ToolSpec(
        "notify_subscribe", "Subscribe to feed events",
        "Subscribe to feed events of the given kinds (optionally in one project): new ones arrive in the "
        "notifications trailer of your next tool results, each once. Starts at the newest matching event "
        "(no history); an unscoped subscription covers the projects you can read at each call.",
        _schema({"kinds": _kinds("to subscribe to"), "project": _PROJECT}, ["kinds"]),
        outputs.SUBSCRIBE, WRITE, _subscribe,
        lambda r: f"subscribed {r['subscription_id']} to {', '.join(r['kinds'])} from #{r['cursor']}"),
    ToolSpec(
        "notify_unsubscribe", "Unsubscribe",
        "Remove one of your subscriptions.",
        _schema({"subscription_id": {**_ID, "description": "The subscription_id notify_subscribe returned."}},
                ["subscription_id"]),
        outputs.UNSUBSCRIBE, WRITE_IDEMPOTENT, _unsubscribe, lambda r: f"removed {r['subscription_id']}"),
    ToolSpec(
        "doorbell_test", "Test the doorbell",
        "Send a test wake to every attached session of this agent; the model that receives it calls "
        "doorbell_ack with its ring_id. sessions is how many sessions were rung (0: none attached).",
        _schema({}), outputs.DOORBELL_TEST, WRITE, _doorbell_test,
        lambda r: f"doorbell {r['ring_id']} rang {r['sessions']} session(s)"),
    ToolSpec(
        "doorbell_ack", "Acknowledge a doorbell test",
        "Confirm that you received a doorbell test wake (its ring_id attribute).",
        _schema({"ring_id": {**_ID, "description": "The ring_id attribute of the doorbell wake."}}, ["ring_id"]),
        outputs.DOORBELL_ACK, WRITE_IDEMPOTENT, _doorbell_ack, lambda r: f"doorbell {r['ring_id']} heard"),
]
TOOLS.extend(RELAY_TOOLS)
TOOLS_BY_NAME = {t.name: t for t in TOOLS}
