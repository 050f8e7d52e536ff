"""Helpers for the web UI tests: sign in over HTTP, read CSRF tokens, make held deliveries."""

from __future__ import annotations

import json
import re

import httpx2

from switchboard import admin
from switchboard.web import logins
from tests.conftest import CASES, LiveApp, github_headers, wait_for

_CSRF = re.compile(r'name="csrf_token" value="([^"]+)"')


def login_url(live: LiveApp, human: str = "alice") -> str:
    """A fresh one-time login link for ``human`` (what ``switchboard login`` prints)."""
    with live.hub.db.write() as s:
        token = logins.create_link(s, live.hub.clock, human)
    return logins.link_url(live.hub.settings, token)


def csrf(page: httpx2.Response) -> str:
    """The CSRF token of the first form on ``page``."""
    match = _CSRF.search(page.text)
    assert match, f"no CSRF token on {page.url}"
    return match.group(1)


def signed_in(live: LiveApp, human: str = "alice") -> httpx2.Client:
    """An HTTP client whose cookie jar holds a live web session of ``human``."""
    client = httpx2.Client(base_url=live.url, follow_redirects=False, timeout=30)
    url = login_url(live, human)
    page = client.get(url)
    assert page.status_code == 200, page.text
    done = client.post(url, data={"csrf_token": csrf(page)})
    assert done.status_code == 303 and done.headers["location"] == "/ui/inbox", done.text
    return client


def post_form(client: httpx2.Client, page_path: str, action: str, data: dict[str, str] | None = None) -> httpx2.Response:
    """Load ``page_path`` for its CSRF token, then POST ``data`` to ``action`` as its form would."""
    token = csrf(client.get(page_path))
    return client.post(action, data={"csrf_token": token, **(data or {})})


def add_human(live: LiveApp, name: str, project: str | None = None) -> None:
    """A second human, owning ``project`` (created) when given."""
    with live.hub.db.write() as s:
        admin.add_human(s, name)
        if project is not None:
            admin.add_project(s, project)
            admin.add_owner(s, project, name)


def own(live: LiveApp, project: str = "acme", human: str = "alice") -> None:
    """Make ``human`` an owner of ``project``."""
    with live.hub.db.write() as s:
        admin.add_owner(s, project, human)


def stranger_delivery(live: LiveApp, sender_id: int = 777, number: int = 1) -> str:
    """Post a signed GitHub issue from an unlinked account; return the delivery id once held."""
    body_json = json.loads((CASES / "github" / "issues.opened.json").read_bytes())
    body_json["sender"]["id"] = sender_id
    body_json["issue"]["number"] = number
    body = json.dumps(body_json).encode()
    delivery_id = live.post_hook(body, github_headers(body, live.world.secret)).json()["delivery_id"]
    from switchboard.models import Delivery

    def held() -> bool:
        with live.hub.db.read() as s:
            row = s.get(Delivery, delivery_id)
            return row is not None and row.status == "quarantined"

    wait_for(held)
    return delivery_id


def linked_issue(live: LiveApp, number: int = 5) -> str:
    """Post a signed GitHub issue from alice's linked account; return the delivery id."""
    body_json = json.loads((CASES / "github" / "issues.opened.json").read_bytes())
    body_json["issue"]["number"] = number
    body = json.dumps(body_json).encode()
    return live.post_hook(body, github_headers(body, live.world.secret)).json()["delivery_id"]
