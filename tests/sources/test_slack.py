"""Slack adapter: shapes (Events API, slash commands, interactivity), senders, bots, dedup."""

from __future__ import annotations

import json
from urllib.parse import quote

import pytest

from switchboard.errors import InvalidArgument, MalformedPayload
from switchboard.sources.slack import ADAPTER

FORM = {"content-type": "application/x-www-form-urlencoded"}
JSON = {"content-type": "application/json"}


def _event(**event: object) -> bytes:
    return json.dumps({"token": "t", "team_id": "T1", "api_app_id": "A1", "type": "event_callback",
                       "event_id": "Ev1", "event": {"type": "app_mention", "user": "U1", "text": "<@U9> hi",
                                                    "channel": "C1", **event}}).encode()


def test_mention_is_work_with_team_and_user() -> None:
    env = ADAPTER.parse(_event(), JSON)
    assert env.kind == "event_callback.app_mention"
    assert env.sender is not None and (env.sender.workspace, env.sender.external_id) == ("T1", "U1")
    assert env.title == "Slack mention from U1 in C1: @U9 hi"
    assert "token" not in env.payload
    assert ADAPTER.dedup_key(JSON, _event()) == "A1:Ev1"


def test_bot_messages_are_flagged() -> None:
    env = ADAPTER.parse(_event(type="message", bot_id="B1", subtype="bot_message", user=None), JSON)
    assert env.sender is not None and env.sender.is_bot
    assert ADAPTER.parse(_event(bot_id="B1"), JSON).sender.is_bot  # type: ignore[union-attr]


def test_shared_channel_user_keeps_their_own_team() -> None:
    env = ADAPTER.parse(_event(user_team="T2"), JSON)
    assert env.sender.workspace == "T2"  # type: ignore[union-attr]


def test_message_edits_are_feed_only() -> None:
    env = ADAPTER.parse(_event(type="message", subtype="message_changed"), JSON)
    assert env.title is None and env.summary


def test_slash_command_form_fault4() -> None:
    body = b"command=%2Fdeploy&text=api+now&user_id=U1&team_id=T1&trigger_id=13345224609.738474920.8088930838d88f008e0"
    env = ADAPTER.parse(body, FORM)
    assert env.kind == "slash_command" and env.title == "Slack /deploy from U1: api now"
    assert env.sender.external_id == "U1"  # type: ignore[union-attr]
    assert ADAPTER.dedup_key(FORM, body) == "trigger:13345224609.738474920.8088930838d88f008e0"
    assert ADAPTER.accept_reply(env, "dlv_x")["response_type"] == "ephemeral"  # type: ignore[index]


def test_interactivity_payload_button() -> None:
    inner = {"type": "block_actions", "user": {"id": "U1", "username": "ann", "team_id": "T1"},
             "team": {"id": "T1"}, "trigger_id": "t.1", "token": "legacy",
             "actions": [{"action_id": "approve", "text": {"type": "plain_text", "text": "Approve"}}]}
    body = ("payload=" + quote(json.dumps(inner))).encode()
    env = ADAPTER.parse(body, FORM)
    assert env.kind == "interaction.block_actions" and env.title == "Slack button pressed by U1: Approve"
    assert "token" not in env.payload


def test_url_verification_is_a_handshake() -> None:
    env = ADAPTER.parse(b'{"type":"url_verification","challenge":"abc"}', JSON)
    assert env.handshake == {"challenge": "abc"}
    with pytest.raises(MalformedPayload):
        ADAPTER.parse(b'{"type":"url_verification","challenge":5}', JSON)


@pytest.mark.parametrize("body", [b"text=hi", b"\xff=1", b"[1]", b""])
def test_unusable_bodies_are_malformed(body: bytes) -> None:
    with pytest.raises(MalformedPayload):
        ADAPTER.parse(body, FORM if b"=" in body else JSON)


@pytest.mark.parametrize("secret", ["", "xoxb-123", "8f742231b10e8888abcd99yyyzzz85a5", "A" * 32, "a" * 31])
def test_signing_secret_is_32_hex(secret: str) -> None:
    with pytest.raises(InvalidArgument):
        ADAPTER.validate_secret(secret)
    ADAPTER.validate_secret("0123456789abcdef0123456789abcdef")


def test_identity_needs_team_and_user_ids() -> None:
    ADAPTER.validate_identity("T024BE7LD", "U2147483697")
    for ws, uid in (("", "U1X"), ("T1X", "alice"), ("T1X", "")):
        with pytest.raises(InvalidArgument):
            ADAPTER.validate_identity(ws, uid)
