"""Running a tool: validate the arguments, call the handler, shape the result (DESIGN.md §6.3, §6.4).

A result is ``{"content": [{"type": "text", "text": ...}], "structuredContent": {...},
"isError": bool}``; an error's structured content is ``{code, message, retryable}`` and its
text says what to do (:func:`error_text`). A successful result may also carry
``"notifications": {"pending": [...]}`` (the trailer), copied into
``structuredContent.notifications`` and as a leading ``[switchboard] N pending: ...`` line.
``inbox_wait`` is the one tool with an async ``waiter``: it parks on the broker instead of a
thread (:func:`call_tool_async`). Bad input is a tool error, never a traceback.
"""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING, Any

import anyio
import jsonschema

from switchboard.errors import InvalidArgument, SwitchboardError
from switchboard.intake import json_shape
from switchboard.mcp_server.specs import Caller, ToolSpec
from switchboard.mcp_server.tools import TODO_ID_ALIAS, TOOLS_BY_NAME
from switchboard.notify import trailer

if TYPE_CHECKING:
    from switchboard.hub import Hub

log = logging.getLogger(__name__)


HINTS = {
    "unauthenticated": "the token is missing, unknown or revoked: your human runs `switchboard token vend AGENT` "
                       "and restarts this session with the new SWITCHBOARD_TOKEN",
    "forbidden": "this agent has no grant for that: ask your human (switchboard grant AGENT PROJECT)",
    "not_found": "check the id (todo_list, inbox_read); ids are case-sensitive",
    "conflict": "the state changed or your lease was lost: call todo_get, and todo_claim again if it is pending",
    "invalid_argument": "fix the arguments (see the tool's input schema) and call again",
    "rate_limited": "wait a minute, then call again",
    "human_approval_required": "a human must approve this first (web UI or the permission prompt)",
    "internal": "call again later; if it persists, ask your human to run `switchboard doctor AGENT`",
    "hub_unreachable": "the Switchboard hub is down or --url is wrong: your human starts `switchboard serve` "
                       "(or fixes --url); then call again",
}


def error_text(body: dict[str, Any]) -> str:
    """The one line an error result shows the model (Claude Code shows it only the text of an
    error result: anthropics/claude-code issue 86032, DESIGN.md §6.4): code, retryable, message
    and what to do."""
    hint = HINTS.get(str(body["code"]), HINTS["internal"])
    message = " ".join(str(body["message"]).split())
    return (f"error {body['code']} (retryable: {'yes' if body['retryable'] else 'no'}): {message}. "
            f"What to do: {hint}.")


def error_result(exc: SwitchboardError) -> dict[str, Any]:
    """A tool error result: ``isError`` with ``{code, message, retryable}`` and :func:`error_text`."""
    body = {"code": exc.code if exc.code in _TOOL_CODES else _TOOL_CODE_MAP.get(exc.code, "internal"),
            "message": exc.message, "retryable": exc.retryable}
    return {"content": [{"type": "text", "text": error_text(body)}], "structuredContent": body, "isError": True}


_TOOL_CODES = {"unauthenticated", "forbidden", "not_found", "conflict", "invalid_argument", "rate_limited",
               "human_approval_required", "internal"}
_TOOL_CODE_MAP = {"dependency_unavailable": "internal", "malformed_request": "invalid_argument",
                  "malformed_payload": "invalid_argument"}


def validate(name: str, arguments: Any) -> tuple[ToolSpec, dict[str, Any]]:
    """The tool and its arguments, checked against its input schema.

    Raises:
        InvalidArgument: unknown tool, or arguments that do not match the schema.
    """
    spec = TOOLS_BY_NAME.get(name)
    if spec is None:
        raise InvalidArgument(f"unknown tool {name!r}")
    args = {} if arguments is None else arguments
    if not isinstance(args, dict):
        raise InvalidArgument("arguments must be a JSON object")
    json_shape.check(args)  # depth, finite numbers, 64-bit integers, no lone surrogates
    if TODO_ID_ALIAS in args and "todo_id" in spec.input_schema["properties"]:
        if "todo_id" in args:
            raise InvalidArgument("give todo_id (or its deprecated alias id), not both")
        args = {("todo_id" if k == TODO_ID_ALIAS else k): v for k, v in args.items()}
    try:
        jsonschema.validate(args, spec.input_schema)
    except jsonschema.ValidationError as exc:
        where = "/".join(str(p) for p in exc.absolute_path) or "arguments"
        raise InvalidArgument(f"{where}: {schema_message(exc)}") from None
    return spec, args


