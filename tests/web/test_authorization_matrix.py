"""The authorisation matrix: every tool and every REST route × own project / other project / no grant /
read-only / revoked (issue 13, "shown by").

Driven from the tool catalogue (:data:`switchboard.mcp_server.tools.TOOLS`) and the routes the app
really serves (the Flask ``url_map`` and the Starlette routes), so a tool or route added later is
covered without editing this file. The rules checked for every entry:

1. **revoked** (and missing) credentials: 401 ``unauthenticated``, before anything else;
2. **no existence oracle**: naming another tenant's object (project, todo, secret ref, subscription,
   inbox item, agent, delivery) answers exactly like naming one that does not exist (status, code
   and message), or succeeds without showing any of that tenant's data;
3. **no grant** on a project behaves like another tenant's project (rule 2 against ``acme``);
4. **read-only**: a tool outside :data:`READ_TOOLS` never succeeds for an agent with ``read`` only
   (a new tool must be classified here: this is deliberate).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

import httpx2
import pytest
from sqlalchemy import select

from switchboard import admin, revocation
from switchboard.hub import Hub
from switchboard.inbox import items as inbox
from switchboard.intake import vault
from switchboard.intake.secrets import MintedRef
from switchboard.mcp_server.tools import TOOLS
from switchboard.models import Delivery, HumanToken
from switchboard.notify import subscriptions
from switchboard.queue import todos
from tests.conftest import LiveApp

READ_TOOLS = {"whoami", "todo_list", "todo_get", "todo_payload", "feed_read", "inbox_read", "inbox_wait", "notify_subscribe",
              "notify_unsubscribe", "friend_list", "doorbell_test", "doorbell_ack"}
"""Tools an agent with only ``read`` on a project may use successfully on it."""

OBJECT_ARGS = {"project": "project", "id": "todo", "todo_id": "todo", "ref": "ref",
               "subscription_id": "subscription", "item_id": "item", "request_id": "item", "to_agent": "agent",
               "agent": "agent", "delivery_id": "delivery", "name": "agent"}
"""Argument and path-parameter names that name an object, and which object."""

TOOL_OBJECT_ARGS = {"friend_respond": {"request_id": "friend_request"}}
"""Per-tool exceptions to :data:`OBJECT_ARGS` (``friend_respond.request_id`` is a ``fr_`` id, DESIGN.md §6.6)."""

CROSS_TENANT_BY_DESIGN = {"friend_request"}
"""Tools whose object argument names another human's agent on purpose (DESIGN.md §6.6: a friend
request is addressed to an agent of another human); they still must not leak that side's data."""

MARK = "ZZBOBMARKZZ"


@dataclass
class Tenancy:
    app: LiveApp
    tokens: dict[str, str]          # agent or human name -> token
    own: dict[str, str]             # objects of alice (acme)
    other: dict[str, str]           # objects of bob (bobs)
    missing: dict[str, str]         # well-formed names of nothing
    other_marks: list[str]          # strings of bob's data that must never show to alice's side
    own_marks: list[str]


