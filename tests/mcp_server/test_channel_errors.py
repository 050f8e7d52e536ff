"""Errors that only the stdio channel adapter can show as tool results."""

from __future__ import annotations

import pytest

from tests.conftest import LiveApp
from tests.mcp_server.agent_clients import connect

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def test_a_refused_token_is_an_unauthenticated_tool_error(live: LiveApp) -> None:
    async with connect("stdio", live.url, "sbk_not-a-token") as agent:
        body = await agent.error("whoami")
        assert body["code"] == "unauthenticated" and body["retryable"] is False
