"""The relay and friend ledger on PostgreSQL: a prompt, its decision and verdict event, a chat
verdict, a bound approval used once, todo_create and revocation (DESIGN.md §6.5, §6.6)."""

from __future__ import annotations

import json
from pathlib import Path

from sqlalchemy import select

from switchboard import admin
from switchboard.config import Settings
from switchboard.hub import Hub
from switchboard.inbox import chat_verdicts, items, permissions
from switchboard.mcp_server.calls import call_tool
from switchboard.mcp_server.specs import Caller
from switchboard.models import AgentEvent, InboxItem
from tests.conftest import configure
from tests.services import fresh_postgres_database


def test_the_relay_and_a_friendship_work_on_postgresql(postgres_url: str, tmp_path: Path) -> None:
    settings = Settings(home=tmp_path / "instance", database_url=fresh_postgres_database(postgres_url))
    world = configure(settings)
    hub = Hub(settings, role="cli")
    try:
        with hub.db.write() as s:
            bob = admin.add_human(s, "bob")
            admin.add_project(s, "beta")
            bobbot = admin.add_agent(s, "bobbot", "bob")
            admin.grant(s, "bobbot", "beta", "work")
            alice_id = admin.human_by_name(s, "alice").id
        alice = Caller(world.agent_id, "claude1", alice_id)
        bobc = Caller(bobbot.id, "bobbot", bob.id, session_id="ses_bob")
        fr = call_tool(hub, alice, "friend_request", {"to_agent": "bobbot", "queues": ["beta/inbox"],
                                                      "reason": "pair"})["structuredContent"]["request_id"]
        assert call_tool(hub, bobc, "friend_respond", {"request_id": fr, "decision": "approve"}
                         )["structuredContent"]["code"] == "human_approval_required"
        with hub.db.write() as s:
            item, _ = permissions.relay(s, hub.clock, agent_id=bobbot.id, session_id="ses_bob", request_id="pqrst",
                                        tool_name="mcp__switchboard__friend_respond", description="approve",
                                        input_preview=json.dumps({"request_id": fr}), expires_in_seconds=600)
            assert chat_verdicts.apply(s, hub.clock, bob.id, "approve", "pqrst")["outcome"] == "decided"
        with hub.db.read() as s:
            events = s.execute(select(AgentEvent).where(AgentEvent.kind == "verdict")).scalars().all()
            assert [(e.session_id, e.data) for e in events] == [("ses_bob", {"request_id": "pqrst",
                                                                               "behavior": "allow"})]
            assert items.view(s.get(InboxItem, item["id"]))["resolved_via"] == "chat"
        ok = call_tool(hub, bobc, "friend_respond", {"request_id": fr, "decision": "approve"})
        assert not ok["isError"], ok
        fs = ok["structuredContent"]["friendship"]["friendship_id"]
        made = call_tool(hub, alice, "todo_create", {"project": "beta", "queue": "inbox", "title": "go"})
        assert not made["isError"] and made["structuredContent"]["assigned_agent_id"] == bobbot.id
        assert call_tool(hub, bobc, "friend_revoke", {"friendship_id": fs})["structuredContent"]["active"] is False
        assert call_tool(hub, alice, "todo_create", {"project": "beta", "queue": "inbox", "title": "no"}
                         )["structuredContent"]["code"] == "not_found"
    finally:
        hub.close()
