"""The ``<channel>`` break rule (DESIGN.md §5, issue 4).

Claude Code inserts a channel notification's ``content`` unescaped between
``<channel ...>`` and ``</channel>`` (``notes/mcp-and-channels.md``). Text that opens or
closes that tag could speak to the agent as if it were the system, so a delivery carrying one
anywhere is rejected, never rewritten.

The rule, applied to one string:

1. **Detection view**: NFKC; format (``Cf``), combining (``Mn``, ``Me``), zero-width and other
   default-ignorable characters and C0/C1 controls become a space (so ``chan<ZWSP>nel`` still
   reads as ``chan nel`` and ``<channel<ZWSP>x`` keeps its word boundary); lookalikes of
   ``<``, ``/``, ``>`` and of the letters ``c h a n e l`` are mapped to ASCII from the Unicode
   confusables data (``confusable-homoglyphs``, UTS #39 ``confusables.txt``) plus an explicit
   list of angle brackets that the data maps elsewhere (``⟨`` → ``❬``); case-fold; backslashes
   are dropped.
2. Reject when ``<\\s*/?\\s*c\\s*h\\s*a\\s*n\\s*n\\s*e\\s*l\\b`` matches the view.
3. The same on up to two decoded views: ``\\uXXXX``/``\\xXX``/``\\UXXXXXXXX`` escapes,
   percent-encoding and HTML entities, decoded in that order, once per view.

A string with none of the trigger characters (``<``, ``&``, ``%``, ``\\``, their NFKC
sources and every lookalike of ``<``) cannot produce a ``<`` in any view and is accepted by a
single C-speed regex search, or for an ASCII string by four substring searches: the fast path
for ordinary text. ``tests/intake`` checks over
every code point that the trigger set is complete.

Known false positive, accepted on purpose: RSS/XML with a ``<channel>`` element.
"""

from __future__ import annotations

import html
import re
import unicodedata
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from functools import lru_cache
from typing import Any
from urllib.parse import unquote

from confusable_homoglyphs import confusables as _confusables_data

RULE_PLAIN = "channel_tag"
"""Rule name: the tag is in the detection view of the text itself."""
RULE_DECODED = "channel_tag_decoded"
"""Rule name: the tag appears after decoding escapes, percent-encoding or HTML entities."""

_TAG = re.compile(r"<\s*/?\s*c\s*h\s*a\s*n\s*n\s*e\s*l\b")
_PLAIN_KEY = re.compile(r"[A-Za-z0-9_-]{1,64}")
_MAX_DECODED_VIEWS = 2

# Angle brackets the confusables data maps to ❬/❭ (or nowhere) rather than to < and >.
# Guillemets (« ») and CJK book-title brackets (《 》) are quotation marks: not mapped.
_EXPLICIT = {
    "<": "\u27e8\u2329\u3008\u276c\u2770\u29fc\uff1c\ufe64",
    ">": "\u27e9\u232a\u3009\u276d\u2771\u29fd\uff1e\ufe65",
}
# Characters whose NFKD form contains <, &, % or \\ or a lookalike of < (found by a scan of
# every code point; tests/intake/test_channel_break.py repeats the scan). U+226E (≮) is
# "<" + a combining solidus once decomposed.
_NFKC_TRIGGERS = "\u226e\u2329\ufe3f\ufe60\ufe64\ufe68\ufe6a\uff05\uff06\uff1c\uff3c"
_TARGETS = "</>chanel"
# Default-ignorable code points that are not Cf/Mn/Me (DerivedCoreProperties.txt).
_EXTRA_IGNORABLE = [(0x115F, 0x1160), (0x2800, 0x2800), (0x3164, 0x3164), (0xFFA0, 0xFFA0), (0x2065, 0x2065),
                    (0xFFF0, 0xFFF8), (0xE0000, 0xE0FFF)]
_ESCAPE = re.compile(r"\\u([0-9a-fA-F]{4})|\\x([0-9a-fA-F]{2})|\\U([0-9a-fA-F]{8})")


@dataclass(frozen=True)
class Break:
    """Where a break was found.

    Attributes:
        path: a JSON-path-like location (``$.issue.title``, ``$.labels[0].{key#2}``, ``raw_body``,
            ``title``, ``wake``); it never contains the offending text itself.
        rule: :data:`RULE_PLAIN` or :data:`RULE_DECODED`.
    """

    path: str
    rule: str


