"""Teams, Mattermost and Telegram adapters: senders, titles, dedup, keys, identities."""

from __future__ import annotations

import base64
import json
from urllib.parse import urlencode

import pytest

from switchboard.errors import InvalidArgument, MalformedPayload
from switchboard.sources import mattermost, teams, telegram
from switchboard.verifiers import SignatureMissing

H = {"content-type": "application/json"}
AAD = "6D5CDB1F-7E1A-4A08-8F3D-2C9C7C2A4E11"


def test_teams_message() -> None:
    body = json.dumps({"type": "message", "id": "1485983408511", "text": "<at>Bot</at> deploy &amp; test",
                       "from": {"id": "29:1", "name": "Megan", "aadObjectId": AAD}}).encode()
    env = teams.ADAPTER.parse(body, H)
    assert env.title == "Teams message from Megan: deploy & test"
    assert env.sender is not None and env.sender.external_id == AAD.lower()
    assert teams.ADAPTER.dedup_key(H, body) == "1485983408511"
    assert teams.ADAPTER.accept_reply(env, "dlv_1")["type"] == "message"  # type: ignore[index]
    assert teams.ADAPTER.normalize_identity("", AAD) == ("", AAD.lower())


@pytest.mark.parametrize("token", ["", "contoso", base64.b64encode(b"k" * 16).decode(), "not base64!!"])
def test_teams_token_is_base64_of_32_bytes(token: str) -> None:
    with pytest.raises(InvalidArgument):
        teams.ADAPTER.validate_secret(token)
    teams.ADAPTER.validate_secret("vqF0En+Z0ucuRTM/01o2GuhMH3hKKk/N2bOmlM31zaA=")


def test_mattermost_form_and_json() -> None:
    fields = {"token": "x" * 26, "team_id": "t" * 26, "user_id": "u" * 26, "user_name": "bob",
              "channel_name": "town", "post_id": "p" * 26, "text": "sb review #12"}
    form = urlencode(fields).encode()
    for body, headers in ((form, {"content-type": "application/x-www-form-urlencoded"}),
                          (json.dumps(fields).encode(), H)):
        mattermost.ADAPTER.verify(body, headers, ["x" * 26], None)  # type: ignore[arg-type]
        env = mattermost.ADAPTER.parse(body, headers)
        assert env.title == "Mattermost message from bob in town: sb review #12"
        assert (env.sender.workspace, env.sender.external_id) == ("t" * 26, "u" * 26)  # type: ignore[union-attr]
        assert "token" not in env.payload
        assert mattermost.ADAPTER.dedup_key(headers, body) == "p" * 26
    with pytest.raises(SignatureMissing):
        mattermost.ADAPTER.verify(b"\xff", H, ["x" * 26], None)  # type: ignore[arg-type]
    with pytest.raises(SignatureMissing):
        mattermost.ADAPTER.verify(b'{"token": 5}', H, ["x" * 26], None)  # type: ignore[arg-type]


def test_telegram_updates() -> None:
    msg = json.dumps({"update_id": 10, "message": {"from": {"id": 7, "is_bot": False, "first_name": "Ann"},
                                                   "text": "review #12"}}).encode()
    env = telegram.ADAPTER.parse(msg, H)
    assert env.title == "Telegram message from Ann: review #12" and env.sender.external_id == "7"  # type: ignore[union-attr]
    assert telegram.ADAPTER.dedup_key(H, msg) == "10"
    cb = json.dumps({"update_id": 11, "callback_query": {"from": {"id": 7, "is_bot": False, "username": "ann"},
                                                         "data": "approve"}}).encode()
    assert telegram.ADAPTER.parse(cb, H).title == "Telegram button pressed by ann: approve"
    bot = json.dumps({"update_id": 12, "message": {"from": {"id": 8, "is_bot": True}, "text": "x"}}).encode()
    assert telegram.ADAPTER.parse(bot, H).sender.is_bot  # type: ignore[union-attr]
    post = json.dumps({"update_id": 13, "channel_post": {"chat": {"id": -1}, "text": "x"}}).encode()
    assert telegram.ADAPTER.parse(post, H).sender is None


@pytest.mark.parametrize("secret", ["", "has space", "a" * 257, "ü"])
def test_telegram_secret_charset(secret: str) -> None:
    with pytest.raises(InvalidArgument):
        telegram.ADAPTER.validate_secret(secret)


def test_malformed_bodies() -> None:
    for adapter in (teams.ADAPTER, telegram.ADAPTER, mattermost.ADAPTER):
        with pytest.raises(MalformedPayload):
            adapter.parse(b"[]", H)
        assert adapter.dedup_key(H, b"\xff") is None
