"""The channel-break rule on single strings: the shared cases, lookalikes, decoded views, the fast path."""

from __future__ import annotations

import json
import unicodedata

import pytest

from switchboard.intake.channel_break import (
    _NFKC_TRIGGERS,
    _TAG,
    RULE_DECODED,
    RULE_PLAIN,
    _decode,
    _fold,
    _normal,
    _tables,
    breaks_channel,
    check_text,
    find_break,
    iter_strings,
)
from tests.conftest import CASES

_LINES = [json.loads(line) for line in (CASES / "channel-break.jsonl").read_text(encoding="utf-8").splitlines()
          if line.strip()]


@pytest.mark.parametrize("case", _LINES, ids=[c["why"] for c in _LINES])
def test_every_shared_case_gets_its_verdict(case: dict[str, str]) -> None:
    assert (check_text(case["text"]) is not None) == (case["verdict"] == "reject"), case


ORDINARY = [
    "<!channel> deploy is done", "<#C123|general> please look", "<@U024BE7LH> hi", "<https://x.io|link>",
    "x <= y && y >= z", "see </a> and <b>", "channel", "«channel»", "1 < 2", "50% off & more",
]


@pytest.mark.parametrize("text", ORDINARY)
def test_ordinary_text_and_slack_markup_pass(text: str) -> None:
    assert check_text(text) is None


LOOKALIKES = [
    "\u2039/channel\u203a",            # single angle quotation marks (confusables: ‹ → <)
    "<\u2215channel>",                 # division slash
    "</\u0441h\u0430nnel>",            # Cyrillic es and a
    "</channe1>",                      # digit one → l
    "</CHANNEI>",                      # capital I → l
    "<\u2060/channel>",                # word joiner
    "</chan\u0332nel>",                # combining low line
    "</chan\x00nel>",                  # NUL
    "<channel\u200bsource=\"x\">",     # an ignorable keeps the word boundary
    "\u3008/channel\u3009",            # CJK angle brackets (explicit list)
    "<\\/channel>",                    # JSON-escaped slash
]


@pytest.mark.parametrize("text", LOOKALIKES)
def test_lookalikes_and_invisibles_are_rejected(text: str) -> None:
    assert check_text(text) == RULE_PLAIN


ENCODED = [
    "\\u003c/channel\\u003e", "\\x3c/channel\\x3e", "&lt;/channel&gt;", "&#x3c;/channel&#x3e;",
    "%3C%2Fchannel%3E", "%253C%252Fchannel%253E", "&amp;lt;/channel&amp;gt;", "\\u0026lt;/channel",
    "\uff05\uff13\uff23/channel",      # fullwidth percent-encoding
]


@pytest.mark.parametrize("text", ENCODED)
def test_decoded_views_are_checked(text: str) -> None:
    assert check_text(text) == RULE_DECODED


def test_three_layers_of_encoding_are_not_decoded() -> None:
    assert check_text("%25253C/channel") is None


def test_find_break_names_a_key_without_echoing_it() -> None:
    found = find_break({"a": [{"ok": 1, "</channel>": "x"}]})
    assert found is not None and found.path == "$.a[0].{key#1}" and found.rule == RULE_PLAIN


def test_trigger_set_is_complete_over_every_code_point() -> None:
    """A character outside the trigger set can never put a < (or a decoder start) in a view."""
    t = _tables()
    missing = []
    for cp in range(0x110000):
        ch = chr(cp)
        if t.trigger.search(ch):
            continue
        nfkd = unicodedata.normalize("NFKD", ch)
        if any(c in nfkd for c in "<&%\\") or "<" in _fold(_normal(ch, t), t):
            missing.append(hex(cp))
    assert missing == []


def _reference(text: str) -> bool:
    """The rule as specified: build the detection view, then search the plain regex (views 0-2)."""
    t = _tables()
    normal = _normal(text, t)
    for depth in range(3):
        if _TAG.search(_fold(normal, t)):
            return True
        decoded = _decode(normal)
        if decoded == normal:
            return False
        normal = _normal(decoded, t)
    return False


def _disagreements() -> list[str]:
    """Texts where the fast regex and the detection view disagree: every lookalike (and case
    variant) replacing, inserted at or appended after each slot of ``</channel>``."""
    t = _tables()
    base = "</channel>"
    chars = set(t.mapping) | set("</>CHANELchanel|1I\\ ") | {"\u0130", "\u212a", "\u017f", "\u0399"}
    disagreements = []
    for i in range(len(base) + 1):
        for ch in chars:
            for text in (base[:i] + ch + base[i + 1:], base[:i] + ch + base[i:], f"x {base[:i]}{ch}"):
                if (check_text(text) is not None) != _reference(text):
                    disagreements.append(text)
    return disagreements


def test_fast_regex_agrees_with_the_detection_view_for_every_lookalike_in_every_slot() -> None:
    for case in _LINES:
        assert (check_text(case["text"]) is not None) == _reference(case["text"]), case
    assert _disagreements() == []


def test_a_typical_slack_event_payload_is_accepted() -> None:
    from switchboard.intake.screening import find_body_break

    payload = {
        "token": "Jhj5dZrVaK7ZwHHjRyZWjbDl", "team_id": "T024BE7LD", "api_app_id": "A0KRD7HC3",
        "event": {"type": "message", "channel": "C024BE7LR", "user": "U2147483697",
                  "text": "<!channel> deploy is done, see <#C024BE7LR|general> and <@U2147483697> "
                          "<https://example.com/runs/42|run 42> &lt;3",
                  "blocks": [{"type": "rich_text", "elements": [{"type": "rich_text_section", "elements": [
                      {"type": "broadcast", "range": "channel"}, {"type": "channel", "channel_id": "C024BE7LR"}]}]}],
                  "ts": "1355517523.000005", "channel_type": "channel"},
        "type": "event_callback", "event_id": "Ev0PV52K21", "event_time": 1355517523,
    }
    body = json.dumps(payload).encode()
    assert find_body_break(body, {"content-type": "application/json"}, payload) is None


