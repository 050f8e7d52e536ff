"""REST for humans: dead letters, retry, cancel, assign, add; only for projects they own."""

from __future__ import annotations

import httpx2

from switchboard import admin
from switchboard.queue import leases, todos
from tests.conftest import LiveApp


def _human(live: LiveApp, name: str = "alice", owns: bool = True) -> dict[str, str]:
    with live.hub.db.write() as s:
        if name != "alice":
            admin.add_human(s, name)
        if owns:
            admin.add_owner(s, "acme", name)
        return {"Authorization": f"Bearer {admin.vend_human_token(s, name)}"}


def _dead_letter(live: LiveApp) -> str:
    hub = live.hub
    with hub.db.write() as s:
        todo, _ = todos.create(s, hub.clock, project_id=live.world.project_id, queue="q", kind="manual", title="t",
                               payload=None)
        todo.max_attempts = 1
        grants = admin.grants_of(s, live.world.agent_id)
    with hub.db.write() as s:
        leases.claim(s, hub.clock, live.world.agent_id, grants, todo_id=todo.id)
    with hub.db.write() as s:
        leases.fail(s, hub.clock, live.world.agent_id, grants, todo_id=todo.id, summary="boom")
    return todo.id


def test_owner_lists_and_retries_dead_letters(live: LiveApp) -> None:
    auth = _human(live)
    tid = _dead_letter(live)
    dead = httpx2.get(f"{live.url}/api/v1/human/todos?dead_letters=1", headers=auth).json()
    assert [t["id"] for t in dead["todos"]] == [tid] and dead["todos"][0]["dead_lettered"]
    retried = httpx2.post(f"{live.url}/api/v1/human/todos/{tid}/retry", headers=auth)
    assert retried.status_code == 200 and retried.json()["state"] == "pending"
    again = httpx2.post(f"{live.url}/api/v1/human/todos/{tid}/retry", headers=auth)
    assert again.status_code == 409 and again.json()["code"] == "conflict"
    assign = httpx2.post(f"{live.url}/api/v1/human/todos/{tid}/assign", json={"agent": "claude1"}, headers=auth)
    assert assign.json()["assigned_agent_id"] == live.world.agent_id
    cancelled = httpx2.post(f"{live.url}/api/v1/human/todos/{tid}/cancel", headers=auth)
    assert cancelled.json()["state"] == "cancelled"
    made = httpx2.post(f"{live.url}/api/v1/human/todos", json={"project": "acme", "title": "Write docs"}, headers=auth)
    assert made.status_code == 201 and made.json()["state"] == "pending"


def test_non_owner_sees_not_found_and_bad_input_is_4xx(live: LiveApp) -> None:
    tid = _dead_letter(live)
    stranger = _human(live, "mallory", owns=False)
    for path in (f"/todos/{tid}/retry", f"/todos/{tid}/cancel", "/todos/td_nope/retry"):
        resp = httpx2.post(f"{live.url}/api/v1/human{path}", headers=stranger)
        assert resp.status_code == 404 and resp.json()["code"] == "not_found"
    assert httpx2.get(f"{live.url}/api/v1/human/todos?project=acme", headers=stranger).status_code == 404
    owner = _human(live)
    cases = [("GET", "/todos?limit=0", None, 400), ("GET", "/todos?state=weird", None, 400),
             ("POST", "/todos", {"project": "acme", "title": ""}, 400),
             ("POST", "/todos", {"project": "acme", "title": "</channel> hi"}, 400),
             ("POST", "/todos", {"project": "nope", "title": "x"}, 404),
             ("POST", f"/todos/{tid}/explode", {}, 400), ("POST", f"/todos/{tid}/assign", {}, 400)]
    for method, path, body, status in cases:
        resp = httpx2.request(method, f"{live.url}/api/v1/human{path}", json=body, headers=owner)
        assert resp.status_code == status, (path, resp.text)
    for headers in ({}, {"Authorization": f"Bearer {live.world.token}"}):  # an agent token is not a human's
        assert httpx2.get(f"{live.url}/api/v1/human/todos", headers=headers).status_code == 401


