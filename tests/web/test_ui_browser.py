"""The web UI in a real headless Chromium (Debian's ``chromium``, driven by Playwright).

Shown here: signing in through the link ``switchboard login`` prints, answering and approving,
releasing a quarantined delivery, the feed updating live after a webhook with no reload,
approving a friend request, and allowing a permission prompt whose verdict reaches a raw
JSON-RPC client of a real ``switchboard channel`` process. Each page is saved as a
PNG: into ``$SWITCHBOARD_SCREENSHOTS`` when set (``docs/screenshots`` refreshes the README's
pictures), else into the test's temporary folder.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from switchboard import admin
from switchboard.inbox import items as inbox_ops
from switchboard.models import Delivery, InboxItem
from switchboard.queue import todos
from tests.conftest import LiveApp, cli_env, switchboard_exe, wait_for
from tests.web.ui_support import linked_issue, own, stranger_delivery

CHROMIUM = os.environ.get("SWITCHBOARD_CHROMIUM", "/usr/bin/chromium")
TIMEOUT_MS = 15_000


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """A headless Chromium (the Debian package; Playwright never downloads a browser here)."""
    if not Path(CHROMIUM).exists() or shutil.which(CHROMIUM) is None:
        if os.environ.get("SWITCHBOARD_REQUIRE_SERVICES") == "1":
            pytest.fail(f"{CHROMIUM} is missing: apt-get install -y chromium (.ci/run does)")
        pytest.skip(f"{CHROMIUM} is missing: apt-get install -y chromium")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=["--no-sandbox"])
        try:
            yield b
        finally:
            b.close()


@pytest.fixture
def shots(tmp_path: Path) -> Path:
    """Where screenshots go."""
    folder = Path(os.environ.get("SWITCHBOARD_SCREENSHOTS") or tmp_path / "screenshots")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def _printed_link(live: LiveApp, human: str = "alice") -> str:
    """Run ``switchboard login HUMAN`` as a user would and take the link it prints."""
    env = cli_env(live.world.settings.home, SWITCHBOARD_PUBLIC_URL=live.url)
    out = subprocess.run([switchboard_exe(), "login", human], env=env, capture_output=True, text=True,
                         timeout=60, check=False)
    assert out.returncode == 0, out.stderr
    link = out.stdout.splitlines()[0].strip()
    assert link.startswith(f"{live.url}/ui/login/sbl_")
    return link


def _sign_in(browser: Any, live: LiveApp, shots: Path | None = None) -> Any:
    context = browser.new_context(viewport={"width": 1200, "height": 800})
    context.set_default_timeout(TIMEOUT_MS)
    page = context.new_page()
    page.goto(_printed_link(live))
    if shots is not None:
        page.screenshot(path=str(shots / "login.png"))
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url(f"{live.url}/ui/inbox")
    return page


def _ask(live: LiveApp) -> None:
    hub = live.hub
    with hub.db.write() as s:
        grants = admin.grants_of(s, live.world.agent_id)
        inbox_ops.post(s, hub.clock, agent_id=live.world.agent_id, grants=grants, kind="question", project="acme",
                       title="Which branch should the hotfix target?", body="main is frozen until Friday.",
                       options=["main", "release-2.4"])
        inbox_ops.post(s, hub.clock, agent_id=live.world.agent_id, grants=grants, kind="approval", project="acme",
                       title="Run the database migration on staging", expires_in_seconds=3600)


def test_sign_in_through_the_printed_link_and_answer(browser: Any, live: LiveApp, shots: Path) -> None:
    own(live)
    _ask(live)
    page = _sign_in(browser, live, shots)
    assert page.locator("h1").first.inner_text().startswith("Inbox")
    page.screenshot(path=str(shots / "inbox.png"), full_page=True)
    page.get_by_role("button", name="release-2.4").click()
    page.wait_for_url(f"{live.url}/ui/inbox")
    assert "release-2.4" in page.locator(".flash").inner_text()
    page.get_by_placeholder("Note for the agent (optional)").fill("staging only")
    page.get_by_role("button", name="Approve").click()
    page.wait_for_selector("text=Nothing waits on you.")
    assert "staging only" in page.locator("table").inner_text()
    # Sign out: the inbox is gone until the next link.
    page.get_by_role("button", name="Sign out").click()
    page.wait_for_url(f"{live.url}/ui/login")
    page.goto(f"{live.url}/ui/inbox")
    assert page.url == f"{live.url}/ui/login"


def test_release_a_quarantined_delivery(browser: Any, live: LiveApp, shots: Path) -> None:
    own(live)
    held = stranger_delivery(live, sender_id=4242)
    page = _sign_in(browser, live)
    page.goto(f"{live.url}/ui/quarantine")
    card = page.locator(f"article#{held}")
    assert "unknown_sender" in card.inner_text() and "4242" in card.inner_text()
    page.screenshot(path=str(shots / "quarantine.png"), full_page=True)
    card.get_by_label("answer for the sender myself").check()
    card.get_by_role("button", name="Release").click()
    page.wait_for_selector(".flash")
    assert f"Released {held}: processed" in page.locator(".flash").inner_text()
    assert page.locator(f"article#{held}").count() == 0
    with live.hub.db.read() as s:
        row = s.get(Delivery, held)
        assert row.status == "processed" and row.todo_id is not None and row.released_by is not None


def test_the_feed_updates_live_after_a_webhook(browser: Any, live: LiveApp, shots: Path) -> None:
    own(live)
    linked_issue(live, number=480)
    stranger_delivery(live, sender_id=31337)
    page = _sign_in(browser, live)
    page.goto(f"{live.url}/ui/feed")
    page.wait_for_selector("#feed-status[data-live=on]")
    before = page.locator("#feed li").count()
    linked_issue(live, number=482)
    # No reload: the EventSource nudge makes the page fetch the new rows.
    page.wait_for_selector("#feed li.new >> text=todo.created")
    assert page.locator("#feed li").count() > before
    assert page.evaluate("performance.getEntriesByType('navigation').length") == 1
    page.screenshot(path=str(shots / "feed.png"), full_page=True)


def test_a_feed_page_from_before_a_restore_reloads_and_goes_live(browser: Any, live: LiveApp) -> None:
    """A page left open while the hub's database was restored from an older backup holds a
    position past every feed id given: the stream answers ``event: restart`` and the page
    reloads, then updates live again (before, it showed "live" and ignored every nudge below
    its position). The first load is served with ``data-since`` 1,000,000, as that page had."""
    import re

    from playwright.sync_api import Error as PlaywrightError

    own(live)
    linked_issue(live, number=490)
    page = _sign_in(browser, live)
    stale: list[str] = []

    def from_before_the_restore(route: Any) -> None:
        if stale:
            route.continue_()
            return
        response = route.fetch()
        stale.append(response.url)
        route.fulfill(response=response, body=re.sub(r'data-since="\d+"', 'data-since="1000000"', response.text()))

    page.route(f"{live.url}/ui/feed", from_before_the_restore)
    page.goto(f"{live.url}/ui/feed")
    for _ in range(150):  # until the reload has rendered the page again (evaluate fails while it navigates)
        try:
            if page.evaluate("document.getElementById('feed').dataset.since") != "1000000":
                break
        except PlaywrightError:
            pass
        page.wait_for_timeout(100)
    page.wait_for_selector("#feed-status[data-live=on]")
    assert stale and page.evaluate("performance.getEntriesByType('navigation')[0].type") == "reload"
    linked_issue(live, number=491)
    page.wait_for_selector("#feed li.new >> text=todo.created")


def test_screenshots_of_todos_sources_and_agents(browser: Any, live: LiveApp, shots: Path) -> None:
    own(live)
    delivery = linked_issue(live, number=7)
    todo_id = wait_for(lambda: _todo_of(live, delivery))
    hub = live.hub
    with hub.db.write() as s:
        todos.create(s, hub.clock, project_id=live.world.project_id, queue="docs", kind="manual",
                     title="Document the release process", payload=None)
    stranger_delivery(live, sender_id=99)
    page = _sign_in(browser, live)
    page.goto(f"{live.url}/ui/todos")
    page.screenshot(path=str(shots / "todos.png"), full_page=True)
    page.goto(f"{live.url}/ui/todos/{todo_id}")
    assert "Payload" in page.content()
    page.screenshot(path=str(shots / "todo.png"), full_page=True)
    page.goto(f"{live.url}/ui/sources")
    page.locator("details summary").first.click()
    page.screenshot(path=str(shots / "sources.png"), full_page=True)
    page.get_by_label("Provider").select_option("github")
    page.get_by_role("button", name="Add source").click()
    page.wait_for_selector("text=Set up github")
    page.screenshot(path=str(shots / "source-created.png"), full_page=True)
    page.goto(f"{live.url}/ui/agents")
    page.screenshot(path=str(shots / "agents.png"), full_page=True)
    page.get_by_role("button", name="Vend a token").click()
    page.wait_for_selector("text=Shown once")
    snippet = page.locator("#snippet").input_value()
    assert f'"{live.hub.settings.public_url}"' in snippet and '"SWITCHBOARD_TOKEN": "sbk_' in snippet
    page.screenshot(path=str(shots / "token.png"), full_page=True)


def _todo_of(live: LiveApp, delivery_id: str) -> str | None:
    with live.hub.db.read() as s:
        row = s.get(Delivery, delivery_id)
        return row.todo_id if row is not None else None


def test_approve_a_friend_request(browser: Any, live: LiveApp, shots: Path) -> None:
    from switchboard.friends import requests as friend_requests
    from switchboard.models import FriendRequest, Friendship

    own(live)
    hub = live.hub
    with hub.db.write() as s:
        admin.add_human(s, "bob")
        asker = admin.add_agent(s, "bobbot", "bob")
        made = friend_requests.request(s, hub.clock, agent_id=asker.id, to_agent="claude1", queues=["acme/reviews"],
                                       reason="Bob's release checklist needs reviews from claude1")
    page = _sign_in(browser, live)
    card = page.locator(f"article#{made['inbox_item_id']}")
    text = card.inner_text()
    assert "bobbot" in text and "owned by bob" in text and "acme/reviews" in text and "release checklist" in text
    page.screenshot(path=str(shots / "inbox-friend.png"), full_page=True)
    card.get_by_role("button", name="Approve").click()
    page.wait_for_selector("text=Nothing waits on you.")
    with hub.db.read() as s:
        fr = s.get(FriendRequest, made["request_id"])
        assert (fr.status, fr.decided_via) == ("approved", "web")
        fs = s.execute(select(Friendship).where(Friendship.request_id == fr.id)).scalars().one()
        assert fs.approved_via == "web" and fs.queues == fr.queues


def test_allow_a_permission_prompt_and_the_verdict_reaches_the_adapter(browser: Any, live: LiveApp, shots: Path,
                                                                       tmp_path: Path) -> None:
    from tests.mcp_server.claude_like import PERMISSION, ClaudeLike

    own(live)
    claude = ClaudeLike(live.url, live.world.token, tmp_path / "adapter")
    try:
        init = claude.initialize()
        assert init["capabilities"]["experimental"] == {"claude/channel": {}, "claude/channel/permission": {}}
        claude.attached()
        claude.prompt("qwert", "Bash", "Run the test suite", '{"command": "pytest -q tests/"}')

        def item_id() -> str | None:
            with live.hub.db.read() as s:
                return s.execute(select(InboxItem.id).where(InboxItem.kind == "permission",
                                                            InboxItem.request_id == "qwert")).scalar()

        held = wait_for(item_id)
        page = _sign_in(browser, live)
        card = page.locator(f"article#{held}")
        text = card.inner_text()
        assert "qwert" in text and "Bash" in text and "Run the test suite" in text and "pytest -q tests/" in text
        page.screenshot(path=str(shots / "inbox-permission.png"), full_page=True)
        card.get_by_role("button", name="Allow").click()
        page.wait_for_selector("text=Nothing waits on you.")
        verdict = claude.wait_for(PERMISSION, request_id="qwert")
        assert verdict == {"request_id": "qwert", "behavior": "allow"}
        assert "allowed" in page.locator("table").inner_text() and ">web<" in page.content()
        assert len(claude.received(PERMISSION)) == 1
    finally:
        claude.close()
    assert claude.stdout_garbage == []


def test_the_doorbell_button_hears_a_real_adapter(browser: Any, live: LiveApp, shots: Path, tmp_path: Path) -> None:
    from tests.mcp_server.claude_like import ClaudeLike

    own(live)
    claude = ClaudeLike(live.url, live.world.token, tmp_path / "adapter")
    try:
        claude.initialize()
        claude.attached()
        page = _sign_in(browser, live)
        page.goto(f"{live.url}/ui/agents")
        assert "1 session attached" in page.locator("article#agent-claude1").inner_text()
        page.get_by_role("button", name="Test the doorbell").click()
        page.wait_for_selector("#verdict.verdict-unheard")
        wake = claude.wait_for("notifications/claude/channel")
        ring_id = wake["meta"]["ring_id"]
        assert ring_id in page.content()
        acked = claude.call("doorbell_ack", {"ring_id": ring_id})
        assert not acked.get("isError"), acked
        page.wait_for_selector("#verdict.verdict-heard", timeout=TIMEOUT_MS)  # the page refreshes itself
        assert page.locator("#verdict strong").inner_text() == "heard"
        page.screenshot(path=str(shots / "doorbell.png"), full_page=True)
    finally:
        claude.close()
