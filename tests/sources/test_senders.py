"""Who sent a forge delivery: the stable id, the host as workspace, the login, the bot flag
(DESIGN.md §1, §5; mutation testing, issue 17). Attribution keys on these, never on a login."""

from __future__ import annotations

import json
from typing import Any

import pytest

from switchboard.sources import Sender, adapter_for
from tests.signers import sign


def _sender(provider: str, p: dict[str, Any], event: str = "issues") -> Sender | None:
    body = json.dumps(p).encode()
    headers = {k.lower(): v for k, v in sign(provider, body, event=event).items()}
    return adapter_for(provider).parse(body, headers).sender


@pytest.mark.parametrize("provider", ["gitea", "forgejo"])
def test_gitea_sender_host_login_and_bot_flag(provider: str) -> None:
    base = {"action": "opened", "issue": {"number": 1, "title": "t"}}
    s = _sender(provider, {**base, "repository": {"html_url": "https://git.example.org/a/b"},
                           "sender": {"id": 7, "login": "ann", "html_url": "https://other.example/ann"}})
    assert s == Sender(provider, "git.example.org", "7", "ann", is_bot=False)
    # No repository: the host comes from the sender's profile URL.
    s = _sender(provider, {**base, "sender": {"id": 7, "login": "ann", "html_url": "https://codeberg.org/ann"}})
    assert s is not None and s.workspace == "codeberg.org"
    s = _sender(provider, {**base, "sender": {"id": 9, "login": "ci", "type": "Bot"},
                           "repository": {"html_url": "https://git.example.org/a/b"}})
    assert s is not None and s.is_bot is True and s.login == "ci"
    assert _sender(provider, {**base, "sender": {"login": "ann"}}) is None


def test_gitlab_sender_host_login_and_bot_names() -> None:
    base = {"object_kind": "issue", "event_type": "issue", "object_attributes": {"iid": 1, "title": "t"}}
    s = _sender("gitlab", {**base, "user": {"id": 4, "username": "gl"},
                           "project": {"web_url": "https://gitlab.example.com/acme/api"}}, "Issue Hook")
    assert s == Sender("gitlab", "gitlab.example.com", "4", "gl", is_bot=False)
    s = _sender("gitlab", {**base, "user_id": 5, "user_username": "project_12_bot_3f2a",
                           "repository": {"homepage": "https://gl.example.net/acme/api"}}, "Push Hook")
    assert s is not None and (s.workspace, s.external_id, s.login, s.is_bot) == (
        "gl.example.net", "5", "project_12_bot_3f2a", True)
    s = _sender("gitlab", {**base, "user": {"id": 6, "username": "project_manager"},
                           "project": {"web_url": "https://gitlab.com/a/b"}}, "Issue Hook")
    assert s is not None and s.is_bot is False  # "project_" alone is a person's name
    assert _sender("gitlab", {**base, "user": {"username": "gl"}}, "Issue Hook") is None


def test_github_sender_login_and_account_types() -> None:
    base = {"action": "opened", "issue": {"number": 1, "title": "t"}, "repository": {"full_name": "a/b"}}
    assert _sender("github", {**base, "sender": {"id": 21031067, "login": "Codertocat", "type": "User"}}) == Sender(
        "github", "", "21031067", "Codertocat", is_bot=False)
    assert _sender("github", {**base, "sender": {"id": 1, "login": 5}}) == Sender("github", "", "1", None, is_bot=False)
    for kind in ("Bot", "Organization", "Mannequin"):
        s = _sender("github", {**base, "sender": {"id": 2, "login": "x", "type": kind}})
        assert s is not None and s.is_bot is True
    for bad in ({"id": 0}, {"id": -3}, {"id": True}, {"id": "12"}, "octo"):
        assert _sender("github", {**base, "sender": bad}) is None
