"""What a tool is: :class:`ToolSpec`, the :class:`Caller` it runs for, and the MCP hint sets.

The catalogue (:mod:`.tools`, :mod:`.relay_tools`) is built from these; the call path
(:mod:`.calls`) runs them. This module imports nothing of the catalogue.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from switchboard.hub import Hub


@dataclass(frozen=True)
class Caller:
    """The actor of a tool call, resolved from the bearer token."""

    agent_id: str
    agent_name: str
    human_id: str
    session_key: str | None = None
    """The calling session, which a token-less lease is bound to (:func:`switchboard.mcp_server.callers.session_of`)."""
    session_id: str | None = None  # the channel adapter's session (X-Switchboard-Session), if any


@dataclass(frozen=True)
class ToolSpec:
    """One tool, with all its metadata in one place (a new tool is one more entry in
    :data:`switchboard.mcp_server.tools.TOOLS`).

    Attributes:
        name: the tool name.
        title: a short human title (MCP ``Tool.title``).
        description: what it does, for the model.
        input_schema: JSON Schema of the arguments; every property has a ``description``.
        output_schema: JSON Schema of ``structuredContent`` (with the optional ``notifications``
            member: :mod:`switchboard.mcp_server.outputs`).
        annotations: MCP tool annotations (``readOnlyHint``, ``idempotentHint``,
            ``destructiveHint``, ``openWorldHint``).
        handler: runs in the hub with the calling agent as actor; returns structured content.
        render: the short text rendering of a result.
        waiter: an async variant that parks on the event loop (``inbox_wait``).
    """

    name: str
    title: str
    description: str
    input_schema: dict[str, Any]
    output_schema: dict[str, Any]
    annotations: dict[str, bool]
    handler: Callable[[Hub, Caller, dict[str, Any]], dict[str, Any]]
    render: Callable[[dict[str, Any]], str]
    waiter: Callable[[Hub, Caller, dict[str, Any]], Awaitable[dict[str, Any]]] | None = None

    def definition(self) -> dict[str, Any]:
        """The MCP ``Tool`` shape (camelCase wire names)."""
        return {"name": self.name, "title": self.title, "description": self.description,
                "inputSchema": self.input_schema, "outputSchema": self.output_schema,
                "annotations": {"title": self.title, **self.annotations}}


READ_ONLY = {"readOnlyHint": True, "destructiveHint": False, "idempotentHint": True, "openWorldHint": False}
WRITE = {"readOnlyHint": False, "destructiveHint": False, "idempotentHint": False, "openWorldHint": False}
WRITE_IDEMPOTENT = {**WRITE, "idempotentHint": True}


def schema(properties: dict[str, Any], required: list[str] | None = None) -> dict[str, Any]:
    """A closed JSON Schema object: ``properties``, ``required`` (default none), no other members."""
    return {"type": "object", "properties": properties, "required": required or [], "additionalProperties": False}