@pytest.fixture
def tenancy(live: LiveApp) -> Tenancy:
    hub: Hub = live.hub
    world = live.world
    with hub.db.write() as s:
        admin.add_owner(s, "acme", "alice")
        for name, role in (("reader", "read"), ("nogrant", None), ("gone", "work")):
            admin.add_agent(s, name, "alice")
            if role:
                admin.grant(s, name, "acme", role)
        admin.add_human(s, "bob")
        bobs = admin.add_project(s, "bobs")
        admin.add_owner(s, "bobs", "bob")
        bob_agent = admin.add_agent(s, "bobagent", "bob")
        admin.grant(s, "bobagent", "bobs", "work")
        tokens = {n: admin.vend_token(s, n) for n in ("reader", "nogrant", "gone", "bobagent")}
        tokens["claude1"] = world.token
        tokens["alice"] = admin.vend_human_token(s, "alice")
        tokens["bob"] = admin.vend_human_token(s, "bob")
        tokens["gone_human"] = admin.vend_human_token(s, "alice")
        own_todo, _ = todos.create(s, hub.clock, project_id=world.project_id, queue="reviews", kind="manual",
                                   title="ZZALICEMARKZZ work", payload={"k": "ZZALICEMARKZZ"})
        bob_todo, _ = todos.create(s, hub.clock, project_id=bobs.id, queue="reviews", kind="manual",
                                   title=f"{MARK} work", payload={"k": MARK})
        ring = vault.load_key_ring(world.settings)
        own_ref, bob_ref = "sec_" + "a" * 32, "sec_" + "b" * 32
        vault.store(s, ring, world.project_id, None, [MintedRef(own_ref, "generic", "alice-secret-value")],
                    hub.clock.now())
        vault.store(s, ring, bobs.id, None, [MintedRef(bob_ref, "generic", f"{MARK}-secret")], hub.clock.now())
        own_sub = subscriptions.subscribe(s, hub.clock, world.agent_id, {world.project_id: "work"},
                                          ["todo.created"], "acme")["subscription_id"]
        bob_sub = subscriptions.subscribe(s, hub.clock, bob_agent.id, {bobs.id: "work"}, ["todo.created"],
                                          "bobs")["subscription_id"]
        own_item = inbox.post(s, hub.clock, agent_id=world.agent_id, grants={world.project_id: "work"},
                              kind="question", project="acme", title="ZZALICEMARKZZ q")["id"]
        bob_item = inbox.post(s, hub.clock, agent_id=bob_agent.id, grants={bobs.id: "work"}, kind="question",
                              project="bobs", title=f"{MARK} q")["id"]
        own_dlv = Delivery(source_id=world.source_id, project_id=world.project_id, status="quarantined",
                           raw_body=b"{}")
        bob_src, _ = admin.add_source(s, "bobs", "github", "bob-secret-123456")
        bob_dlv = Delivery(source_id=bob_src.id, project_id=bobs.id, status="quarantined", raw_body=b"{}")
        s.add_all([own_dlv, bob_dlv])
        s.flush()
        from switchboard.friends import requests as friends
        own_fr = friends.request(s, hub.clock, agent_id=bob_agent.id, to_agent="claude1", queues=["acme/reviews"],
                                 reason="help")["request_id"]
        bob_fr = friends.request(s, hub.clock, agent_id=world.agent_id, to_agent="bobagent", queues=["bobs/reviews"],
                                 reason="help")["request_id"]
        revocation.revoke_agent_tokens(s, hub.clock, "gone")
        alice_id = admin.human_by_name(s, "alice").id
        gone_human = s.execute(select(HumanToken.id).where(
            HumanToken.token_sha256 == admin.token_digest(tokens["gone_human"]))).scalar_one()
        revocation.revoke_human_tokens(s, hub.clock, alice_id, gone_human)
        own = {"project": "acme", "todo": own_todo.id, "ref": own_ref, "subscription": own_sub, "item": own_item,
               "agent": "claude1", "delivery": own_dlv.id, "friend_request": own_fr}
        other = {"project": "bobs", "todo": bob_todo.id, "ref": bob_ref, "subscription": bob_sub, "item": bob_item,
                 "agent": "bobagent", "delivery": bob_dlv.id, "friend_request": bob_fr}
    missing = {"project": "nosuchproj", "todo": "td_" + "0" * 22, "ref": "sec_" + "c" * 32,
               "subscription": "sub_" + "0" * 22, "item": "inb_" + "0" * 22, "agent": "nosuchagent",
               "delivery": "dlv_" + "0" * 22, "friend_request": "fr_" + "0" * 22}
    # Names the caller sends may be echoed back; these are what only bob's side could know.
    other_marks = [MARK, bobs.id]
    own_marks = ["ZZALICEMARKZZ", world.project_id, own_todo.id]
    return Tenancy(live, tokens, own, other, missing, other_marks, own_marks)


def _fill(schema: dict[str, Any], target: dict[str, str], tool: str = "") -> dict[str, Any]:
    """Arguments for a tool: object-naming properties from ``target``, required others minimal."""
    args: dict[str, Any] = {}
    required = set(schema.get("required", []))
    objects = {**OBJECT_ARGS, **TOOL_OBJECT_ARGS.get(tool, {})}
    for name, prop in schema.get("properties", {}).items():
        if name in objects:
            args[name] = target[objects[name]]
        elif name in required:
            args[name] = _sample(prop)
    return args


def _sample(prop: dict[str, Any]) -> Any:
    if "enum" in prop:
        return prop["enum"][0]
    kind = prop.get("type")
    if kind == "array":
        item = prop.get("items", {})
        return [] if prop.get("maxItems") == 0 else [_sample(item) if item else "x"]
    if kind == "integer":
        return prop.get("minimum", 1)
    if kind == "number":
        return 0
    if kind == "boolean":
        return False
    if kind == "object":
        return {}
    return "x" * max(1, prop.get("minLength", 1))


def _call(t: Tenancy, who: str, tool: str, args: dict[str, Any]) -> httpx2.Response:
    extra = {"wait_seconds": 0} if tool == "inbox_wait" else {}
    return httpx2.post(f"{t.app.url}/api/v1/agent/tools/{tool}", json={**args, **extra},
                       headers={"Authorization": f"Bearer {t.tokens[who]}"}, timeout=30)


def _outcome(r: httpx2.Response) -> tuple[Any, ...]:
    body = r.json()
    if r.status_code != 200:
        return (r.status_code, body.get("code"), body.get("detail"))
    if body.get("isError"):
        sc = body["structuredContent"]
        return (200, sc["code"], sc["message"])
    return (200, "ok")


