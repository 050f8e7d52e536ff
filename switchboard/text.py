"""Text that people and models read: what they see is what is there (DESIGN.md §5).

Untrusted text (webhook titles, permission prompts relayed from Claude Code, todos agents
create, names in a quarantined delivery) may carry characters that change what a reader
sees: bidi overrides and isolates that display a command reversed (U+202E, U+2066), zero
widths, terminal escape sequences (ESC, CSI) that erase or recolour a line in a terminal.
:func:`readable` drops them; it is applied where such text enters (titles, prompts, created
todos) and where it leaves for a terminal (the CLI's text output).

Imports nothing of the package: every layer may use it.
"""

from __future__ import annotations

import unicodedata

_DROPPED_CATEGORIES = frozenset({"Cf", "Cc", "Co", "Cs", "Zl", "Zp"})
# Invisible code points outside those categories: fillers, the combining grapheme joiner,
# variation selectors, the Mongolian vowel separator.
_INVISIBLE = frozenset({0x115F, 0x1160, 0x3164, 0xFFA0, 0x034F, 0x180E, *range(0xFE00, 0xFE10),
                        *range(0xE0100, 0xE01F0)})


def readable(text: str, *, multiline: bool = False) -> str:
    """``text`` without invisible, bidi, control, private-use or surrogate code points.

    Args:
        text: any string.
        multiline: keep line breaks (``\\n``; ``\\r\\n`` becomes ``\\n``) and tabs, and the
            spacing as it is; otherwise the result is one line with runs of whitespace folded
            to one space.

    Returns:
        The cleaned string (possibly empty). Format characters (Unicode category Cf: bidi
        embeddings, overrides and isolates, zero widths, soft hyphen, tag characters), controls
        (Cc: ESC and every other C0/C1 code), private use (Co), surrogates (Cs), line and
        paragraph separators and the invisible fillers are dropped.
    """
    if text.isascii() and text.isprintable():
        # Printable ASCII holds none of the dropped code points (no controls, no tabs or line
        # breaks): the per-character walk would keep every one (issue 11: titles of every
        # delivery, at receive time and in processing).
        return text if multiline else " ".join(text.split())
    if multiline:
        text = text.replace("\r\n", "\n")
    keep = "\n\t" if multiline else "\t\n\r"
    kept = "".join(ch for ch in text if ch in keep or (
        unicodedata.category(ch) not in _DROPPED_CATEGORIES and ord(ch) not in _INVISIBLE))
    return kept if multiline else " ".join(kept.split())


def ascii_digits(text: str) -> bool:
    """Whether ``text`` is one or more ASCII digits ``0``-``9``: what ``int()`` takes as a whole
    number and a client means by one. ``str.isdigit`` also accepts ``²``, ``¹`` and other digit
    characters that ``int()`` refuses with a ``ValueError`` (a 500 where a 400 belonged: a
    ``Last-Event-ID`` or a ``Content-Length`` of ``²``, latin-1 byte 0xB2, in a review)."""
    return text.isascii() and text.isdigit()


def whole_number(text: str, max_digits: int) -> int | None:
    """``text`` as an ``int`` when it is 1 to ``max_digits`` ASCII digits, else ``None``.

    The one parser for a number a request or a setting spells out (a port, a limit, an event
    id, a ``Content-Length``): :func:`ascii_digits` alone left each caller to bound the length,
    and ``int()`` raises ``ValueError`` past 4,300 digits (three 500s a review found)."""
    return int(text) if len(text) <= max_digits and ascii_digits(text) else None
