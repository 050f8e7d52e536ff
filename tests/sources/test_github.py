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
    return {"x-github-event": event, "content-type": content_type, "x-github-delivery": "d-1"}


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


def test_dedup_key_is_the_one_earlier_versions_stored() -> None:
    # Issue 11 builds the key without json.dumps; a key that changed would let every delivery
    # GitHub redelivers after an upgrade through as new. Pinned value, and the old recipe on
    # strings that JSON escapes (quotes, backslashes, controls, non-ASCII, a lone surrogate).
    import hashlib
    import random

    key = ADAPTER.dedup_key({"x-github-hook-id": "1", "x-github-delivery": "72d3162e-cc78-11e3-81ab-4c9367dc0958"}, b"")
    assert key == "github:" + hashlib.sha256(b'["1", "72d3162e-cc78-11e3-81ab-4c9367dc0958"]').hexdigest()
    pick = random.Random(11).choice
    for _ in range(3000):
        hook, delivery = ("".join(pick('a"\\\n\x00é😀\u2028\ud800 -') for _ in range(n)) for n in (3, 6))
        if not delivery.strip():
            continue
        old = json.dumps([hook.strip(), delivery.strip()]).encode("utf-8")
        assert ADAPTER.dedup_key({"x-github-hook-id": hook, "x-github-delivery": delivery}, b"") == \
            "github:" + hashlib.sha256(old).hexdigest()


def test_dedup_key_combines_hook_and_delivery() -> None:
    one = ADAPTER.dedup_key({"x-github-hook-id": "5:x", "x-github-delivery": "y"}, b"")
    two = ADAPTER.dedup_key({"x-github-hook-id": "5", "x-github-delivery": "x:y"}, b"")
    assert one and two and one != two and len(one) == len(two) == 71
    assert ADAPTER.dedup_key({"x-github-hook-id": "5", "x-github-delivery": "x:y"}, b"") == two
    assert ADAPTER.dedup_key({}, b"") is None


def test_multiline_title_is_one_line(tmp_path: Path) -> None:
    payload = {"action": "opened", "issue": {"number": 9, "title": "a\nb\r\n  c"}, "repository": {"full_name": "o/r"}}
    env = ADAPTER.parse(json.dumps(payload).encode(), _headers("issues"))
    assert env.title == "Issue #9 opened in o/r: a b c"


@pytest.mark.parametrize("headers", [
    {"x-github-event": "</channel>", "x-github-delivery": "d"},
    {"x-github-event": "Issues", "x-github-delivery": "d"},
    {"x-github-event": "", "x-github-delivery": "d"},
    {"x-github-event": "issues"},
    {"x-github-event": "issues", "x-github-delivery": "d" * 201},
])
def test_event_and_delivery_headers_are_required_and_plain(headers: dict[str, str]) -> None:
    from switchboard.errors import MalformedRequest

    with pytest.raises(MalformedRequest):
        ADAPTER.parse(b'{"action":"opened"}', headers)


@pytest.mark.parametrize("body", [
    b'{"n": 1e999}', b'{"a": "\\ud800x"}', b'{"a": "x\\u0000"}', b'{"a": 1, "a": 2}', b"\xef\xbb\xbf{}",
    '{"a": 1}'.encode("utf-16"), b'{"action": "open\\udfffed"}',
])
def test_json_that_cannot_be_stored_or_shown_is_malformed(body: bytes) -> None:
    with pytest.raises(MalformedPayload):
        ADAPTER.parse(body, _headers("issues"))


def test_two_payload_fields_are_malformed() -> None:
    with pytest.raises(MalformedPayload):
        ADAPTER.parse(b"payload=%7B%7D&payload=%7B%7D", _headers("ping", "application/x-www-form-urlencoded"))
    with pytest.raises(MalformedPayload):
        ADAPTER.parse(b"payload=%7B%7D&note=x", _headers("ping", "application/x-www-form-urlencoded"))


@pytest.mark.parametrize("sender,bot", [({"id": 1, "type": "Organization"}, True), ({"id": 1, "type": "bot"}, True),
                                        ({"id": 1, "type": "User"}, False), ({"id": 1}, False)])
def test_only_users_are_people(sender: dict, bot: bool) -> None:
    env = ADAPTER.parse(json.dumps({"sender": sender}).encode(), _headers("star"))
    assert env.sender is not None and env.sender.is_bot is bot


@pytest.mark.parametrize("sid", ["21031067", 1.5, True, None, 0, -3, [1]])
def test_sender_ids_must_be_positive_integers(sid: object) -> None:
    env = ADAPTER.parse(json.dumps({"sender": {"id": sid}}).encode(), _headers("star"))
    assert env.sender is None


def test_event_header_naming_a_missing_object_gives_no_title() -> None:
    env = ADAPTER.parse(b'{"action": "opened", "issue": {"number": 1, "title": "t"}}', _headers("discussion"))
    assert env.title is None and env.summary


_MALFORMED = [  # (body, content type, event header, delivery header) the receiver must refuse
    (b'{"x":"\xff"}', "application/json", "issues", "d"), (b"[1,2]", "application/json", "issues", "d"),
    (b"", "application/json", "issues", "d"), (b'{"a": NaN}', "application/json", "issues", "d"),
    (b"[" * 100000, "application/json", "issues", "d"), (b'{"a": 1, "a": 2}', "application/json", "issues", "d"),
    (b'{"a": "x\\u0000"}', "application/json", "issues", "d"), (b"\xef\xbb\xbf{}", "application/json", "issues", "d"),
    (b'{"n": 1e999}', "application/json", "issues", "d"), (b'{"action": 7}', "application/json", "issues", "d"),
    (b"zen=1", "application/x-www-form-urlencoded", "ping", "d"),
    (b"payload=%7B%7D&note=x", "application/x-www-form-urlencoded", "ping", "d"),
    (b"payload=%EF%BB%BF%7B%7D", "application/x-www-form-urlencoded", "ping", "d"),
    (b'{"action":"opened"}', "application/json", "</channel>", "d"),
    (b'{"action":"opened"}', "application/json", "issues", ""),
]


def _outcome(parse: object, body: bytes, headers: dict[str, str]) -> tuple[object, ...]:
    try:
        env = parse(body, headers)  # type: ignore[operator]
    except Exception as exc:  # noqa: BLE001 - the comparison is the point
        return ("refused", type(exc).__name__, getattr(exc, "code", None), str(exc))
    return ("admitted", env.kind, env.handshake, env.payload)


@pytest.mark.parametrize("case", [*(("shared", p.name) for p in sorted(CASES.joinpath("github").glob("*.json"))),
                                  *(("malformed", i) for i in range(len(_MALFORMED)))])
def test_the_receivers_admit_refuses_and_names_exactly_as_parse(case: tuple[str, object]) -> None:
    # Issue 11: the receiver calls admit() (no title or sender, a third of the parse); a body it
    # admits must parse in processing with the same kind, and one parse refuses must be refused
    # at the door with the same error.
    if case[0] == "shared":
        name = str(case[1])
        body, headers = CASES.joinpath("github", name).read_bytes(), _headers(name.split(".", 1)[0])
    else:
        body, content_type, event, delivery = _MALFORMED[int(case[1])]  # type: ignore[call-overload]
        headers = {"x-github-event": event, "content-type": content_type, "x-github-delivery": delivery}
    admitted = _outcome(ADAPTER.admit, body, headers)
    assert admitted == _outcome(ADAPTER.parse, body, headers)
    assert admitted[0] == ("admitted" if case[0] == "shared" else "refused")
