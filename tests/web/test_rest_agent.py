"""The agent surface and the human inbox over REST: same handlers as the tools, problem details
for every error, and the OpenAPI document generated from the marshmallow schemas."""

from __future__ import annotations

import threading
import time
from typing import Any

import httpx2
import pytest

from switchboard import admin
from tests.conftest import LiveApp


def _api(live: LiveApp, method: str, path: str, token: str | None = None, **kwargs: Any) -> httpx2.Response:
    headers = {"Authorization": f"Bearer {token or live.world.token}"}
    return httpx2.request(method, f"{live.url}/api/v1{path}", headers=headers, timeout=30, **kwargs)


def _human_token(live: LiveApp, name: str = "alice") -> str:
    with live.hub.db.write() as s:
        return admin.vend_human_token(s, name)


def _problem(resp: httpx2.Response, status: int, code: str) -> None:
    assert resp.status_code == status, resp.text
    assert resp.headers["content-type"].startswith("application/problem+json")
    body = resp.json()
    assert body["code"] == code and body["status"] == status and body["type"].endswith(code)


@pytest.mark.usefixtures("recheck_after_a_minute")  # the wait itself is 20 s
def test_inbox_round_trip_between_agent_and_human(live: LiveApp) -> None:
    human = _human_token(live)
    q = _api(live, "POST", "/inbox/questions", json={"project": "acme", "title": "Merge?", "options": ["yes", "no"]})
    assert q.status_code == 201 and q.json()["status"] == "open"
    a = _api(live, "POST", "/inbox/approvals", json={"project": "acme", "title": "Rotate keys",
                                                     "expires_in_seconds": 600})
    assert a.status_code == 201 and a.json()["on_expiry"] == "deny"
    qid, aid = q.json()["id"], a.json()["id"]

    waiting = _api(live, "GET", "/human/inbox", token=human).json()["items"]
    assert [i["id"] for i in waiting] == [qid, aid] and waiting[0]["agent"] == "claude1"

    result: dict[str, Any] = {}

    def wait() -> None:
        resp = _api(live, "GET", "/inbox/wait?wait_seconds=20")
        result.update(resp.json(), returned=time.monotonic(), status=resp.status_code)

    waiter = threading.Thread(target=wait)
    waiter.start()
    deadline = time.monotonic() + 10
    while live.hub.inbox_waiters.count() == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    answered = time.monotonic()
    resp = _api(live, "POST", f"/human/inbox/{qid}/answer", token=human, json={"answer": "yes"})
    assert resp.status_code == 200 and resp.json()["resolved_via"] == "rest"
    waiter.join(30)
    assert result["status"] == 200 and [i["id"] for i in result["resolved"]] == [qid]
    assert result["returned"] - answered < 10.0

    decided = _api(live, "POST", f"/human/inbox/{aid}/decide", token=human, json={"decision": "approve",
                                                                                    "note": "go"})
    assert decided.json()["decision"] == "approve"
    _problem(_api(live, "POST", f"/human/inbox/{aid}/decide", token=human, json={"decision": "deny"}), 409,
             "conflict")
    read = _api(live, "GET", "/inbox?status=resolved").json()
    assert {i["id"] for i in read["items"]} == {qid, aid}

    # Another human sees nothing of alice's and cannot act on it: not_found, as for unknown ids.
    with live.hub.db.write() as s:
        admin.add_human(s, "bob")
    bob = _human_token(live, "bob")
    assert _api(live, "GET", "/human/inbox?status=all", token=bob).json() == {"items": [], "has_more": False,
                                                                             "next_cursor": None}
    _problem(_api(live, "POST", f"/human/inbox/{qid}/answer", token=bob, json={"answer": "no"}), 404, "not_found")
    _problem(_api(live, "POST", "/human/inbox/inb_nope/answer", token=human, json={"answer": "no"}), 404,
             "not_found")
    # Agent tokens are not human tokens, and the reverse.
    _problem(_api(live, "GET", "/human/inbox", token=live.world.token), 401, "unauthenticated")
    _problem(_api(live, "GET", "/inbox", token=human), 401, "unauthenticated")


def test_feed_and_subscriptions(live: LiveApp) -> None:
    sub = _api(live, "POST", "/subscriptions", json={"kinds": ["question.posted"], "project": "acme"})
    assert sub.status_code == 201 and sub.json()["kinds"] == ["question.posted"]
    _api(live, "POST", "/inbox/questions", json={"project": "acme", "title": "Hello?"})
    page = _api(live, "GET", "/feed?kinds=question.posted&kinds=todo.created&limit=5").json()
    assert [e["kind"] for e in page["events"]] == ["question.posted"] and page["next_since"] == page["events"][0]["id"]
    assert _api(live, "GET", f"/feed?since={page['next_since']}").json()["events"] == []
    gone = _api(live, "DELETE", f"/subscriptions/{sub.json()['subscription_id']}")
    assert gone.json() == {"subscription_id": sub.json()["subscription_id"], "removed": True}
    _problem(_api(live, "DELETE", f"/subscriptions/{sub.json()['subscription_id']}"), 404, "not_found")


