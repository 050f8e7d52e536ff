"""The agent surface through real MCP clients, over Streamable HTTP and over stdio through
``switchboard channel``, reading raw results: each tool's happy path and error codes, and every
rule of the notifications trailer (DESIGN.md §6.3, §6.4)."""

from __future__ import annotations

import time
from typing import Any

import anyio
import pytest
from sqlalchemy import select

from switchboard import admin
from switchboard.errors import NotFound
from switchboard.inbox import items as inbox
from switchboard.models import AgentCursor, InboxItem
from switchboard.queue import todos
from tests.conftest import LiveApp
from tests.mcp_server.agent_clients import TRANSPORTS, connect

pytestmark = [pytest.mark.anyio, pytest.mark.parametrize("transport", TRANSPORTS)]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def resolve(live: LiveApp, item_id: str, **kwargs: Any) -> dict[str, Any]:
    """A human answers or decides (as the REST path does): ledger, then the broker's doorbell."""
    with live.hub.db.write() as s:
        human_id = s.get(InboxItem, item_id).human_id
        data, agent_id = inbox.resolve(s, live.hub.clock, item_id, via="rest", human_id=human_id, **kwargs)
    live.hub.broker.publish_inbox(agent_id)
    return data


def make_todo(live: LiveApp, project: str = "acme", title: str = "Check the build") -> str:
    with live.hub.db.write() as s:
        pid = admin.project_by_name(s, project).id
        todo, _ = todos.create(s, live.hub.clock, project_id=pid, queue="reviews", kind="manual", title=title,
                               payload=None)
        return todo.id


def add_agent(live: LiveApp, name: str, human: str, grants: dict[str, str]) -> str:
    with live.hub.db.write() as s:
        try:
            admin.human_by_name(s, human)
        except NotFound:
            admin.add_human(s, human)
        admin.add_agent(s, name, human)
        for project, role in grants.items():
            admin.grant(s, name, project, role)
        return admin.vend_token(s, name)


def add_project(live: LiveApp, name: str) -> str:
    with live.hub.db.write() as s:
        return admin.add_project(s, name).id


def cursors_of(live: LiveApp, agent_id: str) -> list[tuple[str, str, int]]:
    with live.hub.db.read() as s:
        rows = s.execute(select(AgentCursor).where(AgentCursor.agent_id == agent_id)).scalars()
        return sorted((c.stream, c.project_id, c.position) for c in rows)


def pending(result: dict[str, Any]) -> list[dict[str, Any]]:
    member = result.get("notifications")
    if member is None:
        return []
    items = member["pending"]
    assert items, "the member is absent when nothing is pending"
    # DESIGN.md §6.4: the same items in structuredContent (what Claude Code shows the model, issues
    # 79944/55677/54450) exactly once, and as the first line of the first text block.
    assert result["structuredContent"]["notifications"] == member
    assert result["content"][0]["text"].startswith(f"[switchboard] {len(items)} pending: ")
    assert sum(c["text"].count("[switchboard]") for c in result["content"]) == 1
    for item in items:
        assert set(item) == {"source", "kind", "id", "project_id", "title", "at"}
    return items