def _leaks(r: httpx2.Response, marks: list[str]) -> list[str]:
    text = r.text
    return [m for m in marks if m in text]


def _object_tools() -> list[Any]:
    return [t for t in TOOLS if any(n in OBJECT_ARGS for n in t.input_schema.get("properties", {}))]


@pytest.mark.parametrize("tool", [t.name for t in TOOLS])
def test_every_tool_refuses_revoked_and_missing_tokens(tenancy: Tenancy, tool: str) -> None:
    spec = next(t for t in TOOLS if t.name == tool)
    args = _fill(spec.input_schema, tenancy.own, spec.name)
    r = _call(tenancy, "gone", tool, args)
    assert r.status_code == 401 and r.json()["code"] == "unauthenticated"
    r = httpx2.post(f"{tenancy.app.url}/api/v1/agent/tools/{tool}", json=args)
    assert r.status_code == 401


@pytest.mark.parametrize("who", ["claude1", "reader", "nogrant"])
def test_no_tool_tells_another_tenants_objects_from_missing_ones(tenancy: Tenancy, who: str) -> None:
    checked = 0
    for spec in _object_tools():
        other = _call(tenancy, who, spec.name, _fill(spec.input_schema, tenancy.other, spec.name))
        missing = _call(tenancy, who, spec.name, _fill(spec.input_schema, tenancy.missing, spec.name))
        assert not _leaks(other, tenancy.other_marks), (spec.name, other.text)
        if spec.name in CROSS_TENANT_BY_DESIGN:
            continue
        if _outcome(other) != (200, "ok") or _outcome(missing) != (200, "ok"):
            assert _outcome(other) == _outcome(missing), (spec.name, other.text, missing.text)
        checked += 1
    assert checked >= 10


def test_no_grant_on_a_project_is_like_another_tenants_project(tenancy: Tenancy) -> None:
    for spec in _object_tools():
        own = _call(tenancy, "nogrant", spec.name, _fill(spec.input_schema, tenancy.own, spec.name))
        missing = _call(tenancy, "nogrant", spec.name, _fill(spec.input_schema, tenancy.missing, spec.name))
        assert not _leaks(own, tenancy.own_marks), (spec.name, own.text)
        if spec.name in CROSS_TENANT_BY_DESIGN:  # naming one's own human's agent is refused as such, on purpose
            continue
        if _outcome(own) != (200, "ok") or _outcome(missing) != (200, "ok"):
            assert _outcome(own) == _outcome(missing), (spec.name, own.text, missing.text)


def test_read_only_agents_never_succeed_at_work(tenancy: Tenancy) -> None:
    for spec in TOOLS:
        r = _call(tenancy, "reader", spec.name, _fill(spec.input_schema, tenancy.own, spec.name))
        if spec.name in READ_TOOLS:
            continue
        assert _outcome(r)[:2] != (200, "ok"), f"{spec.name} succeeded for a read-only agent: {r.text}"
    # and reads do work for it
    r = _call(tenancy, "reader", "todo_get", {"id": tenancy.own["todo"]})
    assert _outcome(r) == (200, "ok")


def test_own_project_calls_work_for_the_working_agent(tenancy: Tenancy) -> None:
    for name, args in (("todo_get", {"id": tenancy.own["todo"]}), ("todo_list", {"project": "acme"}),
                       ("secret_fetch", {"ref": tenancy.own["ref"]}), ("todo_claim", {"id": tenancy.own["todo"]})):
        r = _call(tenancy, "claude1", name, args)
        assert _outcome(r) == (200, "ok"), r.text


# --- REST routes -------------------------------------------------------------------------------

def _routes(t: Tenancy) -> list[tuple[str, str]]:
    """(method, rule) for every API route the app serves, Flask and Starlette alike."""
    from starlette.routing import Mount, Route

    from switchboard.web.guard import PUBLIC_PATHS

    out: list[tuple[str, str]] = []
    starlette_app = _starlette_app(t)
    for route in starlette_app.routes:
        if isinstance(route, Route) and route.path.startswith("/api/") and route.path not in PUBLIC_PATHS:
            for method in sorted((route.methods or {"GET"}) - {"HEAD", "OPTIONS"}):
                out.append((method, re.sub(r"\{(\w+)\}", r"<\1>", route.path)))
        elif isinstance(route, Mount):
            flask_app = route.app.app  # a2wsgi.WSGIMiddleware(flask)
            for rule in flask_app.url_map.iter_rules():
                if rule.rule.startswith("/api/") and rule.rule not in PUBLIC_PATHS:
                    for method in sorted((rule.methods or set()) - {"HEAD", "OPTIONS"}):
                        out.append((method, rule.rule))
    out.append(("POST", "/mcp"))
    out.append(("GET", "/mcp"))
    return out


