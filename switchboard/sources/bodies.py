"""Parsing verified bodies: strict JSON objects, form fields, one-line titles.

Every function raises :class:`~switchboard.errors.MalformedPayload` with a short reason and
never echoes the body. Form bodies are parsed from the exact bytes that were verified; they
are never rebuilt (webhook-faults.md #4).
"""

from __future__ import annotations

import json
import math
import re
import threading
from collections.abc import Mapping
from typing import Any
from urllib.parse import parse_qs, urlsplit

from switchboard.errors import MalformedPayload
from switchboard.intake.json_shape import MAX_DEPTH, deeper_than, refusal_reason
from switchboard.text import ascii_digits, readable

TITLE_MAX_CHARS = 200
_SPACE = re.compile(r"\s+")


def one_line(text: object, limit: int = TITLE_MAX_CHARS) -> str:
    """Collapse whitespace (newlines included), drop what a reader cannot see (bidi, controls:
    :func:`switchboard.text.readable`) and cut to ``limit`` characters with ``…``."""
    line = _SPACE.sub(" ", readable(str(text))).strip()
    return line if len(line) <= limit else line[: limit - 1].rstrip() + "…"


def join_title(head: str, detail: object = None, limit: int = TITLE_MAX_CHARS) -> str:
    """``head: detail`` on one line, or just ``head`` when ``detail`` is empty, ``None``, a
    boolean or not a string or number: a title never ends in a dangling colon or shows
    ``None`` / ``""`` for a missing field (issue 12 #6)."""
    shown = label(detail, limit)
    return one_line(f"{head}: {shown}" if shown else head, limit)


def label(value: object, limit: int = 100) -> str | None:
    """A provider field shown in a title: a non-blank string or a number on one line, else ``None``."""
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        return None
    line = one_line(value, limit)
    return line or None


def number(value: object, prefix: str = "#") -> str:
    """`` #12`` for a positive whole number (a leading space included), else ``""``."""
    if isinstance(value, bool) or not isinstance(value, (int, str)) or not ascii_digits(str(value).strip()):
        return ""
    return f" {prefix}{str(value).strip()[:20]}"


_SURROGATE = re.compile("[\x00\ud800-\udfff]")
# A parsed string can hold NUL or a surrogate only if the text has one, or a \u escape of one
# (a valid pair such as \ud83d\ude00 matches too, and passes the walk): without either, the
# walk over every string of the parsed value is skipped (issue 11). The escape pattern starts
# with a literal, which the regular expression engine finds fast (one pattern with the raw
# characters as an alternative cost 50 µs on 5 KB, this 2 µs).
_BAD_ESCAPE = re.compile(r"\\u(?:0000|[dD][89a-fA-F][0-9a-fA-F]{2})")


def _may_hold_bad(text: str) -> bool:
    """Whether ``text`` has NUL, a surrogate, or an escape of either (see :data:`_BAD_ESCAPE`)."""
    if "\x00" in text or _BAD_ESCAPE.search(text):
        return True
    return not text.isascii() and _SURROGATE.search(text) is not None


def _reject_constant(name: str) -> Any:
    raise ValueError(f"non-standard JSON constant {name}")


def _finite_float(text: str) -> float:
    value = float(text)
    if math.isinf(value):
        raise ValueError("number out of range")
    return value


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            # Two parsers could disagree on which value wins; refuse rather than guess.
            raise ValueError("duplicate key")
        out[key] = value
    return out


