"""``switchboard.text.readable`` (DESIGN.md §5): the fast path for printable ASCII gives what the
character walk gives, and everything a reader cannot see is still dropped."""

from __future__ import annotations

import random
import unicodedata

import pytest

from switchboard import text
from switchboard.text import readable


def _walked(value: str, multiline: bool) -> str:
    """The character walk alone (the rule before the fast path)."""
    if multiline:
        value = value.replace("\r\n", "\n")
    keep = "\n\t" if multiline else "\t\n\r"
    kept = "".join(ch for ch in value if ch in keep or (
        unicodedata.category(ch) not in text._DROPPED_CATEGORIES and ord(ch) not in text._INVISIBLE))
    return kept if multiline else " ".join(kept.split())


@pytest.mark.parametrize("multiline", [False, True])
def test_the_fast_path_agrees_with_the_walk(multiline: bool) -> None:
    # ASCII with every control, tab and line break among printable characters, and a few
    # non-ASCII ones (seeded: the same strings on every run).
    rng = random.Random(7)
    alphabet = [chr(c) for c in range(128)] + ["\u202e", "\u200b", "é", "\u2028", "\u3164"]
    for _ in range(20_000):
        value = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 12)))
        assert readable(value, multiline=multiline) == _walked(value, multiline), repr(value)


@pytest.mark.parametrize(("value", "shown"), [
    ("Fix  the\tbuild\r\n now", "Fix the build now"),
    ("run \x1b[2Jrm -rf", "run [2Jrm -rf"),  # ESC dropped: no terminal escape survives
    ("abc\u202edef", "abcdef"),
    ("  plain title ", "plain title"),
])
def test_one_line_titles(value: str, shown: str) -> None:
    assert readable(value) == shown


def test_ascii_digits_are_what_int_takes() -> None:
    assert text.ascii_digits("0123456789") and not text.ascii_digits("")
    for other in ("²", "1²", "١", "٣", "¹0", " 1", "1.0", "-1", "+1", "1_000"):
        assert not text.ascii_digits(other), other
    assert [chr(c) for c in range(0x110000) if text.ascii_digits(chr(c))] == list("0123456789")



def test_whole_number_is_bounded_and_ascii() -> None:
    assert text.whole_number("0", 3) == 0 and text.whole_number("200", 3) == 200
    for refused in ("", "1000", "²", "-1", " 1", "1" * 5000):  # 5,000 digits: int() would raise
        assert text.whole_number(refused, 3) is None, refused