def _starlette_app(t: Tenancy) -> Any:
    return _APPS[id(t.app.hub)]


_APPS: dict[int, Any] = {}


@pytest.fixture(autouse=True)
def _remember_app(monkeypatch: pytest.MonkeyPatch) -> None:
    """Keep the Starlette app each live hub belongs to (the route table is read from it)."""
    from switchboard.web import asgi

    original = asgi.create_app

    def recording(*args: Any, **kwargs: Any) -> Any:
        app = original(*args, **kwargs)
        _APPS[id(app.state.hub)] = app
        return app

    monkeypatch.setattr(asgi, "create_app", recording)


ACTIONS = {"/api/v1/todos/<todo_id>/<action>": "claim", "/api/v1/human/todos/<todo_id>/<action>": "cancel",
           "/api/v1/human/quarantine/<delivery_id>/<action>": "discard"}
STREAMS = ("/api/v1/agent/stream", "/mcp", "/api/v1/stream")
TOOL_ROUTE = "/api/v1/agent/tools/<name>"  # <name> is a tool: covered tool by tool above
SELF_ONLY = {"/api/v1/human/tokens/revoke"}  # names no object: acts on the caller (tests/test_revocation.py)


def _path(rule: str, target: dict[str, str]) -> str:
    def sub(m: re.Match[str]) -> str:
        name = m.group(1).split(":")[-1]
        if name == "action":
            return ACTIONS.get(rule, "x")
        if name in OBJECT_ARGS:
            return target[OBJECT_ARGS[name]]
        return "x"

    return re.sub(r"<([^>]+)>", sub, rule)


def _request(t: Tenancy, method: str, rule: str, who: str | None, target: dict[str, str]) -> httpx2.Response:
    headers = {"Authorization": f"Bearer {t.tokens[who]}"} if who else {}
    path = _path(rule, target)
    params = {} if "<" in rule or method != "GET" else {"project": target["project"]}
    if rule == "/api/v1/inbox/wait":
        params["wait_seconds"] = "0"
    if rule in STREAMS and method == "GET":
        with httpx2.stream(method, t.app.url + path, headers=headers, timeout=10) as r:
            r.read() if r.status_code != 200 else None
            return r
    return httpx2.request(method, t.app.url + path, headers=headers, params=params, timeout=30,
                          content=b"{}" if method in ("POST", "PUT", "PATCH") else None)


def test_the_route_table_is_read_from_the_app(tenancy: Tenancy) -> None:
    routes = _routes(tenancy)
    assert ("POST", "/api/v1/human/todos") in routes and ("POST", "/api/v1/agent/tools/<name>") in routes
    assert len(routes) >= 25


def test_every_route_refuses_missing_and_revoked_tokens(tenancy: Tenancy) -> None:
    for method, rule in _routes(tenancy):
        for who in (None, "gone", "gone_human"):
            r = _request(tenancy, method, rule, who, tenancy.own)
            assert r.status_code == 401, (method, rule, who, r.status_code)


def test_no_route_tells_another_tenants_objects_from_missing_ones(tenancy: Tenancy) -> None:
    for method, rule in _routes(tenancy):
        if rule in STREAMS or rule == TOOL_ROUTE or rule in SELF_ONLY:
            continue
        for who in (("alice",) if "/human/" in rule else ("claude1", "reader", "nogrant")):
            other = _request(tenancy, method, rule, who, tenancy.other)
            missing = _request(tenancy, method, rule, who, tenancy.missing)
            assert not _leaks(other, tenancy.other_marks), (method, rule, who, other.text)
            if other.status_code >= 300 or missing.status_code >= 300:
                o, m = other.json(), missing.json()
                assert (other.status_code, o.get("code"), o.get("detail")) == \
                    (missing.status_code, m.get("code"), m.get("detail")), (method, rule, who, o, m)


def test_an_agent_token_is_not_a_human_token_and_back(tenancy: Tenancy) -> None:
    for method, rule in _routes(tenancy):
        from switchboard.web.guard import HUMAN_PATHS

        human = rule.startswith(HUMAN_PATHS)
        if rule in STREAMS and not human:  # an agent stream would stay open for a human token's 401 test
            continue
        who = "claude1" if human else "alice"
        r = _request(tenancy, method, rule, who, tenancy.own)
        assert r.status_code == 401, (method, rule, r.status_code, r.text)


def test_the_same_tool_over_mcp_refuses_a_revoked_token(tenancy: Tenancy) -> None:
    init = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}
    r = httpx2.post(f"{tenancy.app.url}/mcp", json=init, headers={"Authorization": f"Bearer {tenancy.tokens['gone']}",
                                                                   "Accept": "application/json, text/event-stream"})
    assert r.status_code == 401 and json.loads(r.text)["code"] == "unauthenticated"
