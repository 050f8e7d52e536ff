"""GitHub adapter: parsing JSON and form bodies, senders, dedup keys and titles."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from switchboard.errors import MalformedPayload
from switchboard.sources.github import ADAPTER
from tests.conftest import CASES

WORK_TITLES = {
    "issues.opened.json": "Issue #1 opened in Codertocat/Hello-World: Spelling error in the README file",
    "pull_request.opened.json": "PR #2 opened in Codertocat/Hello-World: Update the README with new information.",
}


def _headers(event: str, content_type: str = "application/json") -> dict[str, str]:
    return {"x-github-event": event, "content-type": content_type}


def test_issue_title_and_sender() -> None:
    body = (CASES / "github" / "issues.opened.json").read_bytes()
    env = ADAPTER.parse(body, _headers("issues"))
    assert env.kind == "issues.opened"
    assert env.title == WORK_TITLES["issues.opened.json"]
    assert env.sender is not None and env.sender.external_id == "21031067" and not env.sender.is_bot


@pytest.mark.parametrize("name", sorted(p.name for p in CASES.joinpath("github").glob("*.json"))
                         if CASES.joinpath("github").exists() else [])
def test_every_shared_payload_parses_with_one_line_title(name: str) -> None:
    body = CASES.joinpath("github", name).read_bytes()
    event = name.split(".", 1)[0]
    env = ADAPTER.parse(body, _headers(event))
    if event == "ping":
        assert env.title is None
    else:
        assert env.title and "\n" not in env.title and len(env.title) <= 200
    if name in WORK_TITLES:
        assert env.title == WORK_TITLES[name]


def test_bot_sender_is_flagged() -> None:
    payload = {"action": "opened", "issue": {"number": 3, "title": "x"}, "sender": {"id": 41898282, "type": "Bot"}}
    env = ADAPTER.parse(json.dumps(payload).encode(), _headers("issues"))
    assert env.sender is not None and env.sender.is_bot


def test_missing_sender_gives_none() -> None:
    env = ADAPTER.parse(b'{"action":"opened","issue":{"number":1,"title":"t"}}', _headers("issues"))
    assert env.sender is None


def test_form_encoded_payload_is_the_json_inside() -> None:
    body = b"payload=%7B%22zen%22%3A%22Keep%20it%20simple.%22%2C%22hook_id%22%3A1%7D"
    env = ADAPTER.parse(body, _headers("ping", "application/x-www-form-urlencoded"))
    assert env.payload == {"zen": "Keep it simple.", "hook_id": 1}


@pytest.mark.parametrize("body,content_type", [
    (b'{"x":"\xff"}', "application/json"),
    (b"[1,2]", "application/json"),
    (b"", "application/json"),
    (b'{"a": NaN}', "application/json"),
    (b"[" * 100000, "application/json"),
    (b"zen=1", "application/x-www-form-urlencoded"),
    (b"payload=%FF", "application/x-www-form-urlencoded"),
    (b"payload=not-json", "application/x-www-form-urlencoded"),
])
def test_unparseable_bodies_raise_malformed_payload(body: bytes, content_type: str) -> None:
    with pytest.raises(MalformedPayload):
        ADAPTER.parse(body, _headers("issues", content_type))


def test_dedup_key_combines_hook_and_delivery() -> None:
    assert ADAPTER.dedup_key({"x-github-hook-id": "7", "x-github-delivery": "abc"}, b"") == "7:abc"
    assert ADAPTER.dedup_key({}, b"") is None


def test_multiline_title_is_one_line(tmp_path: Path) -> None:
    payload = {"action": "opened", "issue": {"number": 9, "title": "a\nb\r\n  c"}, "repository": {"full_name": "o/r"}}
    env = ADAPTER.parse(json.dumps(payload).encode(), _headers("issues"))
    assert env.title == "Issue #9 opened in o/r: a b c"