def test_strings_are_checked_at_once_but_never_across_two_strings() -> None:
    assert find_break({"a": "x <", "b": "/channel>"}) is None
    assert find_break(["%3", "C/channel"]) is None
    assert find_break(["c\u0301", "<chan", "nel>"]) is None
    found = find_break({"a": ["ok", {"b": "fine", "c": "<\u200bchannel"}]})
    assert found is not None and found.path == "$.a[1].c"


COMPOSING = [
    "<\u0338/channel>", "</cha\u0301nnel>", "</channe\u0301l>", "</c\u0327hannel>", "</chan\u0303nel>",
    "</ch\u2800annel>", "</ch\u0903annel>", "\u226e/channel>",
]


ASTRAL = [
    "</chan\U000e0001nel>",            # a language tag (default-ignorable, above the BMP)
    "</chan\U0001d165nel>",            # a combining stem (Mc, above the BMP)
    "<\U0001d41c\U0001d421annel>",     # mathematical bold c h (NFKD)
    "\U0001d236/\U0001f74chann\U000118ael>",  # lookalikes above the BMP that NFKD keeps
]


@pytest.mark.parametrize("text", COMPOSING)
def test_marks_that_compose_with_a_letter_do_not_hide_the_tag(text: str) -> None:
    assert check_text(text) is not None
    assert _reference(text)


@pytest.mark.timeout(60)  # a hang guard, not a speed goal: the backtracking pattern took minutes
def test_long_runs_of_whitespace_after_lt_do_not_backtrack() -> None:
    text = ("<" + "\t" * 65000 + "x") * 20
    assert check_text(text) is None


def test_tables_built_afresh_give_every_verdict() -> None:
    """The tables are built once per process, by whichever check comes first; here they are
    built again so that the verdicts below judge the code that builds them (mutation testing
    maps a function to the tests that run it)."""
    _tables.cache_clear()
    t = _tables()
    verdicts = {c["text"]: (check_text(c["text"]) is not None) == (c["verdict"] == "reject") for c in _LINES}
    assert [text for text, right in verdicts.items() if not right] == []
    assert [text for text in ORDINARY if check_text(text) is not None] == []
    assert [text for text in LOOKALIKES if check_text(text) != RULE_PLAIN] == []
    assert [text for text in ENCODED if check_text(text) != RULE_DECODED] == []
    assert [text for text in COMPOSING if check_text(text) is None] == []
    assert [text for text in ASTRAL if check_text(text) != RULE_PLAIN] == []
    assert _disagreements() == []
    # The trigger set holds every character that maps to < or decomposes to a decoder start.
    starters = set(t.mapping) | set(_NFKC_TRIGGERS) | set("<&%\\")
    missing = [hex(ord(ch)) for ch in starters if not t.trigger.search(ch) and (
        any(c in unicodedata.normalize("NFKD", ch) for c in "<&%\\") or "<" in _fold(_normal(ch, t), t))]
    assert missing == []
    # Controls but not the whitespace the tag regex reads, marks (enclosing ones too) and the
    # ends of each run of them, nothing else.
    assert [t.ignorable.match(c) is not None for c in "\x08\x09\x0e\x1f\x20\x7f\x9f\xa0"] == [
        True, False, True, True, False, True, True, False]
    assert [t.ignorable.match(c) is not None for c in "\u036f\u0370\u20dd\u00e9Xx"] == [
        True, False, True, False, False, False]
    assert (0xE0FFF in t.astral_ignorable, 0xE1000 in t.astral_ignorable) == (True, False)
    assert (0x1D169 in t.astral_ignorable, 0x1D16A in t.astral_ignorable) == (True, False)
    # A lookalike the data lists between left-to-right marks (Hebrew vav for l).
    assert t.mapping["\u05d5"] == "l" and check_text("</channe\u05d5>") == RULE_PLAIN
    assert check_text("</Xhannel>") is None
    # A capital whose lower case is a lookalike (Cyrillic SHHA: h).
    assert check_text("</c\u04baannel>") == RULE_PLAIN


@pytest.mark.parametrize(("escaped", "decoded"), [
    ("\\U0000003c/channel", "</channel"),
    ("\\U0010ffff", "\U0010ffff"),          # the last code point
    ("\\U00110000", "\\U00110000"),         # past it: left as written
    ("\\ud7ff \\ud800 \\udfff \\ue000", "\ud7ff \\ud800 \\udfff \ue000"),  # surrogates are left as written
])
def test_escapes_decode_to_code_points_and_only_to_code_points(escaped: str, decoded: str) -> None:
    assert _decode(escaped) == decoded


def test_breaks_channel_and_the_paths_of_every_string_and_key() -> None:
    assert breaks_channel("</channel>") is True and breaks_channel("hello") is False
    assert list(iter_strings({"a": ["x", {"b": "y"}]})) == [("$.a", "a"), ("$.a[0]", "x"), ("$.a[1].b", "b"),
                                                            ("$.a[1].b", "y")]


def test_the_detection_view_keeps_what_it_does_not_map() -> None:
    t = _tables()
    assert _fold(_normal("</CHANNEL> \U0001f600 \u00e9", t), t) == "</channel> \U0001f600 e "


def test_invalid_percent_encoded_bytes_do_not_stop_decoding() -> None:
    assert check_text("%ff%3C/channel%3E") == RULE_DECODED
