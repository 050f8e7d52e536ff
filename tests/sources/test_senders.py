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


def test_gitlab_group_access_token_users_are_bots() -> None:
    base = {"object_kind": "issue", "event_type": "issue", "object_attributes": {"iid": 1, "title": "t"}}
    s = _sender("gitlab", {**base, "user": {"id": 8, "username": "group_42_bot_9c1e"},
                           "project": {"web_url": "https://gitlab.com/a/b"}}, "Issue Hook")
    assert s == Sender("gitlab", "gitlab.com", "8", "group_42_bot_9c1e", is_bot=True)


def _slack_event(event: dict[str, Any], team_id: str | None = "T1") -> Sender | None:
    p: dict[str, Any] = {"type": "event_callback", "api_app_id": "A1", "event_id": "Ev1", "event": event}
    if team_id is not None:
        p["team_id"] = team_id
    return adapter_for("slack").parse(json.dumps(p).encode(), {"content-type": "application/json"}).sender


EDITED = {"type": "message", "subtype": "message_changed", "channel": "C1"}


@pytest.mark.parametrize(("event", "team_id", "sender"), [
    # Where the author sits: the nested message of an edit or reply, the previous one of a deletion.
    ({**EDITED, "message": {"user": "U2", "team": "T2"}}, "T1", Sender("slack", "T2", "U2", is_bot=False)),
    ({"type": "message", "subtype": "message_replied", "channel": "C1", "message": {"user": "U2"}}, "T1",
     Sender("slack", "T1", "U2", is_bot=False)),
    ({"type": "message", "subtype": "message_deleted", "channel": "C1", "previous_message": {"user": "U3"}}, "T1",
     Sender("slack", "T1", "U3", is_bot=False)),
    # A user object (user_change, team_join): its id, team and bot flag.
    ({"type": "user_change", "user": {"id": "U4", "team_id": "T4", "is_bot": True}}, "T1",
     Sender("slack", "T4", "U4", is_bot=True)),
    ({"type": "team_join", "user": {"id": "U4", "team_id": "T4", "is_bot": False}}, "T1",
     Sender("slack", "T4", "U4", is_bot=False)),
    # The user's own team first (shared channels), then the message's, then the event's, then the payload's.
    ({"type": "message", "channel": "C1", "user": "U5", "user_team": "T5", "team": "T6"}, "T1",
     Sender("slack", "T5", "U5", is_bot=False)),
    ({"type": "message", "channel": "C1", "user": "U5", "team": "T6"}, "T1", Sender("slack", "T6", "U5", is_bot=False)),
    ({**EDITED, "user_team": "T8", "message": {"user": "U2"}}, "T1", Sender("slack", "T8", "U2", is_bot=False)),
    ({"type": "message", "channel": "C1", "user": "U5"}, None, Sender("slack", "", "U5", is_bot=False)),
    # Bots: bot_id on the message or the event, subtype bot_message on either, a bot_profile.
    ({**EDITED, "message": {"user": "U2", "bot_id": "B2"}}, "T1", Sender("slack", "T1", "U2", is_bot=True)),
    ({**EDITED, "bot_id": "B9", "message": {"user": "U2"}}, "T1", Sender("slack", "T1", "U2", is_bot=True)),
    ({**EDITED, "message": {"user": "U2", "subtype": "bot_message"}}, "T1", Sender("slack", "T1", "U2", is_bot=True)),
    ({"type": "message", "subtype": "bot_message", "channel": "C1", "user": "U6"}, "T1",
     Sender("slack", "T1", "U6", is_bot=True)),
    ({"type": "message", "subtype": " bot_message", "channel": "C1", "user": "U6"}, "T1",  # read trimmed
     Sender("slack", "T1", "U6", is_bot=True)),
    ({"type": "message", "subtype": "bot_message", "channel": "C1", "bot_id": "B1"}, "T1",
     Sender("slack", "T1", "B1", is_bot=True)),
    ({"type": "message", "channel": "C1", "bot_profile": {"name": "ci"}}, "T1", Sender("slack", "T1", "bot", is_bot=True)),
    ({"type": "message", "channel": "C1", "text": "no author"}, "T1", None),
])
def test_slack_event_sender_is_read_where_the_event_nests_it(
        event: dict[str, Any], team_id: str | None, sender: Sender | None) -> None:
    assert _slack_event(event, team_id) == sender
