"""The JSON shape rules at every door (issue 13 item 7, issue 18 item 8)."""

from __future__ import annotations

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
