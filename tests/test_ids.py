"""Ids (DESIGN.md §1): a prefix, ``_``, random bytes in lower-case base32; a delivery's led by its time."""

from __future__ import annotations

import pytest


def test_new_id_is_lower_case_base32_of_its_random_bytes(monkeypatch: pytest.MonkeyPatch) -> None:
    # Issue 11: the 10-byte ids (per delivery, per todo) skip base64.b32encode; the same text.
    import base64
    import os

    from switchboard.models import base

    for raw in [bytes(10), b"\xff" * 10, bytes(range(10)), *(os.urandom(10) for _ in range(2000)),
                os.urandom(16), os.urandom(5)]:
        monkeypatch.setattr(base.os, "urandom", lambda n, raw=raw: raw[:n])
        assert base.new_id("dlv", len(raw)) == "dlv_" + base64.b32encode(raw).decode().rstrip("=").lower()


def test_a_delivery_id_is_a_ulid_layout_in_the_id_alphabet_sorting_by_its_millisecond(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # Issue 11: delivery ids lead with their time so the deliveries' primary-key index grows at
    # its end. The layout is a ULID's (48 bits of ms, 80 random); the characters stay [a-z2-7].
    import random
    import re

    from switchboard.models import base

    def made_at(ms: int, raw: bytes) -> str:
        monkeypatch.setattr(base.time, "time_ns", lambda: ms * 1_000_000 + 999_999)
        monkeypatch.setattr(base.os, "urandom", lambda n: raw[:n])
        return base.new_ordered_id("dlv")

    # Decoding with the sorted alphabet gives back the millisecond and the random bytes.
    alphabet = "234567abcdefghijklmnopqrstuvwxyz"
    for ms, raw in [(0, bytes(10)), (2**48 - 1, b"\xff" * 10), (1_796_601_600_000, bytes(range(10)))]:
        made = made_at(ms, raw)
        assert re.fullmatch(r"dlv_[a-z2-7]{26}", made), made
        value = 0
        for ch in made[4:]:
            value = value * 32 + alphabet.index(ch)
        assert (value >> 80, (value & (2**80 - 1)).to_bytes(10, "big")) == (ms, raw)
    # Later milliseconds sort later, whatever the random bytes.
    times = sorted(random.sample(range(1_796_601_600_000, 1_796_688_000_000), 500))
    ids = [made_at(ms, random.randbytes(10)) for ms in times]
    assert ids == sorted(ids)
    monkeypatch.undo()
    assert len({base.new_ordered_id("dlv") for _ in range(1000)}) == 1000


def test_a_delivery_made_by_the_model_has_an_ordered_id(monkeypatch: pytest.MonkeyPatch) -> None:
    from switchboard.models import Delivery, base

    monkeypatch.setattr(base.time, "time_ns", lambda: 1_796_601_600_000_000_000)
    first = Delivery(source_id="s", project_id="p").id
    monkeypatch.setattr(base.time, "time_ns", lambda: 1_796_601_600_001_000_000)
    assert len(first) == 30 and Delivery(source_id="s", project_id="p").id > first


def test_an_ordered_id_stands_for_the_time_it_is_given_to_the_millisecond() -> None:
    # The receiver passes the received_at it stores (the hub's clock, CONVENTIONS: inject the clock).
    from datetime import UTC, datetime, timedelta, timezone

    from switchboard.models.base import new_ordered_id

    at = datetime(2026, 12, 7, 10, 30, 0, 999_999, tzinfo=UTC)
    ids = [new_ordered_id("dlv", at + timedelta(microseconds=us)) for us in (0, 1, 1000, 1001)]
    assert ids[0][:14] != ids[1][:14] == ids[2][:14] != ids[3][:14]  # the ms: .999, 1.000, 1.000, 1.001
    assert new_ordered_id("dlv", at)[:14] == new_ordered_id("dlv", at.astimezone(timezone(timedelta(hours=5))))[:14]
