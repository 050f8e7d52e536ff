"""Cursor paging and bounded payloads over REST (issue 18 item 4): agent and human lists, the
payload route, and the exact 400 for a malformed cursor."""

from __future__ import annotations

import json
from typing import Any

import httpx2
import pytest

from switchboard import admin
from switchboard.models import Delivery
from switchboard.queue import payloads, todos
from tests.conftest import LiveApp


def _get(live: LiveApp, path: str, token: str | None = None, **params: Any) -> httpx2.Response:
    return httpx2.get(f"{live.url}/api/v1{path}", params=params,
                      headers={"Authorization": f"Bearer {token or live.world.token}"}, timeout=30)


def _walk(live: LiveApp, path: str, key: str, token: str | None = None, **params: Any) -> list[str]:
    ids: list[str] = []
    for _ in range(50):
        resp = _get(live, path, token, **params)
        assert resp.status_code == 200, resp.text
        body = resp.json()
        ids += [row["id"] for row in body[key]]
        if not body["next_cursor"]:
            assert body["has_more"] is False
            return ids
        params = {**params, "cursor": body["next_cursor"]}
    raise AssertionError("the walk does not end")


def _make(live: LiveApp, n: int, payload: Any = None) -> list[str]:
    hub = live.hub
    with hub.db.write() as s:
        return [todos.create(s, hub.clock, project_id=live.world.project_id, queue="q", kind="k", title=f"t{i}",
                             payload=payload)[0].id for i in range(n)]


def _human(live: LiveApp) -> str:
    with live.hub.db.write() as s:
        admin.add_owner(s, "acme", "alice")
        return admin.vend_human_token(s, "alice")


def test_agent_and_human_todo_lists_page_with_cursors(live: LiveApp) -> None:
    ids = _make(live, 7)
    assert _walk(live, "/todos", "todos", limit=3) == ids
    assert _walk(live, "/human/todos", "todos", _human(live), limit=2, state="pending") == ids


def test_quarantine_and_human_inbox_page_with_cursors(live: LiveApp) -> None:
    token = _human(live)
    with live.hub.db.write() as s:
        held = [Delivery(source_id=live.world.source_id, project_id=live.world.project_id, status="quarantined",
                         raw_body=b"{}") for _ in range(5)]
        s.add_all(held)
        s.flush()
        held_ids = {d.id for d in held}
    assert set(_walk(live, "/human/quarantine", "deliveries", token, limit=2)) == held_ids
    for i in range(4):
        httpx2.post(f"{live.url}/api/v1/inbox/questions", json={"project": "acme", "title": f"q{i}"},
                    headers={"Authorization": f"Bearer {live.world.token}"}, timeout=30).raise_for_status()
    assert len(set(_walk(live, "/human/inbox", "items", token, limit=3))) == 4


@pytest.mark.parametrize("path", ["/todos", "/feed", "/inbox", "/human/todos", "/human/inbox", "/human/quarantine"])
def test_a_malformed_cursor_is_400_invalid_argument(live: LiveApp, path: str) -> None:
    token = _human(live) if path.startswith("/human") else None
    resp = _get(live, path, token, cursor="c1.eyJub3QiOiJhIGN1cnNvciJ9")
    assert resp.status_code == 400 and resp.headers["content-type"].startswith("application/problem+json")
    assert resp.json()["code"] == "invalid_argument"


def test_the_payload_route_returns_the_rest_of_a_cut_payload(live: LiveApp) -> None:
    payload = {"text": "ü" * 40_000, "more": "y" * 100_000}
    (todo_id,) = _make(live, 1, payload)
    got = _get(live, f"/todos/{todo_id}").json()
    assert got["payload"] is None and got["payload_truncated"] is True
    parts, offset = [got["payload_preview"]], got["payload_next_offset"]
    while offset is not None:
        part = _get(live, f"/todos/{todo_id}/payload", offset=offset).json()
        parts.append(part["data"])
        offset = part["next_offset"]
    assert json.loads("".join(parts)) == payload and len("".join(parts)) == got["payload_bytes"]
    assert "".join(parts) == payloads.canonical(payload)
    bad = _get(live, f"/todos/{todo_id}/payload", offset=-1)
    assert bad.status_code == 400 and bad.json()["code"] == "invalid_argument"
    unknown = _get(live, f"/todos/{todo_id}/payload", bytes=5)
    assert unknown.status_code == 400 and unknown.json()["code"] == "invalid_argument"
    assert _get(live, "/todos/td_nope/payload").json()["code"] == "not_found"
