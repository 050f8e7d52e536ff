"""The web UI over real HTTP: sign-in, sessions, CSRF, scoping to the human's own projects,
and the actions (the same domain functions as REST and the CLI)."""

from __future__ import annotations

import httpx2
import pytest
from sqlalchemy import func, select

from switchboard import admin
from switchboard.inbox import items as inbox_ops
from switchboard.models import Delivery, InboxItem, Todo, Token
from switchboard.queue import todos
from tests.conftest import LiveApp
from tests.web.ui_support import (
    add_human,
    csrf,
    linked_issue,
    login_url,
    own,
    post_form,
    signed_in,
    stranger_delivery,
)

PAGES = ["/ui/inbox", "/ui/quarantine", "/ui/todos", "/ui/feed", "/ui/sources", "/ui/agents"]


def test_login_link_signs_in_once_with_a_hardened_cookie(live: LiveApp) -> None:
    client = httpx2.Client(base_url=live.url, follow_redirects=False, timeout=30)
    url = login_url(live)
    assert url.startswith(f"{live.hub.settings.public_url}/ui/login/sbl_")
    page = client.get(url)
    assert page.status_code == 200 and "Sign in" in page.text
    done = client.post(url, data={"csrf_token": csrf(page)})
    assert done.status_code == 303 and done.headers["location"] == "/ui/inbox"
    cookie = done.headers["set-cookie"]
    assert cookie.startswith("switchboard_session=")
    assert "HttpOnly" in cookie and "SameSite=Lax" in cookie and "Secure" not in cookie
    assert client.get("/ui/inbox").status_code == 200
    # The same link again, from another browser with its own CSRF token: refused.
    other = httpx2.Client(base_url=live.url, follow_redirects=False, timeout=30)
    again = other.get(url)
    assert again.status_code == 401 and "unknown, used or expired" in again.text
    token = csrf(other.get(login_url(live)))  # a valid form token of this browser
    assert other.post(url, data={"csrf_token": token}).status_code == 401


def test_pages_without_a_session_redirect_to_the_login_explanation(live: LiveApp) -> None:
    client = httpx2.Client(base_url=live.url, follow_redirects=False, timeout=30)
    for path in [*PAGES, "/ui/", "/ui/todos/td_nothing", "/ui/feed/rows?after=0"]:
        r = client.get(path)
        assert r.status_code in (303, 308) and r.headers["location"].endswith("/ui/login"), path
    explained = client.get("/ui/login")
    assert explained.status_code == 200 and "switchboard login YOUR_NAME" in explained.text
    token = csrf(client.get(login_url(live)))
    r = client.post("/ui/todos", data={"csrf_token": token, "project": "acme", "title": "x"})
    assert r.status_code == 303 and r.headers["location"] == "/ui/login"
    with live.hub.db.read() as s:
        assert s.execute(select(func.count()).select_from(Todo)).scalar() == 0


def test_every_form_needs_its_csrf_token(live: LiveApp) -> None:
    own(live)
    client = signed_in(live)
    for action in ["/ui/todos", "/ui/logout", "/ui/sources", "/ui/quarantine/dlv_x/discard"]:
        r = client.post(action, data={"title": "x"})
        assert r.status_code == 400 and "csrf_failed" in r.text, action
        r = client.post(action, data={"title": "x", "csrf_token": "forged"})
        assert r.status_code == 400, action
    with live.hub.db.read() as s:
        assert s.execute(select(func.count()).select_from(Todo)).scalar() == 0
    assert client.get("/ui/inbox").status_code == 200  # still signed in


def test_logout_ends_the_session_even_for_a_copied_cookie(live: LiveApp) -> None:
    client = signed_in(live)
    copied = dict(client.cookies)
    r = post_form(client, "/ui/inbox", "/ui/logout")
    assert r.status_code == 303 and r.headers["location"] == "/ui/login"
    thief = httpx2.Client(base_url=live.url, cookies=copied, follow_redirects=False, timeout=30)
    assert thief.get("/ui/inbox").status_code == 303