def _check_strings(value: Any) -> None:
    """Refuse NUL and lone surrogates (``\\ud800``): they cannot be stored (PostgreSQL text and
    JSONB) or shown as UTF-8."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if _SURROGATE.search(item):
                raise MalformedPayload("body contains NUL or a lone UTF-16 surrogate escape")
        elif isinstance(item, dict):
            for key, val in item.items():
                if _SURROGATE.search(key):
                    raise MalformedPayload("body contains NUL or a lone UTF-16 surrogate escape")
                stack.append(val)
        elif isinstance(item, list):
            stack.extend(item)


_DECODERS = threading.local()


def _decoder() -> json.JSONDecoder:
    """This thread's strict decoder: ``json.loads`` with these hooks built a decoder and its C
    scanner on every call, a quarter of the parse of a 5 KB body (issue 11); one per thread,
    as the scanner keeps a key memo while it runs."""
    decoder = getattr(_DECODERS, "decoder", None)
    if decoder is None:
        decoder = _DECODERS.decoder = json.JSONDecoder(parse_constant=_reject_constant, parse_float=_finite_float,
                                                       object_pairs_hook=_no_duplicate_keys)
    return decoder


def load_json_object(data: bytes | str) -> dict[str, Any]:
    """Parse strict JSON that must be an object.

    Strict means: UTF-8 only (no BOM, no UTF-16/32), no ``NaN``/``Infinity`` and no number that
    overflows a float, no duplicate keys, no NUL or lone surrogate escapes (RFC 8259 §8.1,
    §8.2, §4).

    Raises:
        MalformedPayload: with a short reason; never echoes the body.
    """
    if isinstance(data, bytes):
        if data.startswith(b"\xef\xbb\xbf"):
            raise MalformedPayload("body starts with a byte order mark")
        try:
            data = data.decode("utf-8")
        except UnicodeDecodeError:
            raise MalformedPayload("body is not valid UTF-8") from None
    if deeper_than(data, MAX_DEPTH):  # every stored todo stays readable over MCP (issue 13 item 7)
        raise MalformedPayload(f"body nests deeper than {MAX_DEPTH} levels")
    try:
        value = _decoder().decode(data)
    except (ValueError, RecursionError) as exc:
        raise MalformedPayload("body is not JSON we accept (RFC 8259, UTF-8, unique keys, finite numbers): "
                               f"{refusal_reason(exc)}") from None
    if not isinstance(value, dict):
        raise MalformedPayload("body must be a JSON object")
    if _may_hold_bad(data):
        _check_strings(value)
    return value


def content_type(headers: Mapping[str, str]) -> str:
    """The media type of the request, lower-case, without parameters."""
    return headers.get("content-type", "").split(";", 1)[0].strip().lower()


def is_form(headers: Mapping[str, str]) -> bool:
    """True for ``application/x-www-form-urlencoded`` bodies."""
    return content_type(headers) == "application/x-www-form-urlencoded"


def load_form(body: bytes) -> dict[str, str]:
    """Parse a URL-encoded form (``+`` is a space) into ``{field: first value}``.

    Raises:
        MalformedPayload: the body is not UTF-8 URL encoding, a field is repeated (two parsers
            could pick different values), or a value holds NUL or a lone surrogate.
    """
    try:
        fields = parse_qs(body.decode("utf-8"), keep_blank_values=True, strict_parsing=False, errors="strict",
                          max_num_fields=1000)
    except (UnicodeDecodeError, ValueError):
        raise MalformedPayload("form body is not valid UTF-8 URL encoding") from None
    if any(len(v) > 1 for v in fields.values()):
        raise MalformedPayload("form body repeats a field")
    out = {k: v[0] for k, v in fields.items()}
    _check_strings(out)
    return out


def get(payload: Any, *path: str) -> Any:
    """``payload[path[0]][path[1]]...``, or ``None`` where a step is missing or not an object."""
    value: Any = payload
    for key in path:
        if not isinstance(value, dict):
            return None
        value = value.get(key)
    return value


def text(value: Any, limit: int = 200) -> str | None:
    """A non-empty string (cut to ``limit``), or ``None``; numbers are written in decimal."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (int, str)) and str(value).strip():
        return str(value).strip()[:limit]
    return None


def host_of(url: Any) -> str:
    """The lower-case host of a URL string, ``""`` when there is none."""
    if not isinstance(url, str):
        return ""
    try:
        return (urlsplit(url).hostname or "")[:200]
    except ValueError:
        return ""