async def test_inbox_tools_and_attention_trailer(live: LiveApp, transport: str) -> None:
    async with connect(transport, live.url, live.world.token) as agent:
        me = await agent.ok("whoami")
        assert "notifications" not in me and len(me["content"]) == 1
        q = (await agent.ok("question_post", {"project": "acme", "title": "Ship  it\non Friday?",
                                              "body": "CI is green.", "options": ["yes", "no"],
                                              "expires_in_seconds": 3600, "on_expiry": "no"}))["structuredContent"]
        assert q["kind"] == "question" and q["status"] == "open" and q["title"] == "Ship it on Friday?"
        assert q["options"] == ["yes", "no"] and q["on_expiry"] == "no" and q["expires_at"]
        a = (await agent.ok("approval_request", {"project": "acme", "title": "Force-push main"}))["structuredContent"]
        assert a["kind"] == "approval" and a["on_expiry"] == "deny" and a["expires_at"] is None

        assert "notifications" not in await agent.ok("whoami")  # posting is not attention
        resolve(live, q["id"], answer="yes")
        # An error result never carries the member, and does not consume it.
        missing = await agent.error("todo_get", {"id": "td_nope"})
        assert missing == {"code": "not_found", "message": "no such todo", "retryable": False}
        items = pending(await agent.ok("whoami"))
        assert [(i["source"], i["kind"], i["id"], i["project_id"]) for i in items] == [
            ("attention", "question.answered", q["id"], live.world.project_id)]
        assert items[0]["title"] == "Question answered: Ship it on Friday?"
        assert pending(await agent.ok("whoami")) == []  # at most once

        resolve(live, a["id"], decision="deny", note="not on a Friday")
        listed = await agent.ok("todo_list", {})
        assert [i["kind"] for i in pending(listed)] == ["approval.decided"]

        read = (await agent.ok("inbox_read", {}))["structuredContent"]
        by_id = {i["id"]: i for i in read["items"]}
        assert by_id[q["id"]]["status"] == "answered" and by_id[q["id"]]["answer"] == "yes"
        assert by_id[q["id"]]["resolved_via"] == "rest" and by_id[q["id"]]["resolved_by"]["human_id"]
        assert by_id[a["id"]]["decision"] == "deny" and by_id[a["id"]]["note"] == "not on a Friday"
        assert read["next_since"] == max(i["seq"] for i in read["items"]) and read["has_more"] is False
        page = (await agent.ok("inbox_read", {"status": "decided", "limit": 1}))["structuredContent"]
        assert [i["id"] for i in page["items"]] == [a["id"]]
        later = (await agent.ok("inbox_read", {"since": read["next_since"]}))["structuredContent"]
        assert later == {"items": [], "next_since": read["next_since"], "next_cursor": read["next_cursor"],
                         "has_more": False}

        # Errors: bad arguments, unknown and read-only projects.
        for args in ({"project": "acme"}, {"project": "acme", "title": "x", "on_expiry": "maybe"},
                     {"project": "acme", "title": "x", "expires_in_seconds": 0},
                     {"project": "acme", "title": "<channel>hi</channel>"},
                     {"project": "acme", "title": "x", "options": ["a", "a"]}):
            assert (await agent.error("question_post", args))["code"] == "invalid_argument", args
        assert (await agent.error("approval_request", {"project": "nope", "title": "x"}))["code"] == "not_found"
        assert (await agent.error("inbox_read", {"status": "lost"}))["code"] == "invalid_argument"
        assert (await agent.error("inbox_read", {"limit": 201}))["code"] == "invalid_argument"
        assert (await agent.error("inbox_wait", {"wait_seconds": 61}))["code"] == "invalid_argument"
        add_project(live, "ro")
        with live.hub.db.write() as s:
            admin.grant(s, "claude1", "ro", "read")
        forbidden = await agent.error("question_post", {"project": "ro", "title": "x"})
        assert forbidden["code"] == "forbidden"


@pytest.mark.usefixtures("recheck_after_a_minute")  # the wait itself is 30 s
async def test_inbox_wait_wakes_on_an_answer(live: LiveApp, transport: str) -> None:
    async with connect(transport, live.url, live.world.token) as agent:
        polled = (await agent.ok("inbox_wait", {"wait_seconds": 0}))["structuredContent"]
        assert polled == {"resolved": [], "next_since": 0, "timed_out": True}
        q = (await agent.ok("question_post", {"project": "acme", "title": "Which branch?"}))["structuredContent"]
        result: dict[str, Any] = {}
        done = anyio.Event()

        async def wait() -> None:
            result.update(await agent.ok("inbox_wait", {"wait_seconds": 30}))
            result["returned_at"] = time.monotonic()
            done.set()

        async with anyio.create_task_group() as tg:
            tg.start_soon(wait)
            with anyio.fail_after(10):
                while live.hub.inbox_waiters.count() == 0:
                    await anyio.sleep(0.01)
            answered_at = time.monotonic()
            resolve(live, q["id"], answer="main")
            with anyio.fail_after(40):
                await done.wait()
        body = result["structuredContent"]
        assert [i["id"] for i in body["resolved"]] == [q["id"]] and body["timed_out"] is False
        assert body["resolved"][0]["answer"] == "main"
        # Well inside the wait: woken by the broker, not by the ledger re-check.
        assert result["returned_at"] - answered_at < 10.0
        # The stored position moved: the same resolution is not returned twice.
        again = (await agent.ok("inbox_wait", {"wait_seconds": 0}))["structuredContent"]
        assert again["resolved"] == [] and again["next_since"] == body["next_since"]
        explicit = (await agent.ok("inbox_wait", {"wait_seconds": 0, "since": 0}))["structuredContent"]
        assert [i["id"] for i in explicit["resolved"]] == [q["id"]]


