"""``switchboard inbox list|answer|decide`` against a running hub: the answer reaches the agent's
``inbox_wait`` (the serve process notices a resolution made by another process on its next
maintenance pass) and the notifications trailer."""

from __future__ import annotations

import subprocess
from typing import Any

import anyio
import pytest

from tests.conftest import LiveApp, cli, cli_env, switchboard_exe
from tests.mcp_server.agent_clients import connect

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def test_human_answers_and_decides_from_the_cli(live: LiveApp) -> None:
    env = cli_env(live.world.settings.home)
    async with connect("http", live.url, live.world.token) as agent:
        q = (await agent.ok("question_post", {"project": "acme", "title": "Tag v2?", "options": ["yes", "no"]}))
        a = (await agent.ok("approval_request", {"project": "acme", "title": "Drop the old table"}))
        qid, aid = q["structuredContent"]["id"], a["structuredContent"]["id"]
        listed = await anyio.to_thread.run_sync(lambda: cli(env, "inbox", "list", "--human", "alice"))
        assert [(i["id"], i["agent"], i["project"]) for i in listed["items"]] == [
            (qid, "claude1", "acme"), (aid, "claude1", "acme")]

        result: dict[str, Any] = {}

        async def wait() -> None:
            result.update(await agent.ok("inbox_wait", {"wait_seconds": 30}))

        async with anyio.create_task_group() as tg:
            tg.start_soon(wait)
            bad = await anyio.to_thread.run_sync(lambda: subprocess.run(
                [switchboard_exe(), "inbox", "answer", qid, "maybe", "--json"], env=env, capture_output=True, check=False,
                text=True, timeout=60))
            assert bad.returncode == 2 and '"invalid_argument"' in bad.stdout
            answered = await anyio.to_thread.run_sync(lambda: cli(env, "inbox", "answer", qid, "yes"))
            assert answered["status"] == "answered" and answered["resolved_via"] == "cli"
        assert [i["id"] for i in result["structuredContent"]["resolved"]] == [qid]
        # The wait's own result carries the trailer too: the answer is shown there, once.
        assert [i["id"] for i in result["notifications"]["pending"]] == [qid]

        decided = await anyio.to_thread.run_sync(
            lambda: cli(env, "inbox", "decide", aid, "approve", "--note", "backed up"))
        assert decided["decision"] == "approve" and decided["note"] == "backed up"
        twice = await anyio.to_thread.run_sync(lambda: subprocess.run(
            [switchboard_exe(), "inbox", "decide", aid, "deny", "--json"], env=env, capture_output=True, check=False,
            text=True, timeout=60))
        assert twice.returncode == 2 and '"conflict"' in twice.stdout
        items = (await agent.ok("whoami"))["notifications"]["pending"]
        assert [(i["kind"], i["id"]) for i in items] == [("approval.decided", aid)]
        remaining = await anyio.to_thread.run_sync(lambda: cli(env, "inbox", "list"))
        assert remaining["items"] == []