def test_rest_errors_are_problem_details(live: LiveApp) -> None:
    cases = [
        ("GET", "/feed?limit=201", None, 400, "invalid_argument"),
        ("GET", "/feed?kinds=nope", None, 400, "invalid_argument"),
        ("GET", "/feed?colour=red", None, 400, "invalid_argument"),
        ("GET", "/feed?project=nope", None, 404, "not_found"),
        ("GET", "/inbox?status=lost", None, 400, "invalid_argument"),
        ("GET", "/inbox/wait?wait_seconds=61", None, 400, "invalid_argument"),
        ("POST", "/inbox/questions", {"title": "no project"}, 400, "invalid_argument"),
        ("POST", "/inbox/questions", {"project": "acme", "title": "x", "extra": 1}, 400, "invalid_argument"),
        ("POST", "/inbox/approvals", {"project": "nope", "title": "x"}, 404, "not_found"),
        ("POST", "/inbox/approvals", {"project": "acme", "title": "x", "on_expiry": "maybe"}, 400,
         "invalid_argument"),
        ("POST", "/subscriptions", {"kinds": []}, 400, "invalid_argument"),
    ]
    for method, path, body, status, code in cases:
        resp = _api(live, method, path, json=body) if body is not None else _api(live, method, path)
        _problem(resp, status, code)
    _problem(httpx2.get(f"{live.url}/api/v1/inbox/wait", timeout=10), 401, "unauthenticated")


def test_openapi_document(live: LiveApp) -> None:
    doc = httpx2.get(f"{live.url}/api/v1/openapi.json", timeout=10).json()
    assert doc["openapi"] == "3.1.0"
    for path in ("/api/v1/feed", "/api/v1/inbox", "/api/v1/inbox/questions", "/api/v1/inbox/approvals",
                 "/api/v1/inbox/wait", "/api/v1/subscriptions", "/api/v1/subscriptions/{subscription_id}",
                 "/api/v1/human/inbox/{item_id}/answer", "/api/v1/human/inbox/{item_id}/decide",
                 "/api/v1/todos", "/api/v1/todos/{todo_id}/{action}", "/api/v1/whoami"):
        assert path in doc["paths"], path
    item = doc["components"]["schemas"]["InboxItem"]
    assert {"id", "status", "answer", "decision", "resolved_by", "resolved_via"} <= set(item["properties"])
    post = doc["paths"]["/api/v1/inbox/questions"]["post"]
    assert post["requestBody"]["content"]["application/json"]["schema"] == {"$ref": "#/components/schemas/QuestionBody"}
    assert all("description" in r for ops in doc["paths"].values() for op in ops.values()
               for r in op["responses"].values())


def test_invalid_arguments_name_the_field_and_limit_without_quoting_the_value(live: LiveApp) -> None:
    # A new-user run: a 100 KB title came back whole in a 100 KB error that never named the
    # limit ("title: 'xxx…' is too long"), and list items read "options: {0: [...]}".
    resp = _api(live, "POST", "/agent/tools/todo_create", json={"project": "acme", "queue": "reviews",
                                                          "title": "x" * 100_000})
    error = resp.json()["structuredContent"]  # a tool result (MCP's shape), isError
    assert resp.json()["isError"] is True and error["code"] == "invalid_argument"
    assert error["message"] == "title: must be at most 300 characters (got 100000)"
    assert len(resp.content) < 2000
    # A review: type, enum and unknown-key errors still quoted the value (a secret in a wrong
    # field came back), and a 200 KB unknown key made a 200 KB REST error.
    for args, message in (({"limit": "SECRET" * 80}, "limit: must be a whole number"),
                          ({"state": "SECRET" * 80}, 'state: must be one of "pending", "claimed", "done", "failed", '
                                                     '"cancelled"'),
                          ({"SECRET" * 80: 1}, "arguments: unknown argument: " + ("SECRET" * 7)[:40])):
        error = _api(live, "POST", "/agent/tools/todo_list", json=args).json()["structuredContent"]
        assert error["message"] == message
    resp = _api(live, "POST", "/inbox/questions", json={"project": "acme", "title": "Merge?", "x" * 200_000: 1})
    assert resp.status_code == 400 and len(resp.content) < 2000
    resp = _api(live, "POST", "/inbox/questions", json={"project": "acme", "title": "Merge?", "options": [1, "no", 2]})
    assert resp.status_code == 400
    assert resp.json()["detail"] == "options[0]: Not a valid string.; options[2]: Not a valid string."


def test_other_methods_on_the_claim_route_are_405_not_a_missing_todo(live: LiveApp) -> None:
    # A new-user run: GET /api/v1/todos/claim read "claim" as a todo id: 404 "no such todo".
    for method in ("GET", "PUT", "DELETE"):
        resp = _api(live, method, "/todos/claim")
        _problem(resp, 405, "method_not_allowed")
        assert resp.headers["allow"] == "POST"
    resp = _api(live, "DELETE", "/todos")  # Flask's own 405s list the methods too
    _problem(resp, 405, "method_not_allowed")
    assert "GET" in resp.headers["allow"]