async def test_subscriptions_seed_deliver_once_and_unsubscribe(live: LiveApp, transport: str) -> None:
    old = make_todo(live, title="Old work")
    async with connect(transport, live.url, live.world.token) as agent:
        sub = (await agent.ok("notify_subscribe", {"kinds": ["todo.created"], "project": "acme"}))["structuredContent"]
        assert sub["subscription_id"].startswith("sub_") and sub["cursor"] > 0 and sub["kinds"] == ["todo.created"]
        before = cursors_of(live, live.world.agent_id)
        me = await agent.ok("whoami")
        assert "notifications" not in me, "seeded at the newest event: no history replay"
        assert cursors_of(live, live.world.agent_id) == before, "an empty read moves nothing"

        new = make_todo(live, title="New work")
        items = pending(await agent.ok("whoami"))
        assert [(i["source"], i["kind"], i["title"]) for i in items] == [("subscription", "todo.created", "New work")]
        assert isinstance(items[0]["id"], int) and items[0]["id"] > sub["cursor"] and old != new
        assert pending(await agent.ok("whoami")) == []

        errors = [
            ("notify_subscribe", {"kinds": []}, "invalid_argument"),
            ("notify_subscribe", {"kinds": ["todo.exploded"]}, "invalid_argument"),
            ("notify_subscribe", {"kinds": ["todo.created"], "project": "nope"}, "not_found"),
            ("notify_unsubscribe", {"subscription_id": "sub_unknown"}, "not_found"),
            ("notify_unsubscribe", {}, "invalid_argument"),
        ]
        for tool, args, code in errors:
            assert (await agent.error(tool, args))["code"] == code, (tool, args)

        gone = await agent.ok("notify_unsubscribe", {"subscription_id": sub["subscription_id"]})
        assert gone["structuredContent"] == {"subscription_id": sub["subscription_id"], "removed": True}
        make_todo(live, title="Unwatched")
        assert pending(await agent.ok("whoami")) == []
        again = await agent.error("notify_unsubscribe", {"subscription_id": sub["subscription_id"]})
        assert again["code"] == "not_found"


async def test_unscoped_subscription_holds_events_until_a_grant(live: LiveApp, transport: str) -> None:
    add_project(live, "beta")
    async with connect(transport, live.url, live.world.token) as agent:
        await agent.ok("notify_subscribe", {"kinds": ["todo.created"]})
        make_todo(live, project="beta", title="Beta work")
        assert pending(await agent.ok("whoami")) == [], "not readable at drain time: not shown"
        with live.hub.db.write() as s:
            admin.grant(s, "claude1", "beta", "read")
        items = pending(await agent.ok("whoami"))
        assert [i["title"] for i in items] == ["Beta work"], "held, not consumed: released by the grant"


async def test_rotated_token_keeps_position_and_agents_are_apart(live: LiveApp, transport: str) -> None:
    other = add_agent(live, "claude2", "bob", {"acme": "work"})
    async with connect(transport, live.url, live.world.token) as agent:
        q1 = (await agent.ok("question_post", {"project": "acme", "title": "First?"}))["structuredContent"]
        q2 = (await agent.ok("question_post", {"project": "acme", "title": "Second?"}))["structuredContent"]
        resolve(live, q1["id"], answer="ok")
        assert [i["id"] for i in pending(await agent.ok("whoami"))] == [q1["id"]]
    with live.hub.db.write() as s:
        rotated = admin.vend_token(s, "claude1")
    async with connect(transport, live.url, other) as bob_agent:
        resolve(live, q2["id"], answer="ok")
        assert pending(await bob_agent.ok("whoami")) == [], "another agent's attention items are not shown"
        wrong = await bob_agent.error("notify_unsubscribe", {"subscription_id": "sub_x"})
        assert wrong["code"] == "not_found"
    async with connect(transport, live.url, rotated) as agent:
        assert [i["id"] for i in pending(await agent.ok("whoami"))] == [q2["id"]], "the position survives rotation"
        assert pending(await agent.ok("whoami")) == []


async def test_feed_read_cursors_and_limits(live: LiveApp, transport: str) -> None:
    for n in range(3):
        make_todo(live, title=f"Work {n}")
    async with connect(transport, live.url, live.world.token) as agent:
        first = (await agent.ok("feed_read", {"limit": 2}))["structuredContent"]
        assert [e["title"] for e in first["events"]] == ["Work 0", "Work 1"] and first["has_more"] is True
        assert first["next_since"] == first["events"][-1]["id"]
        second = (await agent.ok("feed_read", {}))["structuredContent"]
        assert [e["title"] for e in second["events"]] == ["Work 2"] and second["has_more"] is False
        empty = (await agent.ok("feed_read", {}))["structuredContent"]
        assert empty["events"] == [] and empty["next_since"] == second["next_since"]
        explicit = (await agent.ok("feed_read", {"since": first["next_since"], "kinds": ["todo.created"]}))
        assert [e["title"] for e in explicit["structuredContent"]["events"]] == ["Work 2"]
        filtered = (await agent.ok("feed_read", {"kinds": ["todo.created"], "project": "acme"}))["structuredContent"]
        assert len(filtered["events"]) == 3, "a filtered stored cursor is its own"
        event = filtered["events"][0]
        assert set(event) == {"id", "project_id", "kind", "subject_id", "title", "data", "at"}
        for args, code in (({"limit": 201}, "invalid_argument"), ({"limit": 0}, "invalid_argument"),
                           ({"kinds": ["nope"]}, "invalid_argument"), ({"since": -1}, "invalid_argument"),
                           ({"project": "nope"}, "not_found"), ({"colour": "red"}, "invalid_argument")):
            assert (await agent.error("feed_read", args))["code"] == code, args