class _Tables:
    """Regexes built once from the Unicode data (about 0.2 s, on first use).

    ``re`` matches a character class of BMP characters with a bitmap, but tests every range
    above U+FFFF one by one for every character; so the classes hold BMP characters only and
    the rare astral characters go through one callback with set and dict lookups.
    """

    def __init__(self) -> None:
        mapping: dict[str, str] = {}
        data = _confusables_data.confusables_data
        for target in _TARGETS:
            for variant in {target, target.upper()}:
                for entry in data.get(variant, []):
                    glyph = entry["c"].strip("\u200e\u200f")
                    if len(glyph) == 1 and glyph != target:
                        mapping.setdefault(glyph, target)
        for target, chars in _EXPLICIT.items():
            for ch in chars:
                mapping[ch] = target
        self.mapping = mapping
        self.confusable = re.compile("[" + "".join(re.escape(c) for c in sorted(mapping) if ord(c) <= 0xFFFF) + "]")
        # \t \n \v \f \r are whitespace to the tag regex already and stay as they are.
        ranges: list[tuple[int, int]] = [(0x00, 0x08), (0x0E, 0x1F), (0x7F, 0x9F), *_EXTRA_IGNORABLE]
        start = None
        classes: dict[str, set[str]] = {c: {c, c.upper()} for c in _TARGETS}
        for ch, target in mapping.items():
            classes[target].add(ch)
        for cp in range(0x110000):
            ch = chr(cp)
            folded = ch.casefold()
            if folded != ch and len(folded) == 1:
                goal = folded if folded in classes else mapping.get(folded)
                if goal is not None:
                    classes[goal].add(ch)
            ignorable = unicodedata.category(ch) in ("Cf", "Mn", "Mc", "Me")
            if ignorable and start is None:
                start = cp
            elif not ignorable and start is not None:
                ranges.append((start, cp - 1))
                start = None
        bmp = [(a, min(b, 0xFFFF)) for a, b in ranges if a <= 0xFFFF]
        self.astral_ignorable = frozenset(cp for a, b in ranges if b > 0xFFFF for cp in range(max(a, 0x10000), b + 1))
        self.ignorable = re.compile("[" + "".join(f"{_esc(a)}-{_esc(b)}" if a != b else _esc(a) for a, b in bmp) + "]")
        self.tag = _tag_regex(classes)
        lt_like = [c for c, t in mapping.items() if t == "<"]
        triggers = "<&%\\" + _NFKC_TRIGGERS + "".join(lt_like)
        self.trigger = re.compile("[" + re.escape(triggers) + "]")
        # check_text's ASCII path tests these four by name (str.isascii() is a flag read; four
        # substring searches take 0.3 µs on 5 KB, the class search 21-28 µs: issue 11).
        if {c for c in triggers if c.isascii()} != set("<&%\\"):
            raise RuntimeError("the channel-break trigger set changed its ASCII members: update check_text")


def _tag_regex(classes: dict[str, set[str]]) -> re.Pattern[str]:
    """``<\\s*/?\\s*c\\s*h\\s*a\\s*n\\s*n\\s*e\\s*l\\b`` over *normalised* text.

    Each letter is a class of everything the detection view maps to it (case variants,
    lookalikes), backslashes may sit anywhere (the view drops them), and the final word
    boundary is judged as the view would see the next character. One regex search then
    replaces building the view of the whole text (:func:`_fold` is the reference; the tests
    check that both agree).
    """

    def cls(chars: Iterable[str]) -> str:
        return "[" + "".join(re.escape(c) for c in sorted(chars)) + "]"

    sep = r"[\s\\]*"
    letters = sep.join(cls(classes[c]) for c in "channel")
    word = re.compile(r"\w")
    punct_words = {c for t in "</>" for c in classes[t] if word.match(c)}
    letter_punct = {c for t in "chanel" for c in classes[t] if not word.match(c)}
    boundary = "(?![\\w" + "".join(re.escape(c) for c in sorted(letter_punct)) + "])"
    if punct_words:
        boundary = f"(?:{cls(punct_words)}|{boundary})"
    return re.compile(f"{cls(classes['<'])}{sep}(?:{cls(classes['/'])}{sep})?{letters}(?=\\\\*{boundary})")


def _esc(cp: int) -> str:
    return f"\\u{cp:04x}"


_ASTRAL = re.compile("[\U00010000-\U0010ffff]")


@lru_cache(maxsize=1)
def _tables() -> _Tables:
    return _Tables()