def test_every_page_renders_for_a_signed_in_owner(live: LiveApp) -> None:
    own(live)
    client = signed_in(live)
    for path in PAGES:
        r = client.get(path)
        assert r.status_code == 200 and "alice" in r.text, path
        assert r.headers["cache-control"] == "no-store" and r.headers["x-frame-options"] == "DENY"
    sources = client.get("/ui/sources").text
    assert f"{live.hub.settings.public_url}/hooks/{live.world.source_id}" in sources
    assert live.world.secret not in sources


def test_answers_and_decisions_take_the_inbox_code_path(live: LiveApp) -> None:
    hub = live.hub
    with hub.db.write() as s:
        grants = admin.grants_of(s, live.world.agent_id)
        q = inbox_ops.post(s, hub.clock, agent_id=live.world.agent_id, grants=grants, kind="question",
                           project="acme", title="Ship it?", options=["yes", "no"])
        a = inbox_ops.post(s, hub.clock, agent_id=live.world.agent_id, grants=grants, kind="approval",
                           project="acme", title="Deploy to prod")
    client = signed_in(live)
    page = client.get("/ui/inbox").text
    assert "Ship it?" in page and "Deploy to prod" in page
    bad = post_form(client, "/ui/inbox", f"/ui/inbox/{q['id']}/answer", {"answer": "maybe"})
    assert bad.status_code == 400 and "invalid_argument" in bad.text
    assert post_form(client, "/ui/inbox", f"/ui/inbox/{q['id']}/answer", {"answer": "yes"}).status_code == 303
    assert post_form(client, "/ui/inbox", f"/ui/inbox/{a['id']}/decide",
                     {"decision": "deny", "note": "not today"}).status_code == 303
    twice = post_form(client, "/ui/inbox", f"/ui/inbox/{a['id']}/decide", {"decision": "approve"})
    assert twice.status_code == 409 and "conflict" in twice.text
    with hub.db.read() as s:
        qi, ai = s.get(InboxItem, q["id"]), s.get(InboxItem, a["id"])
        assert (qi.answer, qi.resolved_via) == ("yes", "web")
        assert (ai.decision, ai.note, ai.resolved_via) == ("deny", "not today", "web")
    decided = client.get("/ui/inbox").text
    assert "Recently decided" in decided and "not today" in decided and ">web<" in decided


def test_a_human_sees_and_touches_only_their_own_projects(live: LiveApp) -> None:
    """alice owns acme; bob owns nothing there: every acme id is not_found for him, as over REST."""
    own(live)
    add_human(live, "bob", project="bobs")
    hub = live.hub
    held = stranger_delivery(live)
    with hub.db.write() as s:
        todo, _ = todos.create(s, hub.clock, project_id=live.world.project_id, queue="q", kind="manual",
                               title="alice's secret plan", payload=None)
        grants = admin.grants_of(s, live.world.agent_id)
        item = inbox_ops.post(s, hub.clock, agent_id=live.world.agent_id, grants=grants, kind="approval",
                              project="acme", title="alice's approval")
    bob = signed_in(live, "bob")
    for path in PAGES:
        text = bob.get(path).text
        assert "alice&#39;s secret plan" not in text and "alice's approval" not in text
        assert held not in text and live.world.source_id not in text and "claude1" not in text
    assert "alice" not in bob.get("/ui/feed/rows?after=0").text
    assert bob.get(f"/ui/todos/{todo.id}").status_code == 404
    assert bob.get("/ui/todos?project=acme").status_code == 404
    for action, data in [
        (f"/ui/todos/{todo.id}/cancel", {}), (f"/ui/quarantine/{held}/release", {"as_self": "1"}),
        (f"/ui/quarantine/{held}/discard", {}), (f"/ui/quarantine/{held}/link", {"human": "bob"}),
        (f"/ui/inbox/{item['id']}/decide", {"decision": "approve"}),
        (f"/ui/sources/{live.world.source_id}/rotate", {}), ("/ui/agents/claude1/tokens", {}),
        (f"/ui/sources/{live.world.source_id}/todo-events", {"todo_events": "none"}),
        ("/ui/agents/claude1/doorbell", {}),
        ("/ui/todos", {"project": "acme", "title": "sneaky"}),
        ("/ui/sources", {"project": "acme", "provider": "github"}),
    ]:
        r = post_form(bob, "/ui/inbox", action, data)
        assert r.status_code == 404 and "not_found" in r.text, action
    with hub.db.read() as s:
        assert s.get(Todo, todo.id).state == "pending"
        assert s.get(Delivery, held).status == "quarantined"
        assert s.get(InboxItem, item["id"]).status == "open"
        assert s.execute(select(func.count()).select_from(Token)).scalar() == 1


