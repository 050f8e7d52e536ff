"""Friend requests end to end through the permission relay (DESIGN.md §6.6; issue 9 items 6-8):
a Claude-Code-like client (raw JSON-RPC) drives bob's agent through a real ``switchboard
channel``; alice's agent calls the hub's REST tool route."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import httpx2
import pytest
from sqlalchemy import select

from switchboard import admin
from switchboard.config import Settings
from switchboard.models import InboxItem, Todo
from tests.conftest import cli_env, switchboard_exe, wait_for
from tests.mcp_server.claude_like import PERMISSION, ClaudeLike
from tests.web.multi import MultiApp

CHANNEL = "notifications/claude/channel"


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return Settings(home=tmp_path / "instance", sweep_interval_seconds=0.5, sweep_grace_seconds=1.0,
                    reap_interval_seconds=0.2)


def _tool(multi: MultiApp, token: str, name: str, args: dict[str, Any]) -> dict[str, Any]:
    resp = httpx2.post(f"{multi.url}/api/v1/agent/tools/{name}", json=args,
                       headers={"Authorization": f"Bearer {token}"}, timeout=30)
    assert resp.status_code == 200, resp.text
    return resp.json()  # type: ignore[no-any-return]


def test_friend_work_flows_only_after_the_target_human_allows_the_relayed_prompt(
        multi: MultiApp, settings: Settings, tmp_path: Path) -> None:
    with multi.hub.db.write() as s:
        admin.add_human(s, "bob")
        admin.add_project(s, "beta")
        admin.add_agent(s, "bobbot", "bob")
        admin.grant(s, "bobbot", "beta", "work")
        alice_agent = admin.vend_token(s, "claude1")
        bob_agent = admin.vend_token(s, "bobbot")
        bob = admin.vend_human_token(s, "bob")
    claude = ClaudeLike(multi.url, bob_agent, tmp_path / "adapters")
    try:
        claude.initialize()
        claude.attached()

        # A request grants nothing and waits on bob.
        asked = _tool(multi, alice_agent, "friend_request",
                      {"to_agent": "bobbot", "queues": ["beta/inbox"], "reason": "Pair on API reviews"})
        assert not asked.get("isError"), asked
        fr = asked["structuredContent"]["request_id"]
        assert fr.startswith("fr_") and asked["structuredContent"]["status"] == "pending"
        early = _tool(multi, alice_agent, "todo_create", {"project": "beta", "queue": "inbox", "title": "too early"})
        assert early["isError"] and early["structuredContent"]["code"] == "not_found"

        # Approving without a human decision is refused, and says how to get one.
        refused = claude.call("friend_respond", {"request_id": fr, "decision": "approve"})
        assert refused["isError"] and refused["structuredContent"]["code"] == "human_approval_required"
        assert "inbox decide" in refused["structuredContent"]["message"]

        # Claude Code relays the tool call's permission prompt; bob allows it over REST.
        preview = json.dumps({"request_id": fr, "decision": "approve"})
        claude.prompt("pqrst", "mcp__switchboard__friend_respond", "Approve a friend request from claude1", preview)

        def prompt_item() -> Any:
            with multi.hub.db.read() as s:
                return s.execute(select(InboxItem.id).where(InboxItem.request_id == "pqrst")).scalar()

        item_id = wait_for(prompt_item)
        decided = httpx2.post(f"{multi.url}/api/v1/human/inbox/{item_id}/decide", json={"decision": "approve"},
                              headers={"Authorization": f"Bearer {bob}"}, timeout=30)
        assert decided.status_code == 200, decided.text
        assert claude.wait_for(PERMISSION, request_id="pqrst") == {"request_id": "pqrst", "behavior": "allow"}

        approved = claude.call("friend_respond", {"request_id": fr, "decision": "approve"})
        assert not approved.get("isError"), approved
        friendship = approved["structuredContent"]["friendship"]
        assert friendship["queues"] == ["beta/inbox"] and friendship["approved_via"] == "relay"

        # The approval is used: answering again is a conflict, and the prompt is marked used.
        again = claude.call("friend_respond", {"request_id": fr, "decision": "approve"})
        assert again["isError"] and again["structuredContent"]["code"] == "conflict"
        with multi.hub.db.read() as s:
            assert s.get(InboxItem, item_id).used_at is not None

        # Work flows to bob's agent, shows who asked, and wakes it.
        made = _tool(multi, alice_agent, "todo_create",
                     {"project": "beta", "queue": "inbox", "title": "Review PR 7", "body": "See the diff"})
        assert not made.get("isError"), made
        todo = made["structuredContent"]
        assert todo["title"] == "claude1 (alice) asks: Review PR 7"
        assert todo["requested_by"]["agent"] == "claude1" and todo["payload"]["body"] == "See the diff"
        wake = claude.wait_for(CHANNEL, timeout=20)
        assert wake["meta"]["todo_id"] == todo["id"] and "claude1 (alice) asks" in wake["content"]
        claimed = claude.call("todo_claim", {"todo_id": todo["id"]})
        assert not claimed.get("isError"), claimed

        # Other queues of the same project are refused.
        other = _tool(multi, alice_agent, "todo_create", {"project": "beta", "queue": "other", "title": "nope"})
        assert other["isError"] and other["structuredContent"]["code"] == "forbidden"

        # Bob revokes from the CLI: new todos stop at once.
        revoked = subprocess.run(check=False, args=[switchboard_exe(), "friend", "revoke", friendship["friendship_id"], "--as", "bob",
                                  "--json"], env=cli_env(settings.home), capture_output=True, text=True, timeout=60)
        assert revoked.returncode == 0, revoked.stderr
        after = _tool(multi, alice_agent, "todo_create", {"project": "beta", "queue": "inbox", "title": "after"})
        assert after["isError"] and after["structuredContent"]["code"] == "not_found"
        with multi.hub.db.read() as s:
            titles = [t for t in s.execute(select(Todo.title)).scalars() if "asks:" in t]
        assert titles == ["claude1 (alice) asks: Review PR 7"]
    finally:
        claude.close()
