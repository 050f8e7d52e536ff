"""Discord adapter: PING, commands, components, senders, bots, replies, keys."""

from __future__ import annotations

import json

import pytest

from switchboard.errors import InvalidArgument
from switchboard.sources.discord import ADAPTER

H = {"content-type": "application/json"}


def _interaction(**fields: object) -> bytes:
    return json.dumps({"id": "42", "type": 2, "member": {"user": {"id": "80351110224678912", "username": "nelly"}},
                       "data": {"name": "review", "options": [{"name": "pr", "value": 12}]}, **fields}).encode()


def test_ping_is_a_handshake() -> None:
    assert ADAPTER.parse(b'{"type":1}', H).handshake == {"type": 1}
    assert ADAPTER.parse(b'{"type":true}', H).handshake is None


def test_command_in_guild_names_member_user() -> None:
    env = ADAPTER.parse(_interaction(token="aW50ZXJhY3Rpb24"), H)
    assert "token" not in env.payload
    assert env.sender is not None and env.sender.external_id == "80351110224678912" and env.sender.workspace == ""
    assert env.title == "Discord /review from nelly: pr=12"
    assert ADAPTER.dedup_key(H, _interaction()) == "42"
    reply = ADAPTER.accept_reply(env, "dlv_1")
    assert reply is not None and reply["type"] == 4 and reply["data"]["flags"] == 64


def test_dm_user_and_bot_flag() -> None:
    env = ADAPTER.parse(_interaction(member=None, user={"id": "1", "username": "b", "bot": True}), H)
    assert env.sender is not None and env.sender.external_id == "1" and env.sender.is_bot


def test_button_and_modal_titles_and_autocomplete_reply() -> None:
    assert ADAPTER.parse(_interaction(type=3, data={"custom_id": "approve"}), H).title == \
        "Discord button pressed by nelly: approve"
    assert ADAPTER.parse(_interaction(type=5, data={"custom_id": "form"}), H).title.startswith("Discord form")  # type: ignore[union-attr]
    auto = ADAPTER.parse(_interaction(type=4), H)
    assert auto.title is None and ADAPTER.accept_reply(auto, "d") == {"type": 8, "data": {"choices": []}}


@pytest.mark.parametrize("key", ["", "00" * 31, "zz" * 32, "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a "])
def test_public_key_is_strict_hex(key: str) -> None:
    with pytest.raises(InvalidArgument):
        ADAPTER.validate_secret(key)
    ADAPTER.validate_secret("d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a")