def test_quarantine_link_release_and_discard(live: LiveApp) -> None:
    own(live)
    first, second = stranger_delivery(live, 777, 1), stranger_delivery(live, 778, 2)
    client = signed_in(live)
    page = client.get("/ui/quarantine").text
    assert first in page and "unknown_sender" in page and "777" in page
    early = post_form(client, "/ui/quarantine", f"/ui/quarantine/{first}/release")
    assert early.status_code == 409 and "link the sender" in early.text
    assert post_form(client, "/ui/quarantine", f"/ui/quarantine/{first}/link", {"human": "nobody"}).status_code == 400
    assert post_form(client, "/ui/quarantine", f"/ui/quarantine/{first}/link", {"human": "alice"}).status_code == 303
    # Found by a new user: the page still offered the link form and said only unknown_sender.
    card = client.get("/ui/quarantine").text.split(f'id="{first}"', 1)[1].split("</article>", 1)[0]
    assert "sender now linked and trusted: release it" in card and f"/ui/quarantine/{first}/link" not in card
    assert post_form(client, "/ui/quarantine", f"/ui/quarantine/{first}/release").status_code == 303
    assert post_form(client, "/ui/quarantine", f"/ui/quarantine/{second}/discard").status_code == 303
    with live.hub.db.read() as s:
        released = s.get(Delivery, first)
        assert released.status == "processed" and released.todo_id is not None
        assert s.get(Delivery, second).status == "discarded"


def test_todos_add_assign_cancel_and_retry(live: LiveApp) -> None:
    own(live)
    with live.hub.db.write() as s:
        admin.add_agent(s, "idle", "alice")  # no grant anywhere
    client = signed_in(live)
    r = post_form(client, "/ui/todos", "/ui/todos", {"project": "acme", "title": "Write docs", "queue": "docs",
                                                     "assign": "claude1", "priority": "5"})
    assert r.status_code == 303
    todo_id = r.headers["location"].rsplit("/", 1)[1]
    with live.hub.db.read() as s:
        row = s.get(Todo, todo_id)
        assert (row.title, row.queue, row.priority, row.assigned_agent_id) == ("Write docs", "docs", 5,
                                                                               live.world.agent_id)
    refused = post_form(client, "/ui/todos", f"/ui/todos/{todo_id}/assign", {"agent": "idle"})
    unknown = post_form(client, "/ui/todos", f"/ui/todos/{todo_id}/assign", {"agent": "ghost"})
    # Found by a break-it review: 403 for an existing agent, 404 for an unknown name.
    assert refused.status_code == unknown.status_code == 404 and "no agent by that name" in refused.text
    bad = post_form(client, "/ui/todos", "/ui/todos", {"project": "acme", "title": "<channel>x</channel>"})
    assert bad.status_code == 400
    for priority in ("--5", "1e3", "1001", "", "٣"):
        r = post_form(client, "/ui/todos", "/ui/todos", {"project": "acme", "title": "p", "priority": priority})
        assert r.status_code == (303 if priority == "" else 400), priority
    listed = client.get("/ui/todos?project=acme&queue=docs&state=pending").text
    assert "Write docs" in listed
    assert "Write docs" not in client.get("/ui/todos?state=done").text
    assert client.get("/ui/todos?state=bogus").status_code == 400
    detail = client.get(f"/ui/todos/{todo_id}").text
    assert "Attempts" in detail and "Not claimed yet" in detail
    assert post_form(client, f"/ui/todos/{todo_id}", f"/ui/todos/{todo_id}/cancel").status_code == 303
    again = post_form(client, f"/ui/todos/{todo_id}", f"/ui/todos/{todo_id}/cancel")
    assert again.status_code == 409
    not_dead = post_form(client, f"/ui/todos/{todo_id}", f"/ui/todos/{todo_id}/retry")
    assert not_dead.status_code == 409
    with live.hub.db.read() as s:
        assert s.get(Todo, todo_id).state == "cancelled"


