"""The todo operations over REST, with problem details for every error."""

from __future__ import annotations

import httpx2

from tests.conftest import LiveApp


def _api(live: LiveApp, method: str, path: str, **kwargs: object) -> httpx2.Response:
    headers = {"Authorization": f"Bearer {live.world.token}"}
    return httpx2.request(method, f"{live.url}/api/v1{path}", headers=headers, timeout=10, **kwargs)  # type: ignore[arg-type]


def _make_todo(live: LiveApp) -> str:
    from switchboard.models import Project
    from switchboard.queue import todos

    with live.hub.db.write() as s:
        project = s.get(Project, live.world.project_id)
        todo, _ = todos.create(s, live.hub.clock, project_id=project.id, queue="reviews", kind="manual",
                               title="Check the build", payload={"x": 1})
        return todo.id


def test_rest_lifecycle(live: LiveApp) -> None:
    tid = _make_todo(live)
    assert _api(live, "GET", "/whoami").json()["agent"]["name"] == "claude1"
    listed = _api(live, "GET", "/todos?queue=reviews&limit=5").json()
    assert [t["id"] for t in listed["todos"]] == [tid] and listed["has_more"] is False
    claim = _api(live, "POST", "/todos/claim", json={"project": "acme", "lease_seconds": 60}).json()
    assert claim["todo"]["id"] == tid
    token = claim["lease_token"]
    assert _api(live, "POST", f"/todos/{tid}/heartbeat", json={"lease_token": token}).status_code == 200
    stale = _api(live, "POST", f"/todos/{tid}/complete", json={"lease_token": "stale"})
    assert stale.status_code == 409 and stale.json()["code"] == "conflict"
    assert stale.headers["content-type"].startswith("application/problem+json")
    assert _api(live, "POST", f"/todos/{tid}/fail", json={"lease_token": token, "summary": "flaky"}).json()[
        "state"] == "failed"
    got = _api(live, "GET", f"/todos/{tid}").json()
    assert got["attempts"][0]["outcome"] == "failed" and got["payload"] == {"x": 1}
    assert _api(live, "POST", "/todos/claim", json={}).json() == {"empty": True}


def test_rest_errors_are_problem_details(live: LiveApp) -> None:
    cases = [
        ("GET", "/todos/td_nope", None, 404, "not_found"),
        ("GET", "/todos?limit=500", None, 400, "invalid_argument"),
        ("GET", "/todos?limit=abc", None, 400, "invalid_argument"),
        ("GET", "/todos?limit=%C2%B2", None, 400, "invalid_argument"),  # "²": isdigit() but not int()
        ("GET", "/todos?limit=" + "1" * 5000, None, 400, "invalid_argument"),  # int() raises past 4,300 digits
        ("GET", "/todos?color=red", None, 400, "invalid_argument"),
        ("POST", "/todos/td_nope/explode", {}, 400, "invalid_argument"),
        ("POST", "/todos/td_nope/complete", {"id": "x"}, 400, "invalid_argument"),
        ("POST", "/todos/claim", {"lease_seconds": "ten"}, 400, "invalid_argument"),
        ("POST", "/todos/td_nope/release", {}, 404, "not_found"),
    ]
    for method, path, body, status, code in cases:
        resp = _api(live, method, path, json=body) if body is not None else _api(live, method, path)
        assert resp.status_code == status, (path, resp.text)
        assert resp.json()["code"] == code
    raw = httpx2.post(f"{live.url}/api/v1/todos/claim", content=b"[1", timeout=10,
                      headers={"Authorization": f"Bearer {live.world.token}", "Content-Type": "application/json"})
    assert raw.status_code == 400 and raw.json()["code"] == "invalid_argument"
    anon = httpx2.get(f"{live.url}/api/v1/todos", timeout=10)
    assert anon.status_code == 401 and anon.json()["code"] == "unauthenticated"