async def test_expiry_is_decided_by_the_hub(live: LiveApp, transport: str) -> None:
    async with connect(transport, live.url, live.world.token) as agent:
        a = (await agent.ok("approval_request", {"project": "acme", "title": "Deploy",
                                                 "expires_in_seconds": 60, "on_expiry": "approve"}))
        q = (await agent.ok("question_post", {"project": "acme", "title": "Colour?", "expires_in_seconds": 60}))
        with live.hub.db.write() as s:
            for item_id in (a["structuredContent"]["id"], q["structuredContent"]["id"]):
                s.get(InboxItem, item_id).expires_at = live.hub.clock.now()
        assert live.hub.reap()["inbox_expired"] == 2
        items = {i["id"]: i for i in pending(await agent.ok("whoami"))}
        assert items[a["structuredContent"]["id"]]["title"] == "Approval approved: Deploy"
        assert items[q["structuredContent"]["id"]]["title"] == "Question expired: Colour?"
        read = {i["id"]: i for i in (await agent.ok("inbox_read", {"status": "resolved"}))["structuredContent"]["items"]}
        decided = read[a["structuredContent"]["id"]]
        assert decided["decision"] == "approve" and decided["resolved_by"] == "hub" and decided["resolved_via"] == "expiry"
        assert read[q["structuredContent"]["id"]]["status"] == "expired"


async def test_todo_tools_and_their_errors(live: LiveApp, transport: str) -> None:
    tid = make_todo(live)
    add_project(live, "ro")
    with live.hub.db.write() as s:
        admin.grant(s, "claude1", "ro", "read")
    ro_tid = make_todo(live, project="ro", title="Read only")
    async with connect(transport, live.url, live.world.token) as agent:
        listed = (await agent.ok("todo_list", {"project": "acme"}))["structuredContent"]
        assert [t["id"] for t in listed["todos"]] == [tid] and "payload" not in listed["todos"][0]
        got = (await agent.ok("todo_get", {"id": tid}))["structuredContent"]
        assert got["attempts"] == [] and got["state"] == "pending"
        claim = (await agent.ok("todo_claim", {"id": tid, "lease_seconds": 60}))["structuredContent"]
        lease = claim["lease_token"]
        beat = (await agent.ok("todo_heartbeat", {"id": tid, "lease_seconds": 120, "lease_token": lease}))
        assert beat["structuredContent"]["state"] == "claimed"
        stale = await agent.error("todo_complete", {"id": tid, "lease_token": "stale"})
        assert stale["code"] == "conflict"
        failed = (await agent.ok("todo_fail", {"id": tid, "summary": "flaky", "lease_token": lease}))
        assert failed["structuredContent"]["state"] == "failed" and failed["structuredContent"]["next_retry_at"]
        assert (await agent.error("todo_release", {"id": tid}))["code"] == "conflict"
        assert (await agent.ok("todo_claim", {"project": "acme"}))["structuredContent"] == {"empty": True}
        assert (await agent.error("todo_claim", {"id": ro_tid}))["code"] == "forbidden"
        assert (await agent.error("todo_claim", {"id": tid, "project": "acme"}))["code"] == "invalid_argument"
        assert (await agent.error("todo_heartbeat", {"id": "td_nope"}))["code"] == "not_found"
        assert (await agent.error("todo_list", {"limit": 201}))["code"] == "invalid_argument"
        assert (await agent.error("no_such_tool", {}))["code"] == "invalid_argument"
    other = add_agent(live, "claude3", "carol", {"ro": "read"})
    async with connect(transport, live.url, other) as stranger:
        # A todo in a project the caller cannot read is the same not_found as an unknown one.
        assert (await stranger.error("todo_get", {"id": tid})) == (await stranger.error("todo_get", {"id": "td_x"}))
