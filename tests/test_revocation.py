"""Revocation: tokens, grants and agents, from the CLI and REST, ending access at once (issue 13 item 3)."""

from __future__ import annotations

import subprocess

import httpx2
import pytest

from switchboard import admin
from switchboard.hub import Hub
from tests.conftest import LiveApp, World, cli_env, switchboard_exe


def _run(world: World, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([switchboard_exe(), *args], check=False, env=cli_env(world.settings.home), capture_output=True,
                          text=True, timeout=60)


def _tool(app: LiveApp, token: str, name: str, args: dict | None = None) -> httpx2.Response:
    return httpx2.post(f"{app.url}/api/v1/agent/tools/{name}", json=args or {},
                       headers={"Authorization": f"Bearer {token}"})


@pytest.fixture
def two(live: LiveApp) -> dict[str, str]:
    """bob with his own project and agent; human tokens for alice and bob."""
    hub = Hub(live.world.settings, role="cli")
    try:
        with hub.db.write() as s:
            admin.add_owner(s, "acme", "alice")
            admin.add_human(s, "bob")
            admin.add_project(s, "bobs")
            admin.add_owner(s, "bobs", "bob")
            admin.add_agent(s, "bobagent", "bob")
            admin.grant(s, "bobagent", "bobs", "work")
            return {"alice": admin.vend_human_token(s, "alice"), "bob": admin.vend_human_token(s, "bob"),
                    "bobagent": admin.vend_token(s, "bobagent")}
    finally:
        hub.close()


def test_cli_token_revoke_refuses_the_token_at_once(live: LiveApp) -> None:
    assert _tool(live, live.world.token, "whoami").status_code == 200
    proc = _run(live.world, "token", "revoke", "claude1")
    assert proc.returncode == 0, proc.stderr
    r = _tool(live, live.world.token, "whoami")
    assert r.status_code == 401 and r.json()["code"] == "unauthenticated"


def test_cli_token_revoke_one_token_id_keeps_the_others(live: LiveApp) -> None:
    with live.hub.db.write() as s:
        second = admin.vend_token(s, "claude1")
    import json

    tokens = json.loads(_run(live.world, "token", "list", "claude1", "--json").stdout)["tokens"]
    assert len(tokens) == 2 and all(t["revoked_at"] is None for t in tokens)
    proc = _run(live.world, "token", "revoke", "claude1", "--token-id", tokens[0]["id"], "--json")
    assert json.loads(proc.stdout) == {"revoked": [tokens[0]["id"]]}
    assert _tool(live, live.world.token, "whoami").status_code == 401
    assert _tool(live, second, "whoami").status_code == 200
    bad = _run(live.world, "token", "revoke", "claude1", "--token-id", "tok_nope", "--json")
    assert bad.returncode == 2 and "not_found" in bad.stdout


def test_cli_human_token_revoke(live: LiveApp, two: dict[str, str]) -> None:
    headers = {"Authorization": f"Bearer {two['alice']}"}
    assert httpx2.get(f"{live.url}/api/v1/human/todos", headers=headers).status_code == 200
    assert _run(live.world, "token", "revoke", "--human", "alice").returncode == 0
    assert httpx2.get(f"{live.url}/api/v1/human/todos", headers=headers).status_code == 401


def test_cli_grant_revoke_ends_use_of_the_project(live: LiveApp) -> None:
    assert _tool(live, live.world.token, "todo_list", {"project": "acme"}).json()["isError"] is False
    proc = _run(live.world, "grant", "revoke", "claude1", "acme")
    assert proc.returncode == 0, proc.stderr
    body = _tool(live, live.world.token, "todo_list", {"project": "acme"}).json()
    assert body["isError"] and body["structuredContent"]["code"] == "not_found"
    # `grant` still grants as before
    assert _run(live.world, "grant", "claude1", "acme", "--role", "read").returncode == 0
    assert _tool(live, live.world.token, "todo_list", {"project": "acme"}).json()["isError"] is False


def test_cli_agent_remove_revokes_and_refuses_new_tokens(live: LiveApp) -> None:
    proc = _run(live.world, "agent", "remove", "claude1")
    assert proc.returncode == 0, proc.stderr
    assert _tool(live, live.world.token, "whoami").status_code == 401
    again = _run(live.world, "token", "vend", "claude1")
    assert again.returncode == 2 and "not_found" in again.stderr


def test_rest_revocation_of_own_agent_and_not_found_for_another_humans(live: LiveApp, two: dict[str, str]) -> None:
    alice = {"Authorization": f"Bearer {two['alice']}"}
    # bob's agent looks exactly like an unknown one to alice
    for name in ("bobagent", "nosuchagent"):
        for method, path in (("POST", f"/api/v1/human/agents/{name}/tokens/revoke"),
                             ("GET", f"/api/v1/human/agents/{name}/tokens"),
                             ("DELETE", f"/api/v1/human/agents/{name}")):
            r = httpx2.request(method, live.url + path, headers=alice)
            assert r.status_code == 404 and r.json()["code"] == "not_found", (name, path)
        r = httpx2.delete(f"{live.url}/api/v1/human/agents/{name}/grants/bobs", headers=alice)
        assert r.status_code == 404 and r.json()["detail"] == "no such grant"
    assert _tool(live, two["bobagent"], "whoami").status_code == 200
    tokens = httpx2.get(f"{live.url}/api/v1/human/agents/claude1/tokens", headers=alice).json()["tokens"]
    assert len(tokens) == 1
    r = httpx2.post(f"{live.url}/api/v1/human/agents/claude1/tokens/revoke", json={"token_id": tokens[0]["id"]},
                    headers=alice)
    assert r.json() == {"revoked": [tokens[0]["id"]]}
    assert _tool(live, live.world.token, "whoami").status_code == 401


def test_rest_grant_revoke_by_the_project_owner_and_agent_remove(live: LiveApp, two: dict[str, str]) -> None:
    # alice grants her agent on bob's project; bob (owner of the project) can end it
    with live.hub.db.write() as s:
        admin.grant(s, "claude1", "bobs", "read")
    bob = {"Authorization": f"Bearer {two['bob']}"}
    r = httpx2.delete(f"{live.url}/api/v1/human/agents/claude1/grants/bobs", headers=bob)
    assert r.status_code == 200 and r.json()["revoked"] is True
    # but bob cannot touch alice's grant on alice's project
    r = httpx2.delete(f"{live.url}/api/v1/human/agents/claude1/grants/acme", headers=bob)
    assert r.status_code == 404
    alice = {"Authorization": f"Bearer {two['alice']}"}
    r = httpx2.delete(f"{live.url}/api/v1/human/agents/claude1", headers=alice)
    assert r.status_code == 200 and r.json()["tokens_revoked"] == 1
    assert _tool(live, live.world.token, "whoami").status_code == 401


def test_rest_revoking_the_callers_own_human_token(live: LiveApp, two: dict[str, str]) -> None:
    bob = {"Authorization": f"Bearer {two['bob']}"}
    r = httpx2.post(f"{live.url}/api/v1/human/tokens/revoke", headers=bob)
    assert r.status_code == 200 and len(r.json()["revoked"]) == 1
    assert httpx2.get(f"{live.url}/api/v1/human/todos", headers=bob).status_code == 401
