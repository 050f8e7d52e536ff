"""A lease is fenced by the session that claimed it (issue 18 item 5), on both databases.

Field failure: a session's lease expired, another session of the same agent claimed the todo
again, and the first session's late ``todo_complete`` without ``lease_token`` was recorded on
the newer attempt. Here the sessions are real: a ``switchboard channel`` adapter process over
stdio and an MCP session over Streamable HTTP, against ``switchboard serve`` as a process.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest

from switchboard.config import Settings
from switchboard.hub import Hub
from switchboard.queue import todos
from tests.conftest import World, cli_env, configure, free_port, start_serve, stop
from tests.mcp_server.agent_clients import connect
from tests.services import fresh_postgres_database

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(params=["sqlite", "postgresql"])
def world(request: pytest.FixtureRequest, tmp_path: Path) -> World:
    if request.param == "sqlite":
        settings = Settings(home=tmp_path / "instance")
    else:
        url = fresh_postgres_database(request.getfixturevalue("postgres_url"))
        settings = Settings(home=tmp_path / "instance", database_url=url)
    return configure(settings)


def _new_todo(world: World) -> str:
    hub = Hub(world.settings, role="cli")
    try:
        with hub.db.write() as s:
            todo, _ = todos.create(s, hub.clock, project_id=world.project_id, queue="reviews", kind="manual",
                                   title="Review the fence", payload={"n": 1})
            return todo.id
    finally:
        hub.close()


async def _claim_until(agent: Any, todo_id: str, timeout: float = 20.0) -> dict[str, Any]:
    """Claim ``todo_id`` as soon as the reaper has returned it to the queue."""
    with anyio.fail_after(timeout):
        while True:
            result = await agent.call("todo_claim", {"id": todo_id, "lease_seconds": 300})
            if not result.get("isError"):
                return result["structuredContent"]
            await anyio.sleep(0.2)


async def test_a_late_tokenless_complete_from_an_expired_session_is_refused(world: World, tmp_path: Path) -> None:
    env = cli_env(world.settings.home)
    if not world.settings.is_sqlite:
        env["SWITCHBOARD_DATABASE_URL"] = world.settings.database_url
    server = start_serve(env, free_port(), tmp_path / "serve.log")
    try:
        todo_id = _new_todo(world)
        async with connect("stdio", server.url, world.token, world.settings.home) as first, \
                connect("http", server.url, world.token) as second:
            claimed = (await first.ok("todo_claim", {"id": todo_id, "lease_seconds": 1}))["structuredContent"]
            assert claimed["attempt"] == 1
            # The first session's lease expires; the reaper returns the todo; the second claims it.
            again = await _claim_until(second, todo_id)
            assert again["attempt"] == 2

            late = await first.error("todo_complete", {"id": todo_id, "result": {"stale": True}})
            assert late["code"] == "conflict" and "lease lost" in late["message"]
            late = await first.error("todo_heartbeat", {"id": todo_id})
            assert late["code"] == "conflict"
            # Nor may the first session take over the newer claim by claiming it again.
            assert (await first.error("todo_claim", {"id": todo_id}))["code"] == "conflict"

            # A REST caller with the same token but no session of its own is another session too.
            rest = httpx2.post(f"{server.url}/api/v1/todos/{todo_id}/complete", json={"result": {"rest": 1}},
                               headers={"Authorization": f"Bearer {world.token}"}, timeout=30)
            assert rest.status_code == 409 and "lease lost" in rest.json()["detail"]

            done = (await second.ok("todo_complete", {"id": todo_id, "result": {"fresh": True}}))
            assert done["structuredContent"]["state"] == "done"
            got = (await second.ok("todo_get", {"id": todo_id}))["structuredContent"]
            assert got["result"] == {"fresh": True}
            assert [a["outcome"] for a in got["attempts"]] == ["lease_expired", "completed"]
    finally:
        stop(server.proc)


async def test_the_token_still_works_from_any_session(world: World, tmp_path: Path) -> None:
    env = cli_env(world.settings.home)
    if not world.settings.is_sqlite:
        env["SWITCHBOARD_DATABASE_URL"] = world.settings.database_url
    server = start_serve(env, free_port(), tmp_path / "serve.log")
    try:
        todo_id = _new_todo(world)
        async with connect("http", server.url, world.token) as first:
            claimed = (await first.ok("todo_claim", {"id": todo_id}))["structuredContent"]
        rest = httpx2.post(f"{server.url}/api/v1/todos/{todo_id}/complete",
                           json={"result": {"by": "token"}, "lease_token": claimed["lease_token"]},
                           headers={"Authorization": f"Bearer {world.token}"}, timeout=30)
        assert rest.status_code == 200 and rest.json()["state"] == "done"
    finally:
        stop(server.proc)
