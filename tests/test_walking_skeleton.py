"""End to end with real processes (issue 2): CLI setup, ``switchboard serve``, a GitHub delivery,
a wake at ``switchboard channel`` spawned over stdio by the MCP client, claim and complete."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters

from tests.conftest import (
    CASES,
    cli,
    cli_env,
    free_port,
    github_headers,
    start_serve,
    stop,
    switchboard_exe,
    wait_for,
)
from tests.mcp_server.agent_clients import ChannelListener

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _rows(db: Path, sql: str) -> list[tuple[Any, ...]]:
    with sqlite3.connect(db) as conn:
        return conn.execute(sql).fetchall()


async def test_github_delivery_wakes_the_channel_and_is_claimed(tmp_path: Path) -> None:
    home = tmp_path / "instance"
    env = cli_env(home, SWITCHBOARD_LOG_LEVEL="INFO")
    cli(env, "init")
    cli(env, "human", "add", "alice")
    cli(env, "identity", "link", "--human", "alice", "--provider", "github", "--external-id", "21031067",
        "--login", "Codertocat")
    cli(env, "project", "add", "acme")
    port = free_port()
    source = cli(env | {"SWITCHBOARD_PUBLIC_URL": f"http://127.0.0.1:{port}"},
                 "source", "add", "--project", "acme", "--provider", "github", "--queue", "reviews")
    assert source["url"] == f"http://127.0.0.1:{port}/hooks/{source['id']}"
    cli(env, "agent", "add", "claude1", "--human", "alice")
    cli(env, "grant", "claude1", "acme", "--role", "work")
    token = cli(env, "token", "vend", "claude1")["token"]
    assert token.startswith("sbk_")

    server = start_serve(env, port, tmp_path / "serve.log")
    try:
        listener = ChannelListener()
        params = StdioServerParameters(command=switchboard_exe(), args=["channel", "--url", server.url],
                                       env={**env, "SWITCHBOARD_TOKEN": token})
        async with Client(params, mode="legacy", extensions=[listener]) as client:
            caps = client.session.initialize_result.capabilities  # type: ignore[union-attr]
            assert caps.experimental is not None and "claude/channel" in caps.experimental
            instructions = client.session.initialize_result.instructions or ""  # type: ignore[union-attr]
            assert "never instructions" in instructions
            names = {t.name for t in (await client.list_tools()).tools}
            assert {"whoami", "todo_list", "todo_claim", "todo_complete"} <= names

            await anyio.to_thread.run_sync(lambda: wait_for(lambda: "agent stream attached" in server.log()))

            body = (CASES / "github" / "issues.opened.json").read_bytes()
            headers = github_headers(body, source["secret"], delivery="72d3162e-cc78-11e3-81ab-4c9367dc0958")
            resp = httpx2.post(source["url"], content=body, headers=headers)
            assert resp.status_code == 202, resp.text
            started = anyio.current_time()
            wake = await listener.next_wake()
            # Seconds, not the 30 s re-ring; its speed is bench/wake.py's (CI once took 1.004 s).
            assert anyio.current_time() - started < 5.0, "wake within seconds of the delivery"
            todo_id = wake.meta["todo_id"]
            assert wake.meta == {"todo_id": todo_id, "project": "acme", "queue": "reviews",
                                 "kind": "github.issues.opened", "provider": "github"}
            assert wake.content == (f"switchboard: todo {todo_id} on reviews: Issue #1 opened in "
                                    "Codertocat/Hello-World: Spelling error in the README file"
                                    f" (call todo_claim todo_id={todo_id})")
            assert "\n" not in wake.content

            claim = await client.call_tool("todo_claim", {"id": todo_id})
            assert not claim.is_error, claim
            claimed = claim.structured_content
            assert claimed["todo"]["id"] == todo_id and claimed["todo"]["state"] == "claimed"
            assert claimed["todo"]["payload"]["issue"]["number"] == 1 and claimed["attempt"] == 1
            again = await client.call_tool("todo_claim", {"id": todo_id})
            assert again.structured_content["lease_token"] == claimed["lease_token"]  # idempotent

            done = await client.call_tool("todo_complete", {"id": todo_id, "lease_token": claimed["lease_token"],
                                                            "result": {"summary": "fixed the typo"}})
            assert not done.is_error and done.structured_content["state"] == "done"

            # The same delivery again: duplicate, nothing new.
            dup = httpx2.post(source["url"], content=body, headers=headers)
            assert dup.status_code == 200 and dup.json() == {"delivery_id": resp.json()["delivery_id"],
                                                             "duplicate": True}
            # A bad signature: 401, nothing stored.
            forged = dict(headers, **{"X-GitHub-Delivery": "forged-1", "X-Hub-Signature-256": "sha256=" + "0" * 64})
            bad = httpx2.post(source["url"], content=body, headers=forged)
            assert bad.status_code == 401 and bad.json()["code"] == "signature_invalid"

            # An unknown sender: quarantined, nobody woken. Deliveries are processed in order, so
            # the next wake must be the one for the known sender's later delivery.
            stranger = json.loads(body)
            stranger["sender"]["id"] = 99999999
            stranger_body = json.dumps(stranger).encode()
            q = httpx2.post(source["url"], content=stranger_body,
                            headers=github_headers(stranger_body, source["secret"]))
            assert q.status_code == 202
            follow_up = json.loads(body)
            follow_up["issue"]["number"] = 2
            follow_up_body = json.dumps(follow_up).encode()
            assert httpx2.post(source["url"], content=follow_up_body,
                               headers=github_headers(follow_up_body, source["secret"])).status_code == 202
            next_wake = await listener.next_wake(timeout=30)  # after two deliveries' processing
            assert "Issue #2 opened" in next_wake.content

            listed = await client.call_tool("todo_list", {})
            states = {t["id"]: t["state"] for t in listed.structured_content["todos"]}
            assert states[todo_id] == "done" and len(states) == 2

        db = home / "switchboard.db"
        statuses = dict(_rows(db, "select id, status from deliveries"))
        assert statuses[q.json()["delivery_id"]] == "quarantined"
        assert len(statuses) == 3  # the forged one was not stored
        kinds = [k for (k,) in _rows(db, "select kind from feed_events order by id")]
        assert kinds.count("delivery.quarantined") == 1 and kinds.count("todo.created") == 2
    finally:
        stop(server.proc)
