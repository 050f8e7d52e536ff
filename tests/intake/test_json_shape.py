"""The JSON shape rules at every door (issue 13 item 7, issue 18 item 8)."""

from __future__ import annotations

import random

import pytest

from switchboard.errors import InvalidArgument
from switchboard.intake import json_shape


def _nested(depth: int) -> str:
    return "[" * depth + "]" * depth


def test_depth_64_is_accepted_and_65_refused_before_parsing() -> None:
    assert json_shape.loads(_nested(64)) is not None
    with pytest.raises(InvalidArgument, match="deeper than 64"):
        json_shape.loads(_nested(65))
    with pytest.raises(InvalidArgument, match="deeper than 64"):
        json_shape.loads(_nested(100_000))  # would be a RecursionError in json.loads


def test_brackets_inside_strings_do_not_count() -> None:
    text = '{"a": "' + "[" * 500 + '\\"{{{", "b": [1]}'
    assert json_shape.depth_of_text(text) == 2
    assert json_shape.loads(text)["b"] == [1]


@pytest.mark.parametrize("raw", [b'{"a": NaN}', b'{"a": Infinity}', b'{"a": -Infinity}', b'{"a": 1e400}',
                                 b'{"a": 1180591620717411303424}', b'{"a": "\\ud800"}', b'{"\\udc00": 1}',
                                 b'{"a": "\\u0000"}', b'\xff{}', b'{"a": '])
def test_values_the_rules_refuse(raw: bytes) -> None:
    with pytest.raises(InvalidArgument):
        json_shape.loads(raw)


def test_check_covers_values_parsed_elsewhere() -> None:
    json_shape.check({"a": [1, 2.5, "x", None, True, {"b": 2**63 - 1}]})
    for bad in ({"a": float("nan")}, {"a": 2**63}, {"a": "\ud83d"}, {"a": _deep(65)}):
        with pytest.raises(InvalidArgument):
            json_shape.check(bad)


def _deep(depth: int) -> object:
    value: object = 1
    for _ in range(depth):
        value = [value]
    return value


def test_loads_object_wants_an_object() -> None:
    assert json_shape.loads_object(b"") == {} and json_shape.loads_object(b"  ") == {}
    with pytest.raises(InvalidArgument, match="JSON object"):
        json_shape.loads_object(b"[1]")


def _depth_by_walking(text: str) -> int:
    """The reference: one character at a time, as the door did before issue 11."""
    depth = peak = 0
    in_string = escaped = False
    for ch in text:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            depth += 1
            peak = max(peak, depth)
        elif ch in "]}":
            depth -= 1
    return peak


def test_depth_skipping_strings_by_pattern_agrees_with_a_character_walk() -> None:
    # Quotes, escapes, brackets and newlines in every order, unterminated strings and a trailing
    # backslash included (seeded: the same 20,000 texts on every run).
    rng = random.Random(11)
    for _ in range(20_000):
        text = "".join(rng.choice('"\\[]{}a\n') for _ in range(rng.randint(0, 24)))
        assert json_shape.depth_of_text(text, limit=1000) == _depth_by_walking(text), repr(text)


def test_depth_of_escaped_quotes_without_an_end_is_found_in_one_pass() -> None:
    # A pattern that restarted at every quote would take about 10^10 steps here.
    text = '"' + '\\"' * 100_000 + "\\"
    assert json_shape.depth_of_text(text) == 0
    assert json_shape.depth_of_text("[" * 65 + text) == 65


def test_deeper_than_agrees_with_the_walk_on_both_of_its_paths() -> None:
    # Small limits take the walk, large ones the bracket count; both must give the walk's answer
    # (seeded: the same texts on every run).
    rng = random.Random(12)
    for _ in range(20_000):
        text = "".join(rng.choice('"\\[]{}a\n') for _ in range(rng.randint(0, 24)))
        limit = rng.randint(0, 14)
        assert json_shape.deeper_than(text, limit) == (_depth_by_walking(text) > limit), (repr(text), limit)


def test_brackets_in_strings_past_the_count_still_walk() -> None:
    text = '{"a": "' + "[" * 100 + '", "b": ' + "[" * 3 + "]" * 3 + "}"
    assert not json_shape.deeper_than(text, 4)
    assert json_shape.deeper_than("[" * 5 + "]" * 5, 4)


def test_a_refused_body_says_why() -> None:
    with pytest.raises(InvalidArgument) as caught:
        json_shape.loads(b"[" + b"9" * 5000 + b"]")
    assert caught.value.message.endswith(": a number has more than 4300 digits")
