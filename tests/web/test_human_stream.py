"""``GET /api/v1/stream``: the human stream of feed nudges (ids, resume, scope, auth)."""

from __future__ import annotations

import json
from typing import Any

import httpx2

from switchboard import admin
from switchboard.queue import todos
from tests.conftest import LiveApp
from tests.web.ui_support import add_human, own, post_form, signed_in


def _token(live: LiveApp, human: str = "alice") -> dict[str, str]:
    with live.hub.db.write() as s:
        return {"Authorization": f"Bearer {admin.vend_human_token(s, human)}"}


def _todo(live: LiveApp, title: str, project_id: str | None = None) -> str:
    hub = live.hub
    with hub.db.write() as s:
        todo, _ = todos.create(s, hub.clock, project_id=project_id or live.world.project_id, queue="q",
                               kind="manual", title=title, payload=None)
        return todo.id


def _events(client: httpx2.Client, n: int, headers: dict[str, str] | None = None, params: dict[str, str] | None = None,
            after_attach: Any = None) -> tuple[list[dict[str, Any]], httpx2.Response]:
    """Open the stream, run ``after_attach()`` once attached, and collect ``n`` events."""
    events: list[dict[str, Any]] = []
    with client.stream("GET", "/api/v1/stream", headers=headers, params=params) as resp:
        assert resp.status_code == 200, resp.read()
        current: dict[str, Any] = {}
        for line in resp.iter_lines():
            if line.startswith(": attached") and after_attach is not None:
                after_attach()
            elif line.startswith("id:"):
                current["id"] = line[3:].strip()
            elif line.startswith("event:"):
                current["event"] = line[6:].strip()
            elif line.startswith("data:"):
                current["data"] = json.loads(line[5:].strip())
            elif line == "" and current:
                events.append(current)
                current = {}
                if len(events) == n:
                    return events, resp
    raise AssertionError("the stream ended early")


def test_the_stream_refuses_without_a_session_or_token(live: LiveApp) -> None:
    for headers in ({}, {"Authorization": "Bearer sbh_nope"}, {"Authorization": "Bearer sbk_agent"},
                    {"Cookie": "switchboard_session=forged.value.sig"}):
        r = httpx2.get(f"{live.url}/api/v1/stream", headers=headers, timeout=10)
        assert r.status_code == 401 and r.headers["content-type"].startswith("application/problem+json")
        assert r.json()["code"] == "unauthenticated"
    for given in ("x1", b"\xb2"):  # b"\xb2" is "²" in latin-1: isdigit() but not int(), a 500 before
        bad = httpx2.get(f"{live.url}/api/v1/stream", headers={**_token(live), "Last-Event-ID": given}, timeout=10)
        assert bad.status_code == 400 and bad.json()["code"] == "invalid_argument"
    bad = httpx2.get(f"{live.url}/api/v1/stream?since=%C2%B2", headers=_token(live), timeout=10)
    assert bad.status_code == 400 and bad.json()["code"] == "invalid_argument"


def test_nudges_carry_ids_not_data_and_resume_exactly_after_last_event_id(live: LiveApp) -> None:
    own(live)
    auth = _token(live)
    client = httpx2.Client(base_url=live.url, timeout=20)
    first, resp = _events(client, 3, headers=auth, after_attach=lambda: [_todo(live, f"t{i}") for i in range(3)])
    assert resp.headers["x-accel-buffering"] == "no" and resp.headers["cache-control"] == "no-cache"
    assert [e["event"] for e in first] == ["feed"] * 3
    assert all(set(e["data"]) == {"id", "kind", "project_id"} and str(e["data"]["id"]) == e["id"] for e in first)
    assert all(e["data"]["kind"] == "todo.created" for e in first)
    ids = [int(e["id"]) for e in first]
    assert ids == sorted(ids) and len(set(ids)) == 3
    # Two more while nobody listens; resume after the first: exactly the four after it, in order.
    _todo(live, "t3"), _todo(live, "t4")
    resumed, _ = _events(client, 4, headers={**auth, "Last-Event-ID": str(ids[0])})
    got = [int(e["id"]) for e in resumed]
    assert got[:2] == ids[1:] and got == sorted(got) and len(set(got)) == 4


