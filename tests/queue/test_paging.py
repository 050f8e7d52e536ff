"""Cursor paging and bounded payloads through the tool catalogue, on SQLite and PostgreSQL (issue 18 item 4)."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest

from switchboard import admin, paging
from switchboard.hub import Hub
from switchboard.mcp_server.calls import call_tool
from switchboard.mcp_server.specs import Caller
from switchboard.models import Todo
from switchboard.queue import payloads, todos


def _caller(hub: Hub, name: str = "claude1") -> Caller:
    with hub.db.read() as s:
        agent = admin.agent_by_name(s, name)
        return Caller(agent.id, agent.name, agent.human_id)


def _project_id(hub: Hub, name: str = "acme") -> str:
    with hub.db.read() as s:
        return admin.project_by_name(s, name).id


def _ok(hub: Hub, caller: Caller, tool: str, args: dict[str, Any]) -> dict[str, Any]:
    result = call_tool(hub, caller, tool, args, with_trailer=False)
    assert not result["isError"], result
    return result["structuredContent"]  # type: ignore[no-any-return]


def _error(hub: Hub, caller: Caller, tool: str, args: dict[str, Any]) -> str:
    result = call_tool(hub, caller, tool, args, with_trailer=False)
    assert result["isError"], result
    return str(result["structuredContent"]["code"])


def _bulk(hub: Hub, project_id: str, n: int, tag: str, *, same_time_every: int = 0,
          backdate: timedelta | None = None) -> list[str]:
    """``n`` pending todos; with ``same_time_every`` > 0, runs of that many share one created_at
    (so the id tie-break of the sort key is exercised); ``backdate`` sets created_at that far in
    the past (a late commit, or another server's slow clock)."""
    rows = []
    with hub.db.write() as s:
        at = hub.clock.now()
        for i in range(n):
            if not same_time_every or i % same_time_every == 0:
                at = hub.clock.now()
            when = at - backdate if backdate is not None else at
            rows.append(Todo(project_id=project_id, queue="bulk", kind="test", title=f"{tag} {i}",
                             payload={"i": i}, created_at=when, updated_at=when))
        s.add_all(rows)
        s.flush()
        return [t.id for t in rows]


def test_paging_5000_todos_lists_each_exactly_once_with_inserts_between_pages(hub: Hub) -> None:
    """Issue 18 item 4: 5,000 pending todos paged 200 at a time while, between pages, new todos
    arrive (newer ones, and backdated ones that sort before the cursor) and listed todos are
    claimed and completed (so they leave the ``pending`` filter). Offset paging would skip a
    todo for each completed one and repeat one for each backdated insert."""
    caller = _caller(hub)
    project_id = _project_id(hub)
    before = set(_bulk(hub, project_id, 4000, "early"))
    before |= set(_bulk(hub, project_id, 1000, "tied", same_time_every=7))
    assert len(before) == 5000
    seen: list[str] = []
    inserted: set[str] = set()
    args: dict[str, Any] = {"project": "acme", "state": "pending", "limit": 200}
    pages = 0
    while True:
        page = _ok(hub, caller, "todo_list", args)
        pages += 1
        seen += [t["id"] for t in page["todos"]]
        assert page["has_more"] is (page["next_cursor"] is not None)
        if page["next_cursor"] is None:
            break
        inserted |= set(_bulk(hub, project_id, 7, f"during {pages}"))
        _bulk(hub, project_id, 3, f"backdated {pages}", backdate=timedelta(days=1))
        for listed in page["todos"][:2]:
            claimed = _ok(hub, caller, "todo_claim", {"todo_id": listed["id"]})
            _ok(hub, caller, "todo_complete", {"todo_id": listed["id"], "lease_token": claimed["lease_token"]})
        args = {**args, "cursor": page["next_cursor"]}
        assert pages < 100, "the walk does not end"
    assert len(seen) == len(set(seen)), "a todo was listed twice"
    assert before <= set(seen), f"{len(before - set(seen))} todos were skipped"
    assert inserted <= set(seen), "todos created during the walk (newer than the cursor) were not listed"
    assert pages >= 26


def test_paging_keeps_the_filters_and_the_creation_order(hub: Hub) -> None:
    caller = _caller(hub)
    ids = _bulk(hub, _project_id(hub), 25, "t", same_time_every=4)
    got: list[dict[str, Any]] = []
    args: dict[str, Any] = {"queue": "bulk", "state": "pending", "limit": 10}
    while True:
        page = _ok(hub, caller, "todo_list", args)
        got += page["todos"]
        if not page["next_cursor"]:
            break
        args["cursor"] = page["next_cursor"]
    assert [t["id"] for t in got] == sorted(ids, key=lambda i: (next(t["created_at"] for t in got if t["id"] == i), i))
    assert {t["queue"] for t in got} == {"bulk"} and {t["state"] for t in got} == {"pending"}


@pytest.mark.parametrize("cursor", [
    "", "x", "c1.", "c1.!!!", "c1." + "A" * 500, "c2.WyJ0b2RvcyJd",
    paging.encode("feed", (5,), ("int",)),                       # another list's cursor
    "c1.WyJ0b2RvcyIsImJhZCJd",                                   # ["todos","bad"]: wrong shape
    "c1.WyJ0b2RvcyIsIjIwMjYtMDEtMDFUMDA6MDA6MDAiLCJ0ZF94Il0",   # naive time
    # Found by a break-it review (both were 500 internal with a logged traceback):
    "c1.WyJ0b2RvcyIsICIwMDAxLTAxLTAxVDAwOjAwOjAwKzAxOjAwIiwgIngiXQ",  # a time with no UTC instant
    "c1.WyJ0b2RvcyIsIjIwMjYtMTItMDFUMDQ6Mjk6NTkrMDA6MDAiLCJcdWRjODAiXQ",  # a lone surrogate in the id
])
def test_a_malformed_cursor_is_invalid_argument(hub: Hub, cursor: str) -> None:
    assert _error(hub, _caller(hub), "todo_list", {"cursor": cursor}) == "invalid_argument"


def test_a_cursor_never_widens_the_callers_scope(hub: Hub) -> None:
    with hub.db.write() as s:
        admin.add_human(s, "bob")
        admin.add_project(s, "bobs")
        admin.add_agent(s, "bobagent", "bob")
        admin.grant(s, "bobagent", "bobs", "work")
    bob = _caller(hub, "bobagent")
    bobs_ids = set(_bulk(hub, _project_id(hub, "bobs"), 5, "bob secret"))
    _bulk(hub, _project_id(hub), 5, "alice")
    # A cursor from bob's walk (or one built by hand at the very start) given to alice lists only alice's todos.
    bob_page = _ok(hub, bob, "todo_list", {"limit": 2})
    start = paging.encode(todos.LIST_NAME, (hub.clock.now() - timedelta(days=365), "td_"), ("time", "str"))
    alice = _caller(hub)
    for cursor in (bob_page["next_cursor"], start):
        listed = {t["id"] for t in _ok(hub, alice, "todo_list", {"cursor": cursor, "limit": 200})["todos"]}
        assert listed and not listed & bobs_ids
    # And bob's own walk sees his five.
    assert {t["id"] for t in bob_page["todos"]} <= bobs_ids


def test_feed_and_inbox_take_cursors_like_since(hub: Hub) -> None:
    caller = _caller(hub)
    _bulk(hub, _project_id(hub), 3, "x")
    with hub.db.write() as s:  # feed events (todo.created) for three todos
        for i in range(3):
            todos.create(s, hub.clock, project_id=_project_id(hub), queue="q", kind="k", title=f"e{i}", payload=None)
    first = _ok(hub, caller, "feed_read", {"since": 0, "limit": 2})
    assert first["has_more"] and first["next_cursor"]
    by_cursor = _ok(hub, caller, "feed_read", {"cursor": first["next_cursor"], "limit": 2})
    by_since = _ok(hub, caller, "feed_read", {"since": first["next_since"], "limit": 2})
    assert by_cursor["events"] == by_since["events"] and by_cursor["events"]
    assert _error(hub, caller, "feed_read", {"cursor": first["next_cursor"], "since": 0}) == "invalid_argument"
    assert _error(hub, caller, "feed_read", {"cursor": "c1.bogus"}) == "invalid_argument"
    # A feed cursor is not an inbox cursor.
    assert _error(hub, caller, "inbox_read", {"cursor": first["next_cursor"]}) == "invalid_argument"
    for i in range(3):
        _ok(hub, caller, "question_post", {"project": "acme", "title": f"q{i}"})
    seen: list[str] = []
    args: dict[str, Any] = {"limit": 2}
    for _ in range(5):
        page = _ok(hub, caller, "inbox_read", args)
        seen += [i["id"] for i in page["items"]]
        if not page["has_more"]:
            break
        args = {"limit": 2, "cursor": page["next_cursor"]}
    assert len(seen) == 3 == len(set(seen))


def _big_todo(hub: Hub, payload: Any) -> str:
    with hub.db.write() as s:
        todo, _ = todos.create(s, hub.clock, project_id=_project_id(hub), queue="big", kind="k", title="big",
                               payload=payload)
        return todo.id


def test_a_payload_over_the_budget_is_cut_with_a_marker_and_fetched_in_parts(hub: Hub) -> None:
    caller = _caller(hub)
    budget = hub.settings.payload_budget_bytes
    payload = {"body": "é✓ [secret ref=sec_" + "a" * 32 + " type=generic] " + "x" * (1024 * 1024),
               "nested": [{"n": i} for i in range(100)]}
    todo_id = _big_todo(hub, payload)
    got = _ok(hub, caller, "todo_get", {"todo_id": todo_id})
    text = payloads.canonical(payload)
    assert got["payload"] is None and got["payload_truncated"] is True
    assert got["payload_bytes"] == len(text) > budget
    assert got["payload_preview"] == text[:budget] and got["payload_next_offset"] == budget
    assert got["result_truncated"] is False and got["result"] is None
    assert len(json.dumps(got)) < 2 * budget  # the result itself is bounded
    claimed = _ok(hub, caller, "todo_claim", {"todo_id": todo_id})
    assert claimed["todo"]["payload"] is None and claimed["todo"]["payload_truncated"] is True
    assert "todo_payload" in call_tool(hub, caller, "todo_get", {"todo_id": todo_id},
                                       with_trailer=False)["content"][0]["text"]
    parts = [got["payload_preview"]]
    offset: int | None = got["payload_next_offset"]
    calls = 0
    while offset is not None:
        part = _ok(hub, caller, "todo_payload", {"todo_id": todo_id, "offset": offset})
        assert part["offset"] == offset and part["length"] == len(part["data"]) <= budget
        assert part["total_bytes"] == len(text)
        parts.append(part["data"])
        offset = part["next_offset"]
        calls += 1
    assert json.loads("".join(parts)) == payload  # the secret ref is still a ref
    assert calls == -(-(len(text) - budget) // budget)


def test_a_small_payload_is_whole_and_marked_so(hub: Hub) -> None:
    caller = _caller(hub)
    todo_id = _big_todo(hub, {"k": "v"})
    got = _ok(hub, caller, "todo_get", {"todo_id": todo_id})
    assert got["payload"] == {"k": "v"} and got["payload_truncated"] is False and got["payload_bytes"] == 9
    assert "payload_preview" not in got
    whole = _ok(hub, caller, "todo_payload", {"todo_id": todo_id})
    assert whole == {"todo_id": todo_id, "part": "payload", "offset": 0, "length": 9, "total_bytes": 9,
                     "data": '{"k":"v"}', "next_offset": None}
    assert _ok(hub, caller, "todo_payload", {"todo_id": todo_id, "part": "result"})["data"] == "null"


def test_todo_payload_refuses_bad_ranges_and_answers_foreign_todos_like_missing_ones(hub: Hub) -> None:
    caller = _caller(hub)
    todo_id = _big_todo(hub, {"k": "v"})
    budget = hub.settings.payload_budget_bytes
    assert _error(hub, caller, "todo_payload", {"todo_id": todo_id, "offset": 10}) == "invalid_argument"
    assert _error(hub, caller, "todo_payload", {"todo_id": todo_id, "length": budget + 1}) == "invalid_argument"
    assert _error(hub, caller, "todo_payload", {"todo_id": todo_id, "length": 0}) == "invalid_argument"
    assert _error(hub, caller, "todo_payload", {"todo_id": todo_id, "part": "raw"}) == "invalid_argument"
    with hub.db.write() as s:
        admin.add_human(s, "bob")
        admin.add_agent(s, "bobagent", "bob")
    bob = _caller(hub, "bobagent")
    foreign = call_tool(hub, bob, "todo_payload", {"todo_id": todo_id}, with_trailer=False)
    missing = call_tool(hub, bob, "todo_payload", {"todo_id": "td_" + "z" * 16}, with_trailer=False)
    assert foreign["structuredContent"] == missing["structuredContent"]
    assert foreign["structuredContent"]["code"] == "not_found"