def _normal(text: str, t: _Tables) -> str:
    """NFKD (compatibility mapping, as NFKC, but with accents split off), then ignorable
    characters, combining marks and controls become spaces (backslashes kept for decoding).

    Decomposing first matters: after NFKC a mark that composes with its letter (``a`` + U+0301
    = ``á``) survives as part of the letter and hides it, and ``<`` + U+0338 becomes ``≮``.
    """
    if text.isascii():
        return t.ignorable.sub(" ", text)
    text = t.ignorable.sub(" ", unicodedata.normalize("NFKD", text))
    if _ASTRAL.search(text):
        text = _ASTRAL.sub(lambda m: " " if ord(m.group()) in t.astral_ignorable else m.group(), text)
    return text


def _fold(text: str, t: _Tables) -> str:
    """The detection view of normalised text: lookalikes mapped, case-folded, no backslashes."""

    def mapped(m: re.Match[str]) -> str:
        return t.mapping.get(m.group(), m.group())

    astral = not text.isascii() and _ASTRAL.search(text) is not None
    text = t.confusable.sub(mapped, text)
    if astral:
        text = _ASTRAL.sub(mapped, text)
    # Again after case-folding: I → l needs the first pass, С → с → c the second.
    text = t.confusable.sub(mapped, text.casefold())
    if astral:
        text = _ASTRAL.sub(mapped, text)
    return text.replace("\\", "")


def _decode(text: str) -> str:
    """One decoding pass: escapes, then percent-encoding, then HTML entities."""
    if "\\" in text:
        text = _ESCAPE.sub(_unescape, text)
    if "%" in text:
        text = unquote(text, errors="replace")
    if "&" in text:
        text = html.unescape(text)
    return text


def _unescape(m: re.Match[str]) -> str:
    cp = int(m.group(1) or m.group(2) or m.group(3), 16)
    if cp > 0x10FFFF or 0xD800 <= cp <= 0xDFFF:
        return m.group()
    return chr(cp)


def check_text(text: str) -> str | None:
    """Apply the rule to one string.

    Args:
        text: any text (a payload string or key, a raw body decoded as UTF-8, a title).

    Returns:
        ``None`` when the text cannot open or close a ``<channel>`` tag, else the rule that
        matched (:data:`RULE_PLAIN` or :data:`RULE_DECODED`).
    """
    t = _tables()
    if text.isascii():
        if "<" not in text and "&" not in text and "%" not in text and "\\" not in text:
            return None  # the trigger set's ASCII members (checked in _Tables)
    elif t.trigger.search(text) is None:
        return None
    normal = _normal(text, t)
    for depth in range(_MAX_DECODED_VIEWS + 1):
        if t.tag.search(normal):
            return RULE_PLAIN if depth == 0 else RULE_DECODED
        if depth == _MAX_DECODED_VIEWS:
            break
        decoded = _decode(normal)
        if decoded == normal:
            break
        normal = _normal(decoded, t)
    return None


def breaks_channel(text: str) -> bool:
    """True when ``text`` could open or close a ``<channel>`` tag (see :func:`check_text`)."""
    return check_text(text) is not None


def find_break(value: Any, path: str = "$") -> Break | None:
    """Check every string and every key of a decoded JSON value.

    Args:
        value: a parsed JSON value (dict, list, str, number, bool, None).
        path: the path of ``value`` itself.

    Returns:
        The first :class:`Break`, or ``None``. Keys are named in the path only when they are
        plain (``[A-Za-z0-9_-]{1,64}``), so the path never carries the break itself.
    """
    # The common case finds nothing: check every string at once, joined by U+FFFF (not a space,
    # not a word character, not ignorable, mapped to nothing, a composition starter, and no
    # decoder consumes it), so no match can span two strings. Name the path only on a hit.
    strings: list[str] = []
    _collect(value, strings)
    if check_text(_SEPARATOR.join(strings)) is None:
        return None
    for where, text in iter_strings(value, path):
        rule = check_text(text)
        if rule is not None:
            return Break(where, rule)
    return None


_SEPARATOR = "\uffff"


def _collect(value: Any, out: list[str]) -> None:
    """Append every string and key of a JSON value to ``out`` (iteratively: no recursion limit)."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            out.append(item)
        elif isinstance(item, dict):
            out.extend(str(k) for k in item)
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)


def iter_strings(value: Any, path: str = "$") -> Iterator[tuple[str, str]]:
    """Yield ``(path, text)`` for every string leaf and every key (a key's path ends in itself)."""
    if isinstance(value, str):
        yield path, value
    elif isinstance(value, dict):
        for i, (key, item) in enumerate(value.items()):
            step = f".{key}" if _PLAIN_KEY.fullmatch(str(key)) else f".{{key#{i}}}"
            yield f"{path}{step}", str(key)
            yield from iter_strings(item, f"{path}{step}")
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from iter_strings(item, f"{path}[{i}]")
