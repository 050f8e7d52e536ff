"""The shape rules every JSON value obeys before it is stored or handed to a handler.

Used at every door: REST bodies (:func:`loads`), tool arguments from any transport
(:func:`check`, called by :func:`switchboard.mcp_server.calls.validate`), and verified webhook
bodies (``sources/bodies.py``). The rules (issue 13 item 7, issue 18 item 8):

- nesting at most :data:`MAX_DEPTH` levels (real webhook payloads nest under 20; Python's
  ``json`` and every reader after it recurse, so a deeper value is refused at the door rather
  than failing later, e.g. a stored todo that ``todo_get`` could not serialise);
- no ``NaN``/``Infinity`` and no float that overflows (RFC 8259 §6);
- integers within a signed 64-bit range (what SQLite and PostgreSQL ``bigint`` hold);
- no NUL and no lone UTF-16 surrogate in any string or key (they cannot be stored as UTF-8 or
  in PostgreSQL text).

Every failure is :class:`~switchboard.errors.InvalidArgument` (400 / ``invalid_argument``) with
a reason that never echoes the value.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from switchboard.errors import InvalidArgument

MAX_DEPTH = 64
INT_MIN, INT_MAX = -(2**63), 2**63 - 1
_BAD_CHARS = re.compile("[\x00\ud800-\udfff]")


def refusal_reason(exc: BaseException) -> str:
    """Why ``json.loads`` (with this module's hooks) refused a text, quoting none of it: the
    decoder's own words with the line and column, or the rule it broke. (A new-user run: a
    100,000-digit integer, which is valid JSON, was refused as "not valid JSON" with no reason.)"""
    import sys

    if isinstance(exc, RecursionError):
        return "it nests too deeply"
    if isinstance(exc, json.JSONDecodeError):
        return f"{exc.msg.removesuffix(' at')} at line {exc.lineno} column {exc.colno}"
    text = str(exc)
    if "integer string conversion" in text:  # CPython's limit on int() of a long digit string
        return f"a number has more than {sys.get_int_max_str_digits()} digits"
    return text[:200]


def _reject_constant(name: str) -> Any:
    raise ValueError("non-standard JSON constant")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError("number out of range")
    return value


# A JSON string from its opening quote: escapes skipped, up to the closing quote or, when it is
# never closed, to the end of the text (as a character walk treats it). Possessive quantifiers
# and a match from every quote keep it linear on any input.
_STRING = re.compile(r'"[^"\\]*+(?:\\.[^"\\]*+)*+(?:"|\\?\Z)', re.DOTALL)
_NOT_BRACKETS = re.compile(r"[^\[\]{}]+")


def depth_of_text(text: str, limit: int = MAX_DEPTH) -> int:
    """The bracket nesting depth of JSON ``text`` (strings skipped), stopping past ``limit``.

    Linear and non-recursive, so it runs before the recursive parser ever sees a deep value.
    The strings are cut out by a regular expression and only the brackets left are walked in
    Python (issue 11: a loop over every character of a 5 KB body cost about 0.3 ms a request).
    """
    depth = peak = 0
    for ch in _NOT_BRACKETS.sub("", _STRING.sub("", text)):  # stops at the first level past limit
        if ch in "[{":
            depth += 1
            if depth > peak:
                peak = depth
                if peak > limit:
                    return peak
        else:
            depth -= 1
    return peak


def deeper_than(text: str, limit: int = MAX_DEPTH) -> bool:
    """Whether JSON ``text`` nests deeper than ``limit`` (:func:`depth_of_text`, strings skipped).

    A text with at most ``limit`` opening brackets in all, inside strings or not, cannot nest
    deeper, and two ``str.count`` calls say so without the walk: most webhook bodies (issue 11:
    the walk was about a tenth of the receiver's time per request).
    """
    if text.count("{") + text.count("[") <= limit:
        return False
    return depth_of_text(text, limit) > limit


def loads(data: bytes | str, *, max_depth: int = MAX_DEPTH) -> Any:
    """Parse a JSON request body under the shape rules.

    Args:
        data: the raw body (UTF-8) or text.
        max_depth: the nesting bound (default :data:`MAX_DEPTH`).

    Returns:
        The parsed value (any JSON type; callers check for an object).

    Raises:
        InvalidArgument: not UTF-8, not JSON, too deep, or a value the rules refuse.
    """
    if isinstance(data, bytes):
        try:
            data = data.decode("utf-8")
        except UnicodeDecodeError:
            raise InvalidArgument("the body is not valid UTF-8") from None
    if deeper_than(data, max_depth):
        raise InvalidArgument(f"JSON nests deeper than {max_depth} levels")
    try:
        value = json.loads(data, parse_constant=_reject_constant, parse_float=_finite_float)
    except (ValueError, RecursionError) as exc:
        raise InvalidArgument(f"the body is not JSON we accept (RFC 8259: UTF-8, finite numbers): "
                              f"{refusal_reason(exc)}") from None
    check(value, max_depth=max_depth)
    return value


def check(value: Any, *, max_depth: int = MAX_DEPTH, where: str = "arguments") -> None:
    """Check an already-parsed value (e.g. MCP arguments parsed by the SDK) under the rules.

    Raises:
        InvalidArgument: naming ``where`` and the rule broken, never the value.
    """
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, (dict, list)):
            if depth > max_depth:
                raise InvalidArgument(f"{where}: JSON nests deeper than {max_depth} levels")
            if isinstance(item, dict):
                for key, val in item.items():
                    if not isinstance(key, str) or _BAD_CHARS.search(key):
                        raise InvalidArgument(f"{where}: a key holds NUL or a lone UTF-16 surrogate")
                    stack.append((val, depth + 1))
            else:
                stack.extend((val, depth + 1) for val in item)
        elif isinstance(item, str):
            if _BAD_CHARS.search(item):
                raise InvalidArgument(f"{where}: a string holds NUL or a lone UTF-16 surrogate")
        elif isinstance(item, bool) or item is None:
            continue
        elif isinstance(item, int):
            if not INT_MIN <= item <= INT_MAX:
                raise InvalidArgument(f"{where}: an integer is outside the signed 64-bit range")
        elif isinstance(item, float) and not math.isfinite(item):
            raise InvalidArgument(f"{where}: numbers must be finite (no NaN or Infinity)")


def loads_object(data: bytes | str) -> dict[str, Any]:
    """:func:`loads` for bodies that must be a JSON object; an empty body is ``{}``.

    Raises:
        InvalidArgument: as :func:`loads`, or the value is not an object.
    """
    if not (data.strip() if isinstance(data, (bytes, str)) else data):
        return {}
    value = loads(data)
    if not isinstance(value, dict):
        raise InvalidArgument("the body must be a JSON object (Content-Type: application/json)")
    return value