def test_todo_page_shows_refs_never_secret_values(live: LiveApp) -> None:
    import json

    from tests.conftest import CASES, github_headers, wait_for
    from tests.intake.planted_secrets import corpus

    own(live)
    token = next(p.value for p in corpus(seed=11) if p.fmt == "github_pat_classic")
    issue = json.loads((CASES / "github" / "issues.opened.json").read_bytes())
    issue["issue"]["body"] = f"CI broke, I pasted {token} in the logs"
    body = json.dumps(issue).encode()
    delivery_id = live.post_hook(body, github_headers(body, live.world.secret)).json()["delivery_id"]

    def todo_id() -> str | None:
        with live.hub.db.read() as s:
            return s.get(Delivery, delivery_id).todo_id

    made = wait_for(todo_id)
    client = signed_in(live)
    page = client.get(f"/ui/todos/{made}").text
    assert token not in page and "sec_" in page and "CI broke, I pasted" in page


def test_sources_create_rotate_and_agents_vend_and_revoke(live: LiveApp) -> None:
    own(live)
    client = signed_in(live)
    made = post_form(client, "/ui/sources", "/ui/sources", {"project": "acme", "provider": "gitea", "queue": "forge"})
    assert made.status_code == 200 and "Set up gitea" in made.text and "Target URL" in made.text
    assert "Secret (shown once)" in made.text
    own_key = post_form(client, "/ui/sources", "/ui/sources", {"project": "acme", "provider": "slack"})
    assert own_key.status_code == 400 and "issues its own key" in own_key.text
    rotated = post_form(client, "/ui/sources", f"/ui/sources/{live.world.source_id}/rotate", {"keep_old_for": "1h"})
    assert rotated.status_code == 200 and "stay valid until" in rotated.text
    bad = post_form(client, "/ui/sources", f"/ui/sources/{live.world.source_id}/rotate", {"keep_old_for": "soon"})
    assert bad.status_code == 400
    vended = post_form(client, "/ui/agents", "/ui/agents/claude1/tokens")
    assert vended.status_code == 200
    import re

    token = re.search(r"sbk_[A-Za-z0-9_-]{43}", vended.text).group(0)
    assert f"&#34;{live.hub.settings.public_url}&#34;" in vended.text  # the real URL in the .mcp.json snippet
    me = httpx2.get(f"{live.url}/api/v1/whoami", headers={"Authorization": f"Bearer {token}"})
    assert me.status_code == 200
    with live.hub.db.read() as s:
        token_id = s.execute(select(Token.id).where(Token.token_sha256 == admin.token_digest(token))).scalar_one()
    assert post_form(client, "/ui/agents", f"/ui/agents/claude1/tokens/{token_id}/revoke").status_code == 303
    gone = httpx2.get(f"{live.url}/api/v1/whoami", headers={"Authorization": f"Bearer {token}"})
    assert gone.status_code == 401
    assert post_form(client, "/ui/agents", f"/ui/agents/claude1/tokens/{token_id}/revoke").status_code == 404
    linked_issue(live)
    page = client.get("/ui/sources").text
    assert "Recent deliveries" in page and 'value="default"' in page
    src = live.world.source_id
    assert post_form(client, "/ui/sources", f"/ui/sources/{src}/todo-events", {"todo_events": "issues.opened"}).status_code == 303
    assert post_form(client, "/ui/sources", f"/ui/sources/{src}/todo-events", {"todo_events": "bad kind!"}).status_code == 400
    from switchboard.models import Source

    with live.hub.db.read() as s:
        assert s.get(Source, src).todo_events == ["issues.opened"]


@pytest.mark.parametrize("path", ["/ui/feed/rows?after=x", "/ui/feed/rows", "/ui/feed/rows?after=%C2%B2"])
def test_feed_rows_reject_a_bad_position(live: LiveApp, path: str) -> None:
    client = signed_in(live)
    assert client.get(path).status_code == 400


