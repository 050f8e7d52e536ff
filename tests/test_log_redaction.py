"""No payload or credential in any log line, at any level (issue 13 item 6)."""

from __future__ import annotations

import asyncio
import json
import logging
import re
from pathlib import Path

from switchboard.config import Settings
from switchboard.log_redaction import Redactor, mask
from tests.conftest import CASES, cli_env, configure, free_port, github_headers, start_serve, stop, wait_for
from tests.intake.planted_secrets import corpus
from tests.mcp_server.agent_clients import connect

PLANTED = next(p.value for p in corpus(seed=11) if p.fmt == "github_pat_classic")


def test_a_fetched_secret_and_the_token_never_reach_the_debug_log(tmp_path: Path) -> None:
    import httpx2

    home = tmp_path / "instance"
    world = configure(Settings(home=home))
    port = free_port()
    log_path = tmp_path / "serve.log"
    serve = start_serve(cli_env(home, SWITCHBOARD_LOG_LEVEL="DEBUG"), port, log_path)
    try:
        issue = json.loads((CASES / "github" / "issues.opened.json").read_bytes())
        issue["issue"]["body"] = f"the deploy token is {PLANTED} please rotate"
        body = json.dumps(issue).encode()
        r = httpx2.post(f"{serve.url}/hooks/{world.source_id}", content=body,
                        headers=github_headers(body, world.secret))
        assert r.status_code == 202

        async def fetch() -> str:
            async with connect("http", serve.url, world.token) as agent:
                todos = await wait_for_todo(agent)
                got = await agent.ok("todo_get", {"id": todos})
                ref = re.search(r"sec_[A-Za-z0-9_-]{32}", json.dumps(got["structuredContent"]["payload"])).group(0)
                fetched = await agent.ok("secret_fetch", {"ref": ref})
                return str(fetched["structuredContent"]["value"])

        async def wait_for_todo(agent) -> str:  # type: ignore[no-untyped-def]
            for _ in range(200):
                rows = (await agent.ok("todo_list"))["structuredContent"]["todos"]
                if rows:
                    return str(rows[0]["id"])
                await asyncio.sleep(0.05)
            raise AssertionError("no todo")

        value = asyncio.run(fetch())
        assert value == PLANTED
        # The same over the REST tool route (the adapter's path).
        httpx2.post(f"{serve.url}/api/v1/agent/tools/whoami", json={},
                    headers={"Authorization": f"Bearer {world.token}"})
        wait_for(lambda: "DEBUG" in serve.log())
    finally:
        stop(serve.proc)
    log = serve.log()
    assert "DEBUG" in log and "INFO" in log  # the log really was at DEBUG
    assert PLANTED not in log
    assert world.token not in log and world.token[4:] not in log
    assert world.secret not in log


def test_the_filter_drops_third_party_debug_and_masks_credentials() -> None:
    redactor = Redactor()

    def record(name: str, level: int, msg: str, *args: object) -> logging.LogRecord:
        return logging.LogRecord(name, level, __file__, 1, msg, args, None)

    assert not redactor.filter(record("sse_starlette.sse", logging.DEBUG, "chunk: %s", b"data: {value}"))
    assert not redactor.filter(record("mcp.server.lowlevel", logging.INFO, "message %s", "{...}"))
    kept = record("uvicorn.error", logging.WARNING, "bad request with Authorization: Bearer %s", "sbk_" + "a" * 43)
    assert redactor.filter(kept) and kept.getMessage() == "bad request with Authorization: Bearer ***"
    ours = record("switchboard.web", logging.DEBUG, "token %s", "sbk_0123456789abcdefghijklmn")
    assert redactor.filter(ours) and ours.getMessage() == "token sbk_***"
    assert mask("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw") == "whsec_***"
    assert mask("token sbh_abcdefghijkl and Bearer xyz.abc") == "token sbh_*** and Bearer ***"