def schema_message(exc: jsonschema.ValidationError) -> str:
    """What is wrong, without quoting the value back: jsonschema's own messages repeat it whole
    (``'xxx…' is too long``: a 100 KB title gave a 100 KB error, and never named the limit;
    a new-user run). Limits are named; other messages are cut to 300 characters."""
    limit, value = exc.validator_value, exc.instance
    size = len(value) if isinstance(value, (str, list, dict)) else None
    wording = {
        "maxLength": f"must be at most {limit} characters (got {size})",
        "minLength": f"must be at least {limit} character{'s' if limit != 1 else ''}",
        "maxItems": f"must have at most {limit} items (got {size})",
        "minItems": f"must have at least {limit} item{'s' if limit != 1 else ''}",
        "maximum": f"must be at most {limit}",
        "minimum": f"must be at least {limit}",
        "pattern": f"must match {limit}",
    }.get(str(exc.validator))
    if wording is not None:
        return wording
    if exc.validator == "type":
        names = limit if isinstance(limit, list) else [limit]
        return "must be " + " or ".join(_TYPE_WORDS.get(str(n), str(n)) for n in names)
    if exc.validator == "enum" and isinstance(limit, list):
        return "must be one of " + ", ".join(json.dumps(v) for v in limit)[:300]
    if exc.validator == "additionalProperties" and isinstance(value, dict):
        known = set((exc.schema or {}).get("properties", {}))
        unknown = [k[:40] for k in value if k not in known][:5]
        return "unknown argument" + ("s" if len(unknown) > 1 else "") + ": " + ", ".join(unknown)
    message = exc.message  # the remaining validators quote our schema, not the value, mostly
    return message if len(message) <= 300 else message[:299] + "…"


_TYPE_WORDS = {"string": "a string", "integer": "a whole number", "number": "a number", "boolean": "true or false",
               "object": "an object", "array": "a list", "null": "null"}


def invoke(hub: Hub, caller: Caller, name: str, arguments: Any) -> dict[str, Any]:
    """Validate ``arguments`` against the tool's schema and run it; return structured content.

    Raises:
        InvalidArgument: unknown tool, or arguments that do not match the schema.
        SwitchboardError: whatever the tool raises (``not_found``, ``conflict``, ...).
    """
    spec, args = validate(name, arguments)
    return spec.handler(hub, caller, args)


def success(hub: Hub, caller: Caller, name: str, structured: dict[str, Any], *,
            with_trailer: bool = True) -> dict[str, Any]:
    """The wire result of a successful call, with the notifications trailer when something is
    pending (DESIGN.md §6.4). A failing trailer is logged and left off: it never fails the call."""
    result: dict[str, Any] = {"content": [{"type": "text", "text": TOOLS_BY_NAME[name].render(structured)}],
                              "structuredContent": structured, "isError": False}
    if with_trailer:
        try:
            member = trailer.collect(hub.db, caller.agent_id)
        except Exception as exc:  # noqa: BLE001 - the trailer is a nudge; the ledger keeps everything
            log.warning("notifications trailer skipped (%s)", type(exc).__name__)
            member = None
        if member is not None:
            # DESIGN.md §6.4: the same items in three places, so a delivered item is one the model
            # could read (Claude Code shows it structuredContent only, when there is one).
            result["notifications"] = member
            result["structuredContent"] = {**structured, "notifications": member}
            first = result["content"][0]
            first["text"] = trailer.text_block(member) + "\n" + first["text"]
    return result


def _internal(name: str) -> dict[str, Any]:
    log.exception("tool %s failed", name)
    return error_result(SwitchboardError("internal error; the operation may be retried"))


def call_tool(hub: Hub, caller: Caller, name: str, arguments: Any, *, with_trailer: bool = True) -> dict[str, Any]:
    """Run a tool for ``caller`` and return the wire-shaped result (never raises for bad input).

    Args:
        name: a tool name from :data:`~switchboard.mcp_server.tools.TOOLS`.
        arguments: the JSON arguments (an object, or ``None`` for none).
        with_trailer: add the notifications trailer (off only for benchmarks).
    """
    try:
        structured = invoke(hub, caller, name, arguments)
    except SwitchboardError as exc:
        return error_result(exc)
    except Exception:  # noqa: BLE001 - a tool never answers with a traceback
        return _internal(name)
    return success(hub, caller, name, structured, with_trailer=with_trailer)


async def call_tool_async(hub: Hub, caller: Caller, name: str, arguments: Any, *,
                          with_trailer: bool = True) -> dict[str, Any]:
    """:func:`call_tool` for the async servers: database work runs in worker threads, and a tool
    with a ``waiter`` (``inbox_wait``) waits on the event loop, holding no thread."""
    spec = TOOLS_BY_NAME.get(name)
    if spec is None or spec.waiter is None:
        return await anyio.to_thread.run_sync(
            lambda: call_tool(hub, caller, name, arguments, with_trailer=with_trailer))
    try:
        spec, args = validate(name, arguments)
        structured = await spec.waiter(hub, caller, args)
    except SwitchboardError as exc:
        return error_result(exc)
    except Exception:  # noqa: BLE001
        return _internal(name)
    return await anyio.to_thread.run_sync(
        lambda: success(hub, caller, name, structured, with_trailer=with_trailer))