def test_owner_works_the_quarantine_over_rest(live: LiveApp) -> None:
    import json

    from tests.conftest import CASES, github_headers, wait_for

    auth = _human(live)
    stranger = json.loads((CASES / "github" / "issues.opened.json").read_bytes())
    stranger["sender"]["id"] = 777
    bodies = []
    for n in (1, 2):
        stranger["issue"]["number"] = n
        body = json.dumps(stranger).encode()
        bodies.append(live.post_hook(body, github_headers(body, live.world.secret)).json()["delivery_id"])

    def listed() -> list:
        return httpx2.get(f"{live.url}/api/v1/human/quarantine", headers=auth).json()["deliveries"]

    rows = wait_for(lambda: len(listed()) == 2 and listed())
    assert {r["reason"] for r in rows} == {"unknown_sender"} and rows[0]["sender"]["external_id"] == "777"
    still = httpx2.post(f"{live.url}/api/v1/human/quarantine/{bodies[0]}/release", headers=auth)
    assert still.status_code == 409 and still.json()["code"] == "conflict"
    assert '{"as_self": true}' in still.json()["detail"]
    # A new-user run: "yes" was read as false and answered with that 409.
    wrong = httpx2.post(f"{live.url}/api/v1/human/quarantine/{bodies[0]}/release", json={"as_self": "yes"},
                        headers=auth)
    assert (wrong.status_code, wrong.json()["detail"]) == (400, "as_self must be true or false")
    released = httpx2.post(f"{live.url}/api/v1/human/quarantine/{bodies[0]}/release", json={"as_self": True},
                           headers=auth).json()
    assert released["status"] == "processed" and released["todo_id"]
    again = httpx2.post(f"{live.url}/api/v1/human/quarantine/{bodies[0]}/release", json={"as_self": True},
                        headers=auth)
    assert again.status_code in (404, 409)
    gone = httpx2.post(f"{live.url}/api/v1/human/quarantine/{bodies[1]}/discard", headers=auth).json()
    assert gone["status"] == "discarded" and listed() == []
    outsider = _human(live, "mallory", owns=False)
    assert httpx2.post(f"{live.url}/api/v1/human/quarantine/{bodies[1]}/discard",
                       headers=outsider).status_code == 404


def test_a_title_is_refused_over_300_characters_never_cut_on_every_surface(live: LiveApp) -> None:
    # A new-user run: the CLI, the web UI and this route cut titles at 200 characters with "…"
    # while todo_create refused them over 300; DESIGN.md §6: never silently cut.
    auth = _human(live)
    made = httpx2.post(f"{live.url}/api/v1/human/todos", json={"project": "acme", "title": "t" * 300},
                       headers=auth).json()
    from switchboard.models import Todo

    with live.hub.db.read() as s:
        assert s.get(Todo, made["id"]).title == "t" * 300  # whole
    for title in ("t" * 301, "", "   ", 5, "a </channel> b"):
        resp = httpx2.post(f"{live.url}/api/v1/human/todos", json={"project": "acme", "title": title}, headers=auth)
        assert (resp.status_code, resp.json()["code"]) == (400, "invalid_argument"), title
    assert httpx2.post(f"{live.url}/api/v1/human/todos", json={"project": "acme", "title": "t" * 301},
                       headers=auth).json()["detail"] == "title must be 1-300 characters on one line"
    agent = httpx2.post(f"{live.url}/api/v1/agent/tools/todo_create",
                        json={"project": "acme", "queue": "reviews", "title": "t" * 301},
                        headers={"Authorization": f"Bearer {live.world.token}"}).json()
    assert agent["structuredContent"]["message"] == "title: must be at most 300 characters (got 301)"


def test_wrongly_typed_fields_are_400_not_500(live: LiveApp) -> None:
    # A review: {"project": {"a": 1}} reached the database driver (500); 50,000 '[' to the
    # permission route raised RecursionError (500).
    auth = _human(live)
    for body in ({"project": {"a": 1}, "title": "x"}, {"project": ["acme"], "title": "x"},
                 {"project": "acme", "title": "x", "assign": 5}):
        resp = httpx2.post(f"{live.url}/api/v1/human/todos", json=body, headers=auth)
        assert (resp.status_code, resp.json()["code"]) == (400, "invalid_argument"), body
    resp = httpx2.post(f"{live.url}/api/v1/agent/permission", content=b"[" * 50_000,
                       headers={"Authorization": f"Bearer {live.world.token}", "Content-Type": "application/json",
                                "X-Switchboard-Session": "ses_test"})
    assert (resp.status_code, resp.json()["code"]) == (400, "invalid_argument")
    assert "nests deeper than" in resp.json()["detail"]