def test_a_prompt_decided_elsewhere_shows_who_and_how_and_refuses_a_second_verdict(live: LiveApp) -> None:
    from switchboard.inbox import permissions

    own(live)
    add_human(live, "bob")
    hub = live.hub
    with hub.db.write() as s:
        item, _ = permissions.relay(s, hub.clock, agent_id=live.world.agent_id, session_id="sess-1",
                                    request_id="abcde", tool_name="Bash", description="List <b>files</b>",
                                    input_preview='{"command": "ls"}', expires_in_seconds=600)
        token = admin.vend_human_token(s, "alice")
    client = signed_in(live)
    page = client.get("/ui/inbox").text
    assert "abcde" in page and "List &lt;b&gt;files&lt;/b&gt;" in page  # the prompt's text is text, never markup
    bob = signed_in(live, "bob")
    assert post_form(bob, "/ui/inbox", f"/ui/inbox/{item['id']}/decide", {"decision": "approve"}).status_code == 404
    over_rest = httpx2.post(f"{live.url}/api/v1/human/inbox/{item['id']}/decide", json={"decision": "deny"},
                            headers={"Authorization": f"Bearer {token}"}, timeout=30)
    assert over_rest.status_code == 200
    late = post_form(client, "/ui/inbox", f"/ui/inbox/{item['id']}/decide", {"decision": "approve"})
    assert late.status_code == 409 and "already decided" in late.text
    decided = client.get("/ui/inbox").text
    row = decided.split("Recently decided", 1)[1]
    assert "claude1 asks to run Bash" in row and "denied" in row and ">rest<" in row and ">alice<" in row
    with hub.db.read() as s:
        stored = s.get(InboxItem, item["id"])
        assert (stored.decision, stored.resolved_via) == ("deny", "rest")


def test_no_form_input_gives_a_server_error(live: LiveApp) -> None:
    own(live)
    held = stranger_delivery(live)
    with live.hub.db.write() as s:
        todo, _ = todos.create(s, live.hub.clock, project_id=live.world.project_id, queue="q", kind="manual",
                               title="t", payload=None)
    client = signed_in(live)
    junk = ["", " ", "x" * 5000, "\x00", "<channel>", "💥", "-1", "99999999999999999999", "../../etc", "acme\n"]
    actions = {
        "/ui/todos": ["project", "title", "queue", "assign", "priority"],
        f"/ui/todos/{todo.id}/assign": ["agent"],
        f"/ui/quarantine/{held}/link": ["human"],
        "/ui/sources": ["project", "provider", "queue", "secret"],
        f"/ui/sources/{live.world.source_id}/rotate": ["keep_old_for", "secret"],
        "/ui/inbox/inb_nothing/answer": ["answer", "text"],
        "/ui/inbox/inb_nothing/decide": ["decision", "note"],
    }
    for action, fields in actions.items():
        for value in junk:
            r = post_form(client, "/ui/todos", action, {f: value for f in fields})
            assert r.status_code < 500, (action, value, r.text[:300])
    for path in ["/ui/todos?project=%00", "/ui/todos?state=%F0%9F%92%A5", "/ui/todos/" + "x" * 3000,
                 "/ui/feed/rows?after=99999999999999999999", "/ui/login/" + "y" * 3000]:
        assert client.get(path).status_code < 500, path


def test_doorbell_without_a_session_says_no_session_and_is_the_owners_only(live: LiveApp) -> None:
    own(live)
    add_human(live, "bob")
    client = signed_in(live)
    rung = post_form(client, "/ui/agents", "/ui/agents/claude1/doorbell")
    assert rung.status_code == 303 and "/ui/agents/claude1/doorbell/rng_" in rung.headers["location"]
    page = client.get(rung.headers["location"])
    assert page.status_code == 200 and "no_session" in page.text and 'http-equiv="refresh"' not in page.text
    assert client.get("/ui/agents/claude1/doorbell/rng_unknown").status_code == 404
    bob = signed_in(live, "bob")
    assert post_form(bob, "/ui/inbox", "/ui/agents/claude1/doorbell").status_code == 404
    assert bob.get(rung.headers["location"]).status_code == 404
