"""Todos: create, list, claim (by id and next), idempotent re-claim, complete, on SQLite and PostgreSQL."""

from __future__ import annotations

import pytest

from switchboard import admin
from switchboard.errors import Conflict, Forbidden, InvalidArgument, NotFound
from switchboard.hub import Hub
from switchboard.mcp_server.calls import call_tool
from switchboard.mcp_server.specs import Caller
from switchboard.queue import leases, todos

def _ids(hub: Hub) -> tuple[str, str]:
    with hub.db.read() as s:
        agent = admin.agent_by_name(s, "claude1")
        project = admin.project_by_name(s, "acme")
        return agent.id, project.id


def _make(hub: Hub, n: int, queue: str = "reviews") -> list[str]:
    _, project_id = _ids(hub)
    out = []
    with hub.db.write() as s:
        for i in range(n):
            todo, created = todos.create(s, hub.clock, project_id=project_id, queue=queue, kind="test",
                                         title=f"todo {i}", payload={"i": i}, origin_key=f"test:{queue}:{i}")
            assert created
            out.append(todo.id)
    return out


def _grants(hub: Hub, agent_id: str) -> dict[str, str]:
    with hub.db.read() as s:
        return admin.grants_of(s, agent_id)


def test_origin_key_makes_a_todo_once(hub: Hub) -> None:
    _, project_id = _ids(hub)
    with hub.db.write() as s:
        a, first = todos.create(s, hub.clock, project_id=project_id, queue="q", kind="k", title="t", payload=None,
                                origin_key="delivery:x")
        b, second = todos.create(s, hub.clock, project_id=project_id, queue="q", kind="k", title="t", payload=None,
                                 origin_key="delivery:x")
    assert first and not second and a.id == b.id


def test_claim_next_then_complete(hub: Hub) -> None:
    agent_id, _ = _ids(hub)
    ids = _make(hub, 3)
    grants = _grants(hub, agent_id)
    with hub.db.write() as s:
        claim = leases.claim(s, hub.clock, agent_id, grants, project="acme", queue="reviews")
    assert claim["todo"]["id"] == ids[0] and claim["attempt"] == 1
    assert claim["lease_expires_at"].startswith("2026-11-30T12:05:00.")
    with hub.db.write() as s:
        again = leases.claim(s, hub.clock, agent_id, grants, todo_id=ids[0])
    assert again["lease_token"] == claim["lease_token"]
    with hub.db.write() as s:
        with pytest.raises(Conflict):
            leases.complete(s, hub.clock, agent_id, grants, todo_id=ids[0], lease_token="stale")
    with hub.db.write() as s:
        done = leases.complete(s, hub.clock, agent_id, grants, todo_id=ids[0], lease_token=claim["lease_token"])
    assert done["state"] == "done"
    with hub.db.write() as s:
        with pytest.raises(Conflict):
            leases.complete(s, hub.clock, agent_id, grants, todo_id=ids[0])
        with pytest.raises(Conflict):
            leases.claim(s, hub.clock, agent_id, grants, todo_id=ids[0])


def test_claim_empty_queue_says_empty(hub: Hub) -> None:
    agent_id, _ = _ids(hub)
    with hub.db.write() as s:
        assert leases.claim(s, hub.clock, agent_id, _grants(hub, agent_id)) == {"empty": True}


def test_unknown_and_foreign_todos_are_the_same_not_found(hub: Hub) -> None:
    agent_id, _ = _ids(hub)
    ids = _make(hub, 1)
    with hub.db.write() as s:
        admin.add_agent(s, "stranger", "alice")
        stranger = admin.agent_by_name(s, "stranger").id
    for todo_id in ("td_doesnotexist", ids[0]):
        with hub.db.write() as s:
            with pytest.raises(NotFound) as info:
                leases.claim(s, hub.clock, stranger, _grants(hub, stranger), todo_id=todo_id)
        assert info.value.message == "no such todo"


def test_read_only_grant_cannot_claim(hub: Hub) -> None:
    ids = _make(hub, 1)
    with hub.db.write() as s:
        admin.add_agent(s, "reader", "alice")
        admin.grant(s, "reader", "acme", "read")
        reader = admin.agent_by_name(s, "reader").id
    with hub.db.write() as s:
        with pytest.raises(Forbidden):
            leases.claim(s, hub.clock, reader, _grants(hub, reader), todo_id=ids[0])
    with hub.db.read() as s:
        assert len(todos.list_todos(s, _grants(hub, reader))["todos"]) == 1


@pytest.mark.parametrize("limit", [0, 201, -1, True])
def test_list_limit_out_of_range_is_invalid_never_cut(hub: Hub, limit: int) -> None:
    agent_id, _ = _ids(hub)
    with hub.db.read() as s:
        with pytest.raises(InvalidArgument):
            todos.list_todos(s, _grants(hub, agent_id), limit=limit)


def test_list_says_when_more_exist(hub: Hub) -> None:
    agent_id, _ = _ids(hub)
    _make(hub, 3)
    with hub.db.read() as s:
        page = todos.list_todos(s, _grants(hub, agent_id), limit=2)
    assert len(page["todos"]) == 2 and page["has_more"] is True and "payload" not in page["todos"][0]


def test_tool_errors_are_structured(hub: Hub) -> None:
    agent_id, _ = _ids(hub)
    caller = Caller(agent_id, "claude1", "hum_x")
    cases = {
        ("todo_claim", "td_nope"): "not_found",
        ("todo_list", 500): "invalid_argument",
        ("todo_complete", None): "invalid_argument",
        ("nope", None): "invalid_argument",
    }
    for (tool, arg), code in cases.items():
        args = {"id": arg} if tool in ("todo_claim",) else ({"limit": arg} if tool == "todo_list" else {})
        result = call_tool(hub, caller, tool, args)
        assert result["isError"] is True and result["structuredContent"]["code"] == code, (tool, result)
        assert set(result["structuredContent"]) == {"code", "message", "retryable"}
    bad = call_tool(hub, caller, "todo_claim", {"id": "x", "project": "acme"})
    assert bad["structuredContent"]["code"] == "invalid_argument"
    assert call_tool(hub, caller, "todo_list", "not an object")["structuredContent"]["code"] == "invalid_argument"
    assert call_tool(hub, caller, "todo_claim", {"lease_seconds": 0})["structuredContent"]["code"] == "invalid_argument"
