"""MCP clients for the agent-surface tests: over Streamable HTTP (``/mcp``) and over stdio through
``switchboard channel`` as a subprocess, both reading RAW results (the typed client drops the
``notifications`` member: ``notes/mcp-and-channels.md``)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import httpx2
import mcp_types as types
from mcp import Client
from mcp.client.extension import ClientExtension, NotificationBinding
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from pydantic import BaseModel, TypeAdapter

from tests.conftest import cli_env, switchboard_exe

RAW = TypeAdapter(dict[str, Any])
TRANSPORTS = ("http", "stdio")


class Agent:
    """One connected MCP client; :meth:`call` returns the raw result dict."""

    def __init__(self, client: Client) -> None:
        self.client = client

    async def call(self, name: str, arguments: dict[str, Any] | None = None) -> dict[str, Any]:
        request = types.CallToolRequest(params=types.CallToolRequestParams(name=name, arguments=arguments or {}))
        return await self.client.session.send_request(request, RAW)  # type: ignore[arg-type]

    async def ok(self, name: str, arguments: dict[str, Any] | None = None) -> dict[str, Any]:
        """Call and assert success; return the raw result."""
        result = await self.call(name, arguments)
        assert not result.get("isError"), result
        return result

    async def error(self, name: str, arguments: dict[str, Any] | None = None) -> dict[str, Any]:
        """Call and assert an error result; return its ``{code, message, retryable}``."""
        result = await self.call(name, arguments)
        assert result.get("isError") is True, result
        assert "notifications" not in result
        body = result["structuredContent"]
        assert set(body) == {"code", "message", "retryable"}, body
        # Claude Code shows the model only the text of an error (anthropics/claude-code 86032):
        # one line with the code, whether to retry and what to do (DESIGN.md §6.4).
        [block] = result["content"]
        retry = "yes" if body["retryable"] else "no"
        assert block["text"].startswith(f"error {body['code']} (retryable: {retry}): "), block
        assert "What to do: " in block["text"] and "\n" not in block["text"], block
        return body


class WakeParams(BaseModel):
    """``notifications/claude/channel`` params as Claude Code reads them."""

    content: str
    meta: dict[str, str]


class ChannelListener(ClientExtension):
    """Receives ``notifications/claude/channel`` as Claude Code would."""

    identifier = "com.example/channel-test"

    def __init__(self) -> None:
        self.send, self.receive = anyio.create_memory_object_stream[WakeParams](100)

    def notifications(self) -> list[NotificationBinding[Any]]:
        async def on_wake(params: WakeParams) -> None:
            await self.send.send(params)

        return [NotificationBinding(method="notifications/claude/channel", params_type=WakeParams, handler=on_wake)]

    async def next_wake(self, timeout: float = 5.0) -> WakeParams:
        with anyio.fail_after(timeout):
            return await self.receive.receive()


def adapter_params(url: str, token: str, home: Any = None, **env: str) -> StdioServerParameters:
    """``switchboard channel --url URL`` as Claude Code spawns it."""
    full = {**cli_env(home or "/nonexistent"), "SWITCHBOARD_TOKEN": token, **env}
    return StdioServerParameters(command=switchboard_exe(), args=["channel", "--url", url], env=full)


@asynccontextmanager
async def connect(transport: str, url: str, token: str, home: Any = None,
                  extensions: list[Any] | None = None) -> AsyncIterator[Agent]:
    """An MCP client of the hub at ``url`` with ``token``, over ``transport`` (``http``/``stdio``)."""
    if transport == "http":
        async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=90) as http, \
                Client(streamable_http_client(f"{url}/mcp", http_client=http), mode="legacy",
                       extensions=extensions or []) as client:
            yield Agent(client)
    else:
        async with Client(adapter_params(url, token, home), mode="legacy", extensions=extensions or []) as client:
            yield Agent(client)
