"""Bounded payloads: a todo's payload and result are cut at a size budget, and fetched in parts
(DESIGN.md §6.5a: "payloads over a size budget are truncated with a marker, never silently";
issue 18 item 4).

Sizes are measured on one canonical text of the value: JSON with sorted keys, no spaces and
``ensure_ascii`` (every character outside ASCII as a ``\\uXXXX`` escape), so a byte is a
character, byte offsets never split a character, and the same stored value gives the same
text on every read (PostgreSQL's ``jsonb`` keeps no key order; the sort restores one).

A value within the budget is returned whole, with ``<part>_truncated: false`` and
``<part>_bytes``. Over it, ``<part>`` becomes ``null`` and the view says so explicitly:
``<part>_truncated: true``, ``<part>_bytes`` (the canonical size), ``<part>_preview`` (the
first ``budget`` bytes of the canonical text, a string) and ``<part>_next_offset``. The rest
comes from ``todo_payload`` (``GET /api/v1/todos/<id>/payload``) as byte ranges of the same
text; concatenating every range and parsing it as JSON gives the value back. Secret refs in a
payload stay refs: the text is the sanitised payload as stored.
"""

from __future__ import annotations

import json
from typing import Any

from sqlmodel import Session

from switchboard.config import DEFAULT_PAYLOAD_BUDGET_BYTES, MAX_PAYLOAD_BUDGET_BYTES
from switchboard.errors import InvalidArgument
from switchboard.models import Todo
from switchboard.queue.todos import readable

DEFAULT_BUDGET_BYTES = DEFAULT_PAYLOAD_BUDGET_BYTES
MAX_BUDGET_BYTES = MAX_PAYLOAD_BUDGET_BYTES
PARTS = ("payload", "result")


def canonical(value: Any) -> str:
    """The canonical JSON text of ``value`` (sorted keys, compact, ASCII only)."""
    return json.dumps(value, ensure_ascii=True, sort_keys=True, separators=(",", ":"))


def bound(view: dict[str, Any], budget: int) -> dict[str, Any]:
    """``view`` (a todo row with ``payload``/``result``) with each part kept whole or cut at
    ``budget`` bytes, marked either way (module docstring). Modifies and returns ``view``.

    Args:
        view: a todo view from :func:`switchboard.queue.todos.row` with ``with_payload=True``.
        budget: the size budget in bytes (``Settings.payload_budget_bytes``).
    """
    for part in PARTS:
        if part not in view:
            continue
        text = canonical(view[part])
        size = len(text)
        view[f"{part}_bytes"] = size
        view[f"{part}_truncated"] = size > budget
        if size > budget:
            view[part] = None
            view[f"{part}_preview"] = text[:budget]
            view[f"{part}_next_offset"] = budget
    return view


def fetch(session: Session, grants: dict[str, str], todo_id: str, *, part: str = "payload", offset: int = 0,
          length: int | None = None, budget: int = DEFAULT_BUDGET_BYTES) -> dict[str, Any]:
    """One byte range of a readable todo's payload or result, in canonical text (``todo_payload``).

    Authorised exactly like ``todo_get``: a todo outside the agent's grants is the same
    ``not_found`` as an unknown one (DESIGN.md §5).

    Args:
        part: ``payload`` or ``result``.
        offset: first byte, 0 .. the part's size.
        length: bytes wanted, 1 .. ``budget`` (default ``budget``); the range ends at the part's end.

    Returns:
        ``{todo_id, part, offset, length, total_bytes, data, next_offset}``: ``data`` is the
        text of bytes ``[offset, offset + length)``; ``next_offset`` is None at the end.

    Raises:
        NotFound: unknown or unreadable todo. InvalidArgument: bad part, offset or length.
    """
    if part not in PARTS:
        raise InvalidArgument(f"part must be one of {', '.join(PARTS)}")
    want = budget if length is None else length
    if not 1 <= want <= budget:
        raise InvalidArgument(f"length must be 1 to {budget} (the hub's payload budget in bytes)")
    todo = readable(grants, session.get(Todo, todo_id))
    text = canonical(getattr(todo, part))
    if not 0 <= offset <= len(text):
        raise InvalidArgument(f"offset must be 0 to {len(text)} (the {part}'s size in bytes)")
    data = text[offset:offset + want]
    end = offset + len(data)
    return {"todo_id": todo.id, "part": part, "offset": offset, "length": len(data), "total_bytes": len(text),
            "data": data, "next_offset": end if end < len(text) else None}
