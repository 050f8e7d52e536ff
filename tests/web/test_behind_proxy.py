"""Issue 12 #9: ``/mcp`` behind a reverse proxy that rewrites ``Host``, and the MCP library's
own errors (400, 404, 406, 421) as problem details.

The server runs as ``switchboard serve`` runs it (uvicorn with its own proxy handling off),
with a real MCP client speaking through the headers a proxy sets.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass

import anyio
import httpx2
import pytest
import uvicorn
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from switchboard.config import Settings
from switchboard.hub import Hub
from tests.conftest import World, configure, free_port, wait_for

INIT = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}
ACCEPT = "application/json, text/event-stream"
PROXIED = {"Host": "switchboard:8080", "X-Forwarded-Host": "hub.example.com", "X-Forwarded-Proto": "https"}


@dataclass
class Served:
    url: str
    hub: Hub
    world: World

    def mcp(self, headers: dict[str, str], body: object = INIT) -> httpx2.Response:
        return httpx2.post(f"{self.url}/mcp", json=body, timeout=30, headers={
            "Authorization": f"Bearer {self.world.token}", "Accept": ACCEPT, **headers})


def _serve(settings: Settings) -> Iterator[Served]:
    from switchboard.web.asgi import create_app

    world = configure(settings)
    port = free_port()
    app = create_app(settings.with_overrides(port=port))
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on",
                                           proxy_headers=False))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    wait_for(lambda: server.started, timeout=20)
    try:
        yield Served(f"http://127.0.0.1:{port}", app.state.hub, world)
    finally:
        server.should_exit = True
        thread.join(timeout=10)


@pytest.fixture
def proxied(settings: Settings) -> Iterator[Served]:
    """A hub configured for hub.example.com behind a proxy on loopback."""
    yield from _serve(settings.with_overrides(public_hosts=("hub.example.com",), trusted_proxies=("127.0.0.1",)))


@pytest.fixture
def direct(settings: Settings) -> Iterator[Served]:
    """A hub with the defaults: no public host names, no trusted proxy."""
    yield from _serve(settings)


def _is_problem(resp: httpx2.Response, status: int, code: str) -> dict:
    assert resp.status_code == status, resp.text
    assert resp.headers["content-type"].startswith("application/problem+json"), resp.headers
    body = resp.json()
    assert body["status"] == status and body["code"] == code and body["detail"] and body["title"]
    return body


def test_a_rewritten_host_is_421_problem_json_without_settings(direct: Served) -> None:
    body = _is_problem(direct.mcp(PROXIED), 421, "misdirected_request")
    assert body["detail"].startswith("Invalid Host header") and "SWITCHBOARD_PUBLIC_HOSTS" in body["detail"]
    # REST on the same Host is unaffected (what made it look like a partial outage).
    assert httpx2.get(f"{direct.url}/api/v1/health", headers={"Host": "switchboard:8080"}).status_code == 200


def test_forwarded_host_from_a_trusted_proxy_reaches_mcp(proxied: Served) -> None:
    resp = proxied.mcp(PROXIED)
    assert resp.status_code == 200, resp.text
    assert resp.headers.get("mcp-session-id")
    # A forwarded port of "²" (latin-1 byte 0xB2: str.isdigit() takes it, int() does not) is
    # not a host: ignored, not a 500 (a review).
    for port in (b"\xb2", b"1" * 5000):  # and one int() refuses for its length
        odd = httpx2.get(f"{proxied.url}/api/v1/health", headers={"X-Forwarded-Host": b"hub.example.com:" + port})
        assert odd.status_code == 200, odd.text


def test_forwarded_host_is_ignored_from_an_untrusted_peer(settings: Settings) -> None:
    untrusted = settings.with_overrides(public_hosts=("hub.example.com",), trusted_proxies=("10.9.8.0/24",))
    for served in _serve(untrusted):
        _is_problem(served.mcp(PROXIED), 421, "misdirected_request")
        # The public host itself, sent directly (no proxy), is allowed.
        assert served.mcp({"Host": "hub.example.com"}).status_code == 200


def test_a_forwarded_host_that_is_not_public_is_still_refused(proxied: Served) -> None:
    _is_problem(proxied.mcp({**PROXIED, "X-Forwarded-Host": "evil.example.net"}), 421, "misdirected_request")
    # A proxy that appends: the rightmost value (the trusted proxy's own) counts, not the client's.
    spoofed = {**PROXIED, "X-Forwarded-Host": "hub.example.com, evil.example.net"}
    _is_problem(proxied.mcp(spoofed), 421, "misdirected_request")
    ok = {**PROXIED, "X-Forwarded-Host": "evil.example.net, hub.example.com"}
    assert proxied.mcp(ok).status_code == 200


def test_https_origin_of_the_public_host_is_allowed_behind_the_proxy(proxied: Served) -> None:
    assert proxied.mcp({**PROXIED, "Origin": "https://hub.example.com"}).status_code == 200
    _is_problem(proxied.mcp({**PROXIED, "Origin": "https://evil.example.net"}), 403, "forbidden")


@pytest.mark.anyio
async def test_a_real_mcp_client_works_through_the_proxy_headers(proxied: Served) -> None:
    headers = {"Authorization": f"Bearer {proxied.world.token}", **PROXIED}
    async with httpx2.AsyncClient(headers=headers) as http, \
            Client(streamable_http_client(f"{proxied.url}/mcp", http_client=http), mode="legacy") as client:
        with anyio.fail_after(20):
            me = await client.call_tool("whoami", {})
    assert me.structured_content["agent"]["name"] == "claude1"


def test_mcp_library_errors_are_problem_details(direct: Served) -> None:
    # 406: Accept without text/event-stream.
    _is_problem(direct.mcp({"Accept": "text/html"}), 406, "not_acceptable")
    # 400: a request that is not initialize, without a session id; the JSON-RPC error is kept.
    tools = {"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {}}
    body = _is_problem(direct.mcp({}, tools), 400, "invalid_argument")
    assert body["jsonrpc"] == "2.0" and isinstance(body["error"], dict) and body["error"]["message"]
    # 400: the wrong content type.
    resp = httpx2.post(f"{direct.url}/mcp", content=b"x", timeout=30, headers={
        "Authorization": f"Bearer {direct.world.token}", "Accept": ACCEPT, "Content-Type": "text/plain"})
    _is_problem(resp, 400, "invalid_argument")
    # 404: an unknown session.
    _is_problem(direct.mcp({"mcp-session-id": "0" * 32}, tools), 404, "not_found")


def test_a_session_still_works_after_a_wrapped_error(direct: Served) -> None:
    first = direct.mcp({})
    assert first.status_code == 200 and first.headers["content-type"].split(";")[0] in (
        "application/json", "text/event-stream")
    session = first.headers["mcp-session-id"]
    note = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    assert direct.mcp({"mcp-session-id": session}, note).status_code == 202


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"
