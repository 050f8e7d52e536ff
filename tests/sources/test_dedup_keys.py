"""Each provider's dedup key: present when the delivery names one, bounded, absent otherwise
(DESIGN.md §6.1; mutation testing, issue 17).

Keys are chosen by the sender, so a key must fit the column (300 characters) whatever was
sent, and a delivery without an id must get no key at all (a constant key would make every
such delivery a duplicate of the first).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pytest

from switchboard.sources import PROVIDERS, adapter_for
from tests.signers import payload, sign

LONG = "7" * 1000

# provider -> (body field or header holding the id, where: "body" or "header")
ID_FIELD = {
    "github": ("X-GitHub-Delivery", "header"), "gitea": ("X-Gitea-Delivery", "header"),
    "forgejo": ("X-Forgejo-Delivery", "header"), "gitlab": ("Idempotency-Key", "header"),
    "slack": ("event_id", "body"), "discord": ("id", "body"), "teams": ("id", "body"),
    "mattermost": ("post_id", "body"), "telegram": ("update_id", "body"),
    "standard_webhooks": ("webhook-id", "header"),
}


def _key(provider: str, value: Any, drop: bool = False) -> str | None:
    field, where = ID_FIELD[provider]
    p = payload(provider)
    if provider == "slack":
        p["event"] = {"type": "reaction_added", "user": "U2147483697"}  # not a message: keyed on event_id
    if where == "body":
        if drop:
            p.pop(field, None)
        else:
            p[field] = value
    body = json.dumps(p).encode()
    headers = {k.lower(): v for k, v in sign(provider, body).items()}
    if where == "header":
        names = [field.lower()]
        if provider == "gitlab":
            names.append("x-gitlab-event-uuid")
        for name in names:
            headers.pop(name, None)
        if not drop:
            headers[field.lower()] = str(value)
    return adapter_for(provider).dedup_key(headers, body)


@pytest.mark.parametrize("provider", PROVIDERS)
def test_a_huge_sender_chosen_id_gives_a_bounded_stable_key(provider: str) -> None:
    value: Any = int(LONG) if provider == "telegram" else LONG
    key = _key(provider, value)
    assert key is not None and 0 < len(key) <= 300
    assert _key(provider, value) == key
    assert _key(provider, 12345 if provider == "telegram" else "other-id") != key


@pytest.mark.parametrize("provider", PROVIDERS)
def test_a_delivery_without_an_id_has_no_key(provider: str) -> None:
    assert _key(provider, None, drop=True) is None


def test_github_key_without_a_hook_id_header_still_names_the_delivery() -> None:
    adapter = adapter_for("github")
    bare = adapter.dedup_key({"x-github-delivery": "72d3162e"}, b"{}")
    hooked = adapter.dedup_key({"x-github-delivery": "72d3162e", "x-github-hook-id": "1"}, b"{}")
    assert bare is not None and hooked is not None and bare != hooked
    assert adapter.dedup_key({"x-github-delivery": "72d3162f"}, b"{}") != bare


def test_slack_payloads_without_event_or_trigger_ids_have_no_key() -> None:
    adapter = adapter_for("slack")
    for body in ({"type": "block_actions"}, {"type": "event_callback", "event": {}}):
        assert adapter.dedup_key({"content-type": "application/json"}, json.dumps(body).encode()) is None
    with_trigger = {"type": "shortcut", "trigger_id": "13345224609.738474920.8088930838d88f008e0"}
    assert adapter.dedup_key({"content-type": "application/json"}, json.dumps(with_trigger).encode()) == (
        "trigger:13345224609.738474920.8088930838d88f008e0")


# The cut of a sender-chosen id: ids that differ only after it are one delivery.
CUT = {"discord": 100, "mattermost": 100, "teams": 200, "telegram": 40, "gitea": 200, "forgejo": 200, "gitlab": 200}


@pytest.mark.parametrize("provider", sorted(CUT))
def test_a_huge_id_is_cut_to_a_fixed_length(provider: str) -> None:
    assert _key(provider, int(LONG) if provider == "telegram" else LONG) == "7" * CUT[provider]


def test_a_huge_gitlab_event_uuid_is_cut_to_200_characters() -> None:
    assert adapter_for("gitlab").dedup_key({"x-gitlab-event-uuid": LONG}, b"{}") == "event:" + "7" * 200


def test_a_huge_slack_app_and_event_id_make_a_300_character_key() -> None:
    body = json.dumps({"type": "event_callback", "api_app_id": "A" * 250, "event_id": "E" * 250,
                       "event": {"type": "reaction_added"}}).encode()
    assert adapter_for("slack").dedup_key({"content-type": "application/json"}, body) == "A" * 200 + ":" + "E" * 99


def test_stored_keys_keep_their_format() -> None:
    """Keys are compared with rows stored by earlier releases: a retry after an upgrade must
    still be a duplicate, so the format is fixed."""
    github = adapter_for("github")
    assert github.dedup_key({"x-github-delivery": "72d3162e", "x-github-hook-id": "1"}, b"{}") == (
        "github:" + hashlib.sha256(b'["1", "72d3162e"]').hexdigest())
    assert github.dedup_key({"x-github-delivery": "72d3162e"}, b"{}") == (
        "github:" + hashlib.sha256(b'["", "72d3162e"]').hexdigest())
    assert github.dedup_key({"x-github-delivery": "72d3162e", "x-github-hook-id": " "}, b"{}") == (
        github.dedup_key({"x-github-delivery": "72d3162e"}, b"{}"))
    slack = adapter_for("slack")
    no_app = {"type": "event_callback", "event_id": "Ev1", "event": {"type": "reaction_added"}}
    assert slack.dedup_key({"content-type": "application/json"}, json.dumps(no_app).encode()) == ":Ev1"


def test_a_slack_message_is_keyed_on_team_channel_and_ts_whatever_its_event_id() -> None:
    slack = adapter_for("slack")
    message = {"type": "message", "user": "U1", "text": "hi", "channel": "C1", "ts": "1700000000.000100"}
    keys = {slack.dedup_key({"content-type": "application/json"}, json.dumps(
        {"type": "event_callback", "team_id": "T1", "api_app_id": "A1", "event_id": event_id,
         "event": {**message, "type": kind}}).encode()) for kind, event_id in (("message", "Ev1"), ("app_mention", "Ev2"))}
    assert keys == {"msg:T1:C1:1700000000.000100"}