def test_a_human_never_hears_of_another_humans_projects(live: LiveApp) -> None:
    own(live)
    add_human(live, "bob", project="bobs")
    with live.hub.db.read() as s:
        bobs = admin.project_by_name(s, "bobs").id
    client = httpx2.Client(base_url=live.url, timeout=20)

    def both() -> None:
        _todo(live, "alice work")
        _todo(live, "bob work", bobs)

    heard, _ = _events(client, 1, headers=_token(live, "bob"), params={"since": "0"}, after_attach=both)
    assert heard[0]["data"]["project_id"] == bobs


def test_the_browser_session_cookie_opens_the_stream(live: LiveApp) -> None:
    own(live)
    browser = signed_in(live)
    heard, _ = _events(browser, 1, after_attach=lambda: _todo(live, "for the page"))
    assert heard[0]["data"]["kind"] == "todo.created"


def test_heartbeats_are_comments_without_ids(live: LiveApp, monkeypatch: Any) -> None:
    from switchboard.web import human_stream

    monkeypatch.setattr(human_stream, "HEARTBEAT_SECONDS", 0.2)  # 15 s in production
    client = httpx2.Client(base_url=live.url, timeout=20)
    lines: list[str] = []
    with client.stream("GET", "/api/v1/stream", headers=_token(live)) as resp:
        for line in resp.iter_lines():
            lines.append(line)
            if sum(1 for x in lines if x.startswith(": ping")) >= 2:
                break
    assert not any(x.startswith("id:") for x in lines)


def _ends_unauthenticated(client: httpx2.Client, headers: dict[str, str] | None, end_it: Any) -> None:
    """Open the stream, call ``end_it()`` once attached, and expect ``unauthenticated`` then the end."""
    with client.stream("GET", "/api/v1/stream", headers=headers) as resp:
        assert resp.status_code == 200
        seen: list[str] = []
        for line in resp.iter_lines():
            if line.startswith(": attached"):
                end_it()
            seen.append(line)
        assert "event: unauthenticated" in seen  # and the stream ended (the loop finished)


def test_a_revoked_token_or_an_ended_web_session_ends_the_stream(live: LiveApp) -> None:
    # Found by a break-it review: an open stream outlived its token's revocation and a logout.
    from switchboard import revocation

    own(live)
    auth = _token(live)
    client = httpx2.Client(base_url=live.url, timeout=20)

    def revoke() -> None:
        with live.hub.db.write() as s:
            revocation.revoke_human_tokens(s, live.hub.clock, admin.human_by_name(s, "alice").id)

    _ends_unauthenticated(client, auth, revoke)
    browser = signed_in(live)
    _ends_unauthenticated(browser, None, lambda: post_form(signed_in_twin(browser), "/ui/inbox", "/ui/logout"))


def signed_in_twin(browser: httpx2.Client) -> httpx2.Client:
    """Another client with the same cookies (the streaming one is busy reading)."""
    twin = httpx2.Client(base_url=str(browser.base_url), follow_redirects=False, timeout=30)
    twin.cookies.update(browser.cookies)
    return twin


def test_a_last_event_id_past_every_feed_id_given_starts_at_the_newest(live: LiveApp) -> None:
    """A ``Last-Event-ID`` kept across a restore of an older backup is past every feed id this
    database has given; read after it, no nudge came until the ids caught up. The stream starts
    at the newest event instead."""
    own(live)
    client = httpx2.Client(base_url=live.url, timeout=20)
    got, _ = _events(client, 2, headers={**_token(live), "Last-Event-ID": "1000000"},
                     after_attach=lambda: _todo(live, "after the restore"))
    assert got[0]["event"] == "restart" and int(got[0]["id"]) == got[0]["data"]["position"]  # ui.js reloads
    assert got[1]["data"]["kind"] == "todo.created" and int(got[0]["id"]) < int(got[1]["id"]) < 1000000
