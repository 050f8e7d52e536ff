"""The ``<channel>`` break check (DESIGN.md §5), first cut.

Claude Code inserts channel content unescaped between ``<channel ...>`` and ``</channel>``;
text that opens or closes that tag could speak to the agent as the system. This first cut
checks the NFKC-normalised, case-folded text with format and zero-width characters and
backslashes removed. The confusables mapping and the decoded views (HTML entities, percent and
``\\u`` escapes) of the full rule are not here yet.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterator
from typing import Any

_PLAIN_KEY = re.compile(r"[A-Za-z0-9_-]{1,64}")
_TAG = re.compile(r"<\s*/?\s*c\s*h\s*a\s*n\s*n\s*e\s*l\b")


def _view(text: str) -> str:
    text = unicodedata.normalize("NFKC", text)
    text = "".join(
        ch for ch in text
        if unicodedata.category(ch) not in ("Cf", "Mn", "Me") and ch != "\\"
        and not (ord(ch) < 0x20 and ch not in "\t\n\r")
    )
    return text.casefold()


def breaks_channel(text: str) -> bool:
    """True when ``text`` could open or close a ``<channel>`` tag."""
    if text.isascii() and "<" not in text:
        return False
    return _TAG.search(_view(text)) is not None


def find_break(value: Any, path: str = "$") -> str | None:
    """Return the JSON path of the first string or key that breaks the tag, else ``None``."""
    for where, text in _strings(value, path):
        if breaks_channel(text):
            return where
    return None


def _strings(value: Any, path: str) -> Iterator[tuple[str, str]]:
    if isinstance(value, str):
        yield path, value
    elif isinstance(value, dict):
        for i, (key, item) in enumerate(value.items()):
            # A path names keys only when they are plain, so it never carries the break itself.
            step = f".{key}" if _PLAIN_KEY.fullmatch(str(key)) else f".{{key#{i}}}"
            yield f"{path}{step}", str(key)
            yield from _strings(item, f"{path}{step}")
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from _strings(item, f"{path}[{i}]")
