"""The hub's MCP server over Streamable HTTP at /mcp, with a real MCP client and bearer tokens."""

from __future__ import annotations

import anyio
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from tests.conftest import CASES, LiveApp, github_headers

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def test_tools_over_streamable_http(live: LiveApp) -> None:
    body = (CASES / "github" / "issues.opened.json").read_bytes()
    assert live.post_hook(body, github_headers(body, live.world.secret)).status_code == 202
    async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {live.world.token}"}) as http:
        async with Client(streamable_http_client(f"{live.url}/mcp", http_client=http), mode="legacy") as client:
            names = {t.name for t in (await client.list_tools()).tools}
            assert {"whoami", "todo_list", "todo_claim", "todo_complete"} <= names
            me = await client.call_tool("whoami", {})
            assert me.structured_content["agent"]["name"] == "claude1"
            assert me.structured_content["human"]["name"] == "alice"
            assert me.structured_content["grants"] == [
                {"project_id": live.world.project_id, "project": "acme", "role": "work"}]

            todos: list = []
            with anyio.fail_after(10):
                while not todos:
                    todos = (await client.call_tool("todo_list", {})).structured_content["todos"]
                    await anyio.sleep(0.02)
            assert len(todos) == 1
            claim = await client.call_tool("todo_claim", {"project": "acme", "queue": "reviews"})
            assert claim.structured_content["todo"]["id"] == todos[0]["id"]
            missing = await client.call_tool("todo_complete", {"id": "td_unknown"})
            assert missing.is_error and missing.structured_content["code"] == "not_found"
            bad = await client.call_tool("todo_list", {"limit": 1000})
            assert bad.is_error and bad.structured_content == {
                "code": "invalid_argument", "message": bad.structured_content["message"], "retryable": False}


def test_mcp_without_a_valid_token_is_401(live: LiveApp) -> None:
    init = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                       "clientInfo": {"name": "t", "version": "1"}}}
    for headers in ({}, {"Authorization": "Bearer sbk_nope"}, {"Authorization": "Basic abc"}):
        resp = httpx2.post(f"{live.url}/mcp", json=init,
                           headers={**headers, "Accept": "application/json, text/event-stream"})
        assert resp.status_code == 401
        assert resp.json()["code"] == "unauthenticated"


def test_agent_routes_need_a_token(live: LiveApp) -> None:
    assert httpx2.get(f"{live.url}/api/v1/agent/tools").status_code == 401
    assert httpx2.post(f"{live.url}/api/v1/agent/tools/whoami", json={}).status_code == 401
    assert httpx2.get(f"{live.url}/api/v1/agent/stream").status_code == 401
    auth = {"Authorization": f"Bearer {live.world.token}"}
    resp = httpx2.post(f"{live.url}/api/v1/agent/tools/whoami", content=b"{not json", headers=auth)
    assert resp.status_code == 400 and resp.json()["code"] == "invalid_argument"
    unknown = httpx2.post(f"{live.url}/api/v1/agent/tools/nope", json={}, headers=auth)
    assert unknown.status_code == 200 and unknown.json()["isError"] is True
