"""The tool catalogue, defined once (DESIGN.md §6.3).

Each tool has a JSON input schema, a handler that runs in the hub with the calling agent as
actor, and a short text rendering. The MCP server (``/mcp``), the REST routes the channel
adapter calls, and the adapter's ``tools/list`` all read :data:`TOOLS`; the adapter never
defines a tool of its own.

A result is ``{"content": [{"type": "text", "text": ...}], "structuredContent": {...},
"isError": bool}``; an error's structured content is ``{code, message, retryable}``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import jsonschema
from sqlalchemy import select

from switchboard import directory
from switchboard.errors import InvalidArgument, SwitchboardError
from switchboard.intake import vault
from switchboard.models import Agent, Human, Project
from switchboard.queue import leases, todos

if TYPE_CHECKING:
    from switchboard.hub import Hub

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Caller:
    """The actor of a tool call, resolved from the bearer token."""

    agent_id: str
    agent_name: str
    human_id: str


@dataclass(frozen=True)
class ToolSpec:
    """One tool: name, description, input schema, handler and text rendering."""

    name: str
    description: str
    input_schema: dict[str, Any]
    handler: Callable[[Hub, Caller, dict[str, Any]], dict[str, Any]]
    render: Callable[[dict[str, Any]], str]

    def definition(self) -> dict[str, Any]:
        """The MCP ``Tool`` shape (camelCase wire names)."""
        return {"name": self.name, "description": self.description, "inputSchema": self.input_schema}


def _schema(properties: dict[str, Any], required: list[str] | None = None) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "required": required or [], "additionalProperties": False}


_ID = {"type": "string", "minLength": 1, "maxLength": 100}
_NAME = {"type": "string", "minLength": 1, "maxLength": 100}


def _whoami(hub: Hub, caller: Caller, args: dict[str, Any]) -> dict[str, Any]:
    with hub.db.read() as s:
        agent = s.get(Agent, caller.agent_id)
        human = s.get(Human, caller.human_id)
        grants = directory.grants_of(s, caller.agent_id)
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
        grants = directory.grants_of(s, caller.agent_id)
        return todos.list_todos(s, grants, project=args.get("project"), queue=args.get("queue"),
                                state=args.get("state"), limit=args.get("limit", 50))


def _render_todo_list(r: dict[str, Any]) -> str:
    if not r["todos"]:
        return "no todos"
    lines = [f"{t['id']} [{t['state']}] {t['queue']}: {t['title']}" for t in r["todos"]]
    if r.get("has_more"):
        lines.append("(more exist: narrow by project/queue/state or raise limit)")
    return "\n".join(lines)


def _todo_get(hub: Hub, caller: Caller, args: dict[str, Any]) -> dict[str, Any]:
    with hub.db.read() as s:
        return todos.get(s, directory.grants_of(s, caller.agent_id), args["id"])


def _render_todo_get(r: dict[str, Any]) -> str:
    tries = ", ".join(f"#{a['number']} {a['outcome'] or 'open'}" for a in r["attempts"]) or "none"
    return f"{r['id']} [{r['state']}] {r['queue']}: {r['title']} (attempts: {tries})"


def _todo_claim(hub: Hub, caller: Caller, args: dict[str, Any]) -> dict[str, Any]:
    if "id" in args and ("project" in args or "queue" in args):
        raise InvalidArgument("give either id, or project/queue for the next todo, not both")
    with hub.db.write() as s:
        grants = directory.grants_of(s, caller.agent_id)
        return leases.claim(s, hub.clock, caller.agent_id, grants, todo_id=args.get("id"),
                            project=args.get("project"), queue=args.get("queue"),
                            lease_seconds=args.get("lease_seconds", leases.DEFAULT_LEASE_SECONDS),
                            is_postgres=not hub.db.is_sqlite)


def _render_claim(r: dict[str, Any]) -> str:
    if r.get("empty"):
        return "nothing to claim"
    t = r["todo"]
    return f"claimed {t['id']} (attempt {r['attempt']}, lease until {r['lease_expires_at']}): {t['title']}"


def _held_op(op: Callable[..., dict[str, Any]], *names: str) -> Callable[[Hub, Caller, dict[str, Any]], dict[str, Any]]:
    """A tool handler running lease operation ``op`` with ``id``, ``lease_token`` and ``names``."""

    def handler(hub: Hub, caller: Caller, args: dict[str, Any]) -> dict[str, Any]:
        extra = {name: args[name] for name in names if name in args}
        with hub.db.write() as s:
            grants = directory.grants_of(s, caller.agent_id)
            return op(s, hub.clock, caller.agent_id, grants, todo_id=args["id"],
                      lease_token=args.get("lease_token"), **extra)

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
_LEASE_SECONDS = {"type": "integer", "minimum": 1, "maximum": leases.MAX_LEASE_SECONDS}


TOOLS: list[ToolSpec] = [
    ToolSpec("whoami", "Who am I: this agent, its human, and its grants (project and role).",
             _schema({}), _whoami, _render_whoami),
    ToolSpec(
        "todo_list",
        "List todos this agent can read, oldest first, without payloads. Filter by project (name or id), "
        "queue and state; limit 1-200 (default 50); has_more says when more exist.",
        _schema({"project": _NAME, "queue": _NAME,
                 "state": {"type": "string", "enum": list(todos.STATES)},
                 "limit": {"type": "integer", "minimum": 1, "maximum": todos.MAX_LIST_LIMIT}}),
        _todo_list, _render_todo_list),
    ToolSpec("todo_get", "One todo with its payload, result and attempts (claimant, times, outcome).",
             _schema({"id": _ID}, ["id"]), _todo_get, _render_todo_get),
    ToolSpec(
        "todo_claim",
        "Claim a todo by id, or the next pending one (optionally in a project/queue; priority, then oldest). "
        "Returns the todo with its payload, a lease (default 300 s, max 86400) and a lease_token (fence); "
        "claiming a todo you already hold returns your current claim. {empty: true} when nothing is pending.",
        _schema({"id": _ID, "project": _NAME, "queue": _NAME, "lease_seconds": _LEASE_SECONDS}),
        _todo_claim, _render_claim),
    ToolSpec(
        "todo_heartbeat",
        "Extend the lease on a todo you hold to max(current expiry, now + lease_seconds); never shortens it.",
        _schema({"id": _ID, "lease_seconds": _LEASE_SECONDS, "lease_token": _LEASE_TOKEN}, ["id"]),
        _held_op(leases.heartbeat, "lease_seconds"), _render_row),
    ToolSpec(
        "todo_complete",
        "Mark a todo you hold as done, with an optional result (object or text).",
        _schema({"id": _ID, "result": {}, "lease_token": _LEASE_TOKEN}, ["id"]),
        _held_op(leases.complete, "result"), _render_row),
    ToolSpec(
        "todo_fail",
        "Report that an attempt failed, with a summary. The todo is retried after a backoff (30 s doubling, "
        "at most 15 min) or dead-lettered after max_attempts failures.",
        _schema({"id": _ID, "summary": {"type": "string", "maxLength": leases.MAX_SUMMARY_CHARS},
                 "lease_token": _LEASE_TOKEN}, ["id"]),
        _held_op(leases.fail, "summary"), _render_row),
    ToolSpec(
        "todo_release",
        "Give a todo you hold back to the queue (pending again; no failure counted).",
        _schema({"id": _ID, "lease_token": _LEASE_TOKEN}, ["id"]),
        _held_op(leases.release), _render_row),
    ToolSpec(
        "secret_fetch",
        "Fetch the value behind a secret ref ([secret ref=sec_... type=...] in payloads and titles). Needs "
        "work on the ref's project; every fetch is audited (secret.fetched) and rate limited.",
        _schema({"ref": {"type": "string", "minLength": 1, "maxLength": 100}}, ["ref"]),
        vault.fetch_tool, vault.render_fetch),
]
TOOLS_BY_NAME = {t.name: t for t in TOOLS}


def error_result(exc: SwitchboardError) -> dict[str, Any]:
    """A tool error result: ``isError`` with ``{code, message, retryable}``."""
    body = {"code": exc.code if exc.code in _TOOL_CODES else _TOOL_CODE_MAP.get(exc.code, "internal"),
            "message": exc.message, "retryable": exc.retryable}
    return {"content": [{"type": "text", "text": f"error {body['code']}: {body['message']}"}],
            "structuredContent": body, "isError": True}


_TOOL_CODES = {"unauthenticated", "forbidden", "not_found", "conflict", "invalid_argument", "rate_limited",
               "human_approval_required", "internal"}
_TOOL_CODE_MAP = {"dependency_unavailable": "internal", "malformed_request": "invalid_argument",
                  "malformed_payload": "invalid_argument"}


def invoke(hub: Hub, caller: Caller, name: str, arguments: Any) -> dict[str, Any]:
    """Validate ``arguments`` against the tool's schema and run it; return structured content.

    Raises:
        InvalidArgument: unknown tool, or arguments that do not match the schema.
        SwitchboardError: whatever the tool raises (``not_found``, ``conflict``, ...).
    """
    spec = TOOLS_BY_NAME.get(name)
    if spec is None:
        raise InvalidArgument(f"unknown tool {name!r}")
    args = {} if arguments is None else arguments
    if not isinstance(args, dict):
        raise InvalidArgument("arguments must be a JSON object")
    try:
        jsonschema.validate(args, spec.input_schema)
    except jsonschema.ValidationError as exc:
        where = "/".join(str(p) for p in exc.absolute_path) or "arguments"
        raise InvalidArgument(f"{where}: {exc.message}") from None
    return spec.handler(hub, caller, args)


def call_tool(hub: Hub, caller: Caller, name: str, arguments: Any) -> dict[str, Any]:
    """Run a tool for ``caller`` and return the wire-shaped result (never raises for bad input).

    Args:
        name: a tool name from :data:`TOOLS`.
        arguments: the JSON arguments (an object, or ``None`` for none).
    """
    try:
        structured = invoke(hub, caller, name, arguments)
    except SwitchboardError as exc:
        return error_result(exc)
    except Exception:  # noqa: BLE001 - a tool never answers with a traceback
        log.exception("tool %s failed", name)
        return error_result(SwitchboardError("internal error; the operation may be retried"))
    return {"content": [{"type": "text", "text": TOOLS_BY_NAME[name].render(structured)}],
            "structuredContent": structured, "isError": False}


def resolve_caller(hub: Hub, token: str | None) -> Caller:
    """Resolve a bearer token to the calling agent.

    Raises:
        Unauthenticated: missing, unknown or revoked token.
    """
    with hub.db.read() as s:
        agent = directory.authenticate(s, token)
        return Caller(agent.id, agent.name, agent.human_id)


def bearer(authorization: str | None) -> str | None:
    """The token from an ``Authorization: Bearer <token>`` header value."""
    if not authorization:
        return None
    scheme, _, value = authorization.partition(" ")
    return value.strip() if scheme.lower() == "bearer" and value.strip() else None
