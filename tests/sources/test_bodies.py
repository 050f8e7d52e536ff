"""Strict JSON bodies (``sources/bodies.py``): NUL and lone surrogates are refused however they are
written, and the fast path that skips the walk over every string (issue 11) never lets one by."""

from __future__ import annotations

import pytest

from switchboard.errors import MalformedPayload
from switchboard.sources.bodies import load_json_object


@pytest.mark.parametrize("raw", [
    b'{"a": "\\u0000"}', b'{"a": "x\\u0000y"}', b'{"\\ud800": 1}', b'{"a": ["\\uDFFF"]}', b'{"a": "\\uDbFf"}',
    b'{"a": {"b": "\\ud83d"}}', b'{"a": "\\ude00\\ud83d"}',
])
def test_nul_and_lone_surrogate_escapes_are_refused(raw: bytes) -> None:
    with pytest.raises(MalformedPayload, match="NUL or a lone UTF-16 surrogate"):
        load_json_object(raw)


def test_text_given_as_a_string_with_a_raw_surrogate_or_nul_is_refused() -> None:
    # A form field's payload arrives as text, not bytes.
    for text in ('{"a": "\ud800"}', '{"\udc00": 1}'):
        with pytest.raises(MalformedPayload):
            load_json_object(text)


@pytest.mark.parametrize(("raw", "value"), [
    (b'{"a": "\\\\u0000"}', "\\u0000"),  # an escaped backslash: the text \u0000, not NUL
    (b'{"a": "\\ud83d\\ude00"}', "\U0001F600"),  # a valid pair
    (b'{"a": "\\u00e9\\u4e2d"}', "\u00e9\u4e2d"),
    (b'{"a": "plain"}', "plain"),
])
def test_other_escapes_pass(raw: bytes, value: str) -> None:
    assert load_json_object(raw)["a"] == value


@pytest.mark.parametrize(("body", "reason"), [
    # A new-user run: a 100,000-digit integer (valid JSON) was refused as "not valid JSON" with
    # no reason; every refusal now says which rule, without quoting the body.
    (b'{"a": ' + b"7" * 100_000 + b"}", "a number has more than 4300 digits"),
    (b'{"a": 1, "a": 2}', "duplicate key"),
    (b'{"a": NaN}', "non-standard JSON constant NaN"),
    (b'{"a": 1e999}', "number out of range"),
    (b'{"secret-value" 1}', "Expecting ':' delimiter at line 1 column 17"),
    (b'{"a": "\x01"}', "Invalid control character at line 1 column 8"),
])
def test_a_refused_body_says_why_without_quoting_it(body: bytes, reason: str) -> None:
    with pytest.raises(MalformedPayload) as caught:
        load_json_object(body)
    assert caught.value.message == ("body is not JSON we accept (RFC 8259, UTF-8, unique keys, finite numbers): "
                                    + reason)


def test_a_bad_todo_events_list_is_worded_for_every_surface() -> None:
    # A new-user run: the web UI's field answered "--todo-events takes ...", the CLI's flag.
    from switchboard.errors import InvalidArgument
    from switchboard.sources.routing import MAX_ENTRIES, parse_todo_events

    with pytest.raises(InvalidArgument) as caught:
        parse_todo_events("github", "issues, <b>")
    assert caught.value.message.startswith("todo events are comma-separated event kinds such as 'issues'")
    with pytest.raises(InvalidArgument) as caught:
        parse_todo_events("github", ",".join(f"k{n}" for n in range(MAX_ENTRIES + 1)))
    assert caught.value.message == f"todo events: at most {MAX_ENTRIES} kinds"
    assert parse_todo_events("github", "default") is None and parse_todo_events("github", "none") == []
