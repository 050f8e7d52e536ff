"""Opaque list cursors and keyset pages (DESIGN.md §6.5a: "lists paginate with a cursor").

Every list (todos, feed, the agent's inbox, the human inbox, quarantine, deliveries) takes a
``cursor`` and answers ``next_cursor``. A cursor is ``c1.`` + base64url (no padding) of the JSON
array ``[list, *key]``: the name of the list it belongs to and the sort key of the last row
returned. The next page is the rows strictly after that key in the list's order (keyset
pagination), so a row inserted or removed between pages never shifts another row: each row
present for the whole walk is returned exactly once, whatever else happens meanwhile. Sort keys
are immutable columns (creation time + id, or a commit-ordered feed position), never ones that
change with state.

A cursor only says *where*, never *what may be seen*: every page applies the caller's scope as
usual, so a cursor built by hand cannot reach another tenant's rows (DESIGN.md §5). A cursor
that does not decode, belongs to another list, or holds a key of the wrong shape is
``invalid_argument``.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import and_, or_
from sqlalchemy.sql.elements import ColumnElement

from switchboard.errors import InvalidArgument

PREFIX = "c1."
MAX_CURSOR_CHARS = 400
#: Key part types: ``time`` (an aware UTC datetime, sent as ISO 8601), ``str`` (an id), ``int``.
KeyShape = Sequence[str]


def _encode_part(value: Any, kind: str) -> Any:
    if kind == "time":
        return value.astimezone(UTC).isoformat()
    return value


def _decode_part(value: Any, kind: str) -> Any:
    if kind == "time":
        if not isinstance(value, str) or len(value) > 40:
            raise ValueError("time")
        parsed = datetime.fromisoformat(value)
        if parsed.tzinfo is None:
            raise ValueError("naive time")
        try:
            return parsed.astimezone(UTC)
        except OverflowError as exc:  # 0001-01-01T00:00+01:00: no such instant in UTC
            raise ValueError("time out of range") from exc
    if kind == "str":
        # Ids are printable ASCII: a lone surrogate or NUL would fail at the database (a 5xx).
        if not isinstance(value, str) or not 0 < len(value) <= 100 or not value.isascii() or not value.isprintable():
            raise ValueError("str")
        return value
    if kind == "int":
        if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value < 2**63:
            raise ValueError("int")
        return value
    raise TypeError(f"unknown key part kind {kind!r}")  # a programming error


def encode(list_name: str, key: Sequence[Any], shape: KeyShape) -> str:
    """The cursor after the row whose sort key is ``key`` in list ``list_name``.

    Args:
        list_name: the list the cursor belongs to (``todos``, ``feed``, ...).
        key: the sort key of the last row returned, one value per ``shape`` entry.
        shape: the kind of each key part (``time``, ``str``, ``int``).
    """
    body = json.dumps([list_name, *(_encode_part(v, k) for v, k in zip(key, shape, strict=True))],
                      separators=(",", ":"), ensure_ascii=True)
    return PREFIX + base64.urlsafe_b64encode(body.encode("ascii")).decode("ascii").rstrip("=")


def decode(cursor: Any, list_name: str, shape: KeyShape) -> tuple[Any, ...]:
    """The sort key a cursor of list ``list_name`` holds.

    Raises:
        InvalidArgument: not a string, too long, not ``c1.`` + base64url JSON, another list's
            cursor, or a key of the wrong shape (one message for all: the cursor is opaque).
    """
    bad = InvalidArgument("cursor: not a cursor of this list (pass next_cursor of an earlier page unchanged)")
    if not isinstance(cursor, str) or not cursor.startswith(PREFIX) or len(cursor) > MAX_CURSOR_CHARS:
        raise bad
    raw = cursor[len(PREFIX):]
    try:
        data = json.loads(base64.urlsafe_b64decode(raw + "=" * (-len(raw) % 4)).decode("ascii"))
    except (binascii.Error, ValueError, UnicodeDecodeError):
        raise bad from None
    if not isinstance(data, list) or len(data) != len(shape) + 1 or data[0] != list_name:
        raise bad
    try:
        return tuple(_decode_part(v, k) for v, k in zip(data[1:], shape, strict=True))
    except ValueError:
        raise bad from None


def after(columns: Sequence[Any], key: Sequence[Any], *, descending: bool = False) -> ColumnElement[bool]:
    """The SQL condition "strictly after ``key``" in the order of ``columns`` (all ascending, or
    all descending), written as nested OR/AND so it works the same on SQLite and PostgreSQL.

    ``(a, b) > (x, y)`` is ``a > x OR (a = x AND b > y)``.
    """
    clauses = []
    for i, (column, value) in enumerate(zip(columns, key, strict=True)):
        step = column < value if descending else column > value
        clauses.append(and_(*[c == v for c, v in zip(columns[:i], key[:i], strict=True)], step))
    return or_(*clauses)


def page(rows: Sequence[Any], limit: int, list_name: str, shape: KeyShape,
         key_of: Any) -> tuple[list[Any], str | None]:
    """Cut ``rows`` (read with ``LIMIT limit + 1``) to one page and its ``next_cursor``.

    Returns:
        ``(page, next_cursor)``; ``next_cursor`` is None when nothing follows the page.
    """
    kept = list(rows[:limit])
    if len(rows) <= limit or not kept:
        return kept, None
    return kept, encode(list_name, key_of(kept[-1]), shape)
