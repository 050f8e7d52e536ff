"""/mcp sessions: bound to the opening token, capped per agent, closed on revocation (issue 13 items 3, 4)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import httpx2
import pytest

from switchboard import admin, revocation
from switchboard.hub import Hub
from tests.conftest import LiveApp, configure, serve_in_thread

INIT = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}
ACCEPT = "application/json, text/event-stream"


@pytest.fixture
def capped(settings) -> Iterator[LiveApp]:  # type: ignore[no-untyped-def]
    settings = settings.with_overrides(mcp_sessions_per_agent=3)
    world = configure(settings)
    for url, hub in serve_in_thread(settings):
        yield LiveApp(url, hub, world)


def _open(url: str, token: str) -> httpx2.Response:
    return httpx2.post(f"{url}/mcp", json=INIT, headers={"Authorization": f"Bearer {token}", "Accept": ACCEPT},
                       timeout=20)


def _second_token(app: LiveApp, agent: str = "claude1") -> str:
    hub = Hub(app.world.settings, role="cli")
    try:
        with hub.db.write() as s:
            return admin.vend_token(s, agent)
    finally:
        hub.close()


def test_an_agent_gets_429_with_retry_after_past_its_session_cap(capped: LiveApp) -> None:
    ids = []
    for _ in range(3):
        r = _open(capped.url, capped.world.token)
        assert r.status_code == 200, r.text
        ids.append(r.headers["mcp-session-id"])
    r = _open(capped.url, capped.world.token)
    assert r.status_code == 429 and r.json()["code"] == "rate_limited" and r.headers["Retry-After"] == "1"
    # Another agent is not affected by this agent's sessions.
    hub = Hub(capped.world.settings, role="cli")
    with hub.db.write() as s:
        admin.add_agent(s, "other", "alice")
        other = admin.vend_token(s, "other")
    hub.close()
    assert _open(capped.url, other).status_code == 200
    # Closing one frees a place.
    r = httpx2.delete(f"{capped.url}/mcp", headers={"Authorization": f"Bearer {capped.world.token}",
                                                   "mcp-session-id": ids[0], "mcp-protocol-version": "2025-06-18"})
    assert r.status_code in (200, 204)
    assert _open(capped.url, capped.world.token).status_code == 200


def test_a_session_id_answers_only_the_token_that_opened_it(live: LiveApp) -> None:
    sid = _open(live.url, live.world.token).headers["mcp-session-id"]
    ping = {"jsonrpc": "2.0", "id": 2, "method": "ping"}
    headers = {"Accept": ACCEPT, "mcp-session-id": sid, "mcp-protocol-version": "2025-06-18"}
    mine = httpx2.post(f"{live.url}/mcp", json=ping, headers={**headers, "Authorization": f"Bearer {live.world.token}"})
    assert mine.status_code == 200
    other = _second_token(live)  # the same agent, another token: still not this session's
    theirs = httpx2.post(f"{live.url}/mcp", json=ping, headers={**headers, "Authorization": f"Bearer {other}"})
    assert theirs.status_code == 404


def test_revoking_the_token_closes_its_open_mcp_stream_within_a_second(live: LiveApp) -> None:
    sid = _open(live.url, live.world.token).headers["mcp-session-id"]
    headers = {"Authorization": f"Bearer {live.world.token}", "Accept": "text/event-stream", "mcp-session-id": sid,
               "mcp-protocol-version": "2025-06-18"}
    ended = threading.Event()
    opened = threading.Event()

    def listen() -> None:
        try:
            with httpx2.stream("GET", f"{live.url}/mcp", headers=headers, timeout=30) as r:
                assert r.status_code == 200
                opened.set()
                for _ in r.iter_raw():
                    pass
        except httpx2.HTTPError:
            pass
        ended.set()

    threading.Thread(target=listen, daemon=True).start()
    assert opened.wait(10)
    with live.hub.db.write() as s:
        revocation.revoke_agent_tokens(s, live.hub.clock, "claude1")
    started = time.monotonic()
    assert ended.wait(20), "the /mcp stream stayed open after its token was revoked"
    # Within a second on a quiet machine (a poll every 0.5 s); seconds, for a loaded CI one.
    assert time.monotonic() - started < 5.0
    r = httpx2.post(f"{live.url}/mcp", json={"jsonrpc": "2.0", "id": 3, "method": "ping"},
                    headers={**headers, "Accept": ACCEPT})
    assert r.status_code == 401


def test_idle_sessions_expire_sooner_than_the_sdk_default() -> None:
    from switchboard.config import Settings
    from switchboard.mcp_server.sessions import AgentSessions

    assert Settings().mcp_session_idle_seconds < 1800
    assert Settings.from_env({"SWITCHBOARD_MCP_SESSION_IDLE_SECONDS": "60"}).mcp_session_idle_seconds == 60
    # The SDK internals the cap and the revocation rely on are still there (mcp 2.3).
    manager = AgentSessions(app=None, per_agent=2, session_idle_timeout=60)  # type: ignore[arg-type]
    assert manager.session_idle_timeout == 60
    assert manager._session_owners == {} and manager._server_instances == {}
    assert callable(manager._discard_session) and callable(manager._admit_session)
    assert manager.count_for("a") == 0 and manager.token_ids() == set()
